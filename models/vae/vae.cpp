#include "models/vae/vae.h"

#include <cmath>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

VaeConfig VaeConfig::from_json(const nlohmann::json& j) {
    VaeConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    const ComponentClass* k = find_component_class(get("_class_name", std::string()));
    c.latent_bn = k && k->kind == ComponentKind::vae_flux2;
    // Messages name the class as diffusers does.
    const std::string cls = class_name(c.latent_bn ? ComponentKind::vae_flux2 : ComponentKind::vae);
    c.in_channels = get("in_channels", 3);
    c.out_channels = get("out_channels", 3);
    // The classes' defaults where they differ (AutoencoderKL, AutoencoderKLFlux2).
    const bool f2 = c.latent_bn;
    c.latent_channels = get("latent_channels", f2 ? 32 : 4);
    c.layers_per_block = get("layers_per_block", f2 ? 2 : 1);
    c.groups = get("norm_num_groups", 32);
    c.block_out = get("block_out_channels", f2 ? std::vector<int>{128, 256, 512, 512} : std::vector<int>{64});
    c.mid_attention = get("mid_block_add_attention", true);
    c.quant_conv = get("use_quant_conv", true);
    c.post_quant_conv = get("use_post_quant_conv", true);
    c.decoder_block_out = c.block_out;
    if (c.latent_bn) {  // AutoencoderKLFlux2: no scaling_factor / shift_factor; the bn statistics instead
        c.scaling_factor = 1, c.shift_factor = 0;
        c.decoder_block_out = get("decoder_block_out_channels", c.block_out);  // `decoder_block_out_channels or ...`
        c.patch_size = get("patch_size", std::vector<int>{2, 2});
        c.batch_norm_eps = get("batch_norm_eps", 1e-4);
    } else {
        c.scaling_factor = get("scaling_factor", 0.18215);
        c.shift_factor = get("shift_factor", 0.0);
    }
    if (j.contains("sample_size") && j["sample_size"].is_array() && !j["sample_size"].empty())
        c.sample_size = j["sample_size"][0].get<int>();
    else
        c.sample_size = get("sample_size", f2 ? 1024 : 32);
    std::string act = get("act_fn", std::string("silu"));
    KILN_CHECK(act == "silu", cls, ": act_fn '", act, "' is not supported (silu)");
    for (auto& t : get("down_block_types", std::vector<std::string>{"DownEncoderBlock2D"}))
        KILN_CHECK(t == "DownEncoderBlock2D", cls, ": down block '", t, "' is not supported");
    for (auto& t : get("up_block_types", std::vector<std::string>{"UpDecoderBlock2D"}))
        KILN_CHECK(t == "UpDecoderBlock2D", cls, ": up block '", t, "' is not supported");
    KILN_CHECK(!c.block_out.empty() && !c.decoder_block_out.empty(), cls, ": empty block_out_channels");
    return c;
}

namespace {
constexpr float kEps = 1e-6f;  // resnet_eps of every VAE block

ir::Val conv(Builder& b, const std::string& name, ir::Val x, int cin, int cout, int k, int stride, int pad) {
    ir::Val w = b.matrix(name + ".weight", {cout, cin, k, k});
    ir::Val bias = b.vec(name + ".bias", {cout});
    return b.g().conv2d(x, w, bias, {stride, stride, pad, pad});
}

ir::Val group_norm(Builder& b, const std::string& name, ir::Val x, int ch, int groups) {
    return b.g().group_norm(x, groups, b.vec(name + ".weight", {ch}), b.vec(name + ".bias", {ch}), kEps);
}

// ResnetBlock2D without time embedding: x + conv2(silu(norm2(conv1(silu(norm1(x)))))), 1x1 shortcut if cin != cout.
ir::Val resnet(Builder& b, const std::string& name, ir::Val x, int cin, int cout, int groups) {
    auto& g = b.g();
    ir::Val h = conv(b, name + ".conv1", g.silu(group_norm(b, name + ".norm1", x, cin, groups)), cin, cout, 3, 1, 1);
    h = conv(b, name + ".conv2", g.silu(group_norm(b, name + ".norm2", h, cout, groups)), cout, cout, 3, 1, 1);
    ir::Val sc = cin != cout ? conv(b, name + ".conv_shortcut", x, cin, cout, 1, 1, 0) : x;
    return g.add(sc, h);
}

// Mid-block attention: one head over the H*W positions, group norm first, residual after.
ir::Val attention(Builder& b, const std::string& name, ir::Val x, int ch, int groups) {
    auto& g = b.g();
    const Shape s = g.shape(x);  // [B, C, H, W]
    ir::Val h = group_norm(b, name + ".group_norm", x, ch, groups);
    h = g.transpose(g.reshape(h, {s[0], ch, s[2] * s[3]}), 1, 2);  // [B, HW, C]
    h = self_attention(b, name, h, ch, 1);
    h = g.reshape(g.transpose(h, 1, 2), s);  // [B, C, H, W]
    return g.add(h, x);
}

ir::Val mid_block(Builder& b, const std::string& name, ir::Val x, int ch, const VaeConfig& c) {
    x = resnet(b, name + ".resnets.0", x, ch, ch, c.groups);
    if (c.mid_attention) x = attention(b, name + ".attentions.0", x, ch, c.groups);
    return resnet(b, name + ".resnets.1", x, ch, ch, c.groups);
}

// F.pad(x, (0, 1, 0, 1)): one zero column on the right, one zero row at the bottom.
ir::Val pad_right_bottom(Builder& b, ir::Val x, const std::string& name) {
    auto& g = b.g();
    Shape s = g.shape(x);
    ir::Val col = b.constant(name + ".zero_col", Tensor(DType::f32, {s[0], s[1], s[2], 1}));
    x = g.concat(x, col, 3);
    ir::Val row = b.constant(name + ".zero_row", Tensor(DType::f32, {s[0], s[1], 1, s[3] + 1}));
    return g.concat(x, row, 2);
}
}  // namespace

void build_vae_decoder(Builder& b, const VaeConfig& c, int B, int h, int w) {
    auto& g = b.g();
    const std::vector<int>& ch = c.decoder_block_out;
    const int L = c.latent_channels, top = ch.back();
    ir::Val z = g.input("latents", {B, L, h, w});
    if (c.post_quant_conv) z = conv(b, "post_quant_conv", z, L, L, 1, 1, 0);
    ir::Val x = conv(b, "decoder.conv_in", z, L, top, 3, 1, 1);
    x = mid_block(b, "decoder.mid_block", x, top, c);
    const int n = (int)ch.size();
    int out_ch = top;
    for (int i = 0; i < n; ++i) {
        const std::string pre = "decoder.up_blocks." + std::to_string(i);
        int in_ch = out_ch;
        out_ch = ch[(size_t)(n - 1 - i)];
        for (int j = 0; j <= c.layers_per_block; ++j)
            x = resnet(b, pre + ".resnets." + std::to_string(j), x, j == 0 ? in_ch : out_ch, out_ch, c.groups);
        if (i != n - 1) x = conv(b, pre + ".upsamplers.0.conv", g.upsample_nearest2x(x), out_ch, out_ch, 3, 1, 1);
    }
    x = g.silu(group_norm(b, "decoder.conv_norm_out", x, ch[0], c.groups));
    g.output(conv(b, "decoder.conv_out", x, ch[0], c.out_channels, 3, 1, 1), "decoded");
}

void build_vae_encoder(Builder& b, const VaeConfig& c, int B, int H, int W) {
    auto& g = b.g();
    const int L = c.latent_channels, n = (int)c.block_out.size();
    ir::Val x = g.input("image", {B, c.in_channels, H, W});
    x = conv(b, "encoder.conv_in", x, c.in_channels, c.block_out[0], 3, 1, 1);
    int out_ch = c.block_out[0];
    for (int i = 0; i < n; ++i) {
        const std::string pre = "encoder.down_blocks." + std::to_string(i);
        int in_ch = out_ch;
        out_ch = c.block_out[(size_t)i];
        for (int j = 0; j < c.layers_per_block; ++j)
            x = resnet(b, pre + ".resnets." + std::to_string(j), x, j == 0 ? in_ch : out_ch, out_ch, c.groups);
        if (i != n - 1)
            x = conv(b, pre + ".downsamplers.0.conv", pad_right_bottom(b, x, pre + ".pad"), out_ch, out_ch, 3, 2, 0);
    }
    x = mid_block(b, "encoder.mid_block", x, c.block_out.back(), c);
    x = g.silu(group_norm(b, "encoder.conv_norm_out", x, c.block_out.back(), c.groups));
    x = conv(b, "encoder.conv_out", x, c.block_out.back(), 2 * L, 3, 1, 1);
    if (c.quant_conv) x = conv(b, "quant_conv", x, 2 * L, 2 * L, 1, 1, 0);
    auto mv = g.chunk(x, 1, 2);
    g.output(mv[0], "latent_mean");
    g.output(mv[1], "latent_logvar_raw");
}

Flux2LatentNorm Flux2LatentNorm::from(const WeightStore& ws, const VaeConfig& c) {
    KILN_CHECK(c.latent_bn, "the latent batch-norm statistics are ", class_name(ComponentKind::vae_flux2),
               "'s (FLUX.2); this VAE has none");
    KILN_CHECK(c.patch_size == std::vector<int>({2, 2}), class_name(ComponentKind::vae_flux2), ": patch_size [",
               c.patch_size.size() > 0 ? c.patch_size[0] : 0, ", ", c.patch_size.size() > 1 ? c.patch_size[1] : 0,
               "] is not supported (the FLUX.2 pipelines patchify 2x2)");
    Flux2LatentNorm n;
    n.latent_channels = c.latent_channels;
    const int64_t K = 4 * (int64_t)c.latent_channels;
    auto stat = [&](const char* name) {
        const TensorMeta* m = ws.find(name);
        KILN_CHECK(m && m->shape == Shape{K}, ws.source(), ": ", class_name(ComponentKind::vae_flux2), " needs '", name,
                   "' [", K, "]", m ? ", got " + shape_str(m->shape) : std::string(", missing"));
        return ws.read(name).to_f32();
    };
    n.mean = stat("bn.running_mean");
    const std::vector<float> var = stat("bn.running_var");
    // torch.sqrt(running_var + batch_norm_eps): the Python float eps added in float32.
    for (float v : var) n.std.push_back(std::sqrt(v + (float)c.batch_norm_eps));
    return n;
}

namespace {
// out[b, c, 2y+dy, 2x+dx] = in(b, c*4 + dy*2 + dx, y, x) * std + mean, `in` reading either layout.
template <class In>
Tensor denormalize_unpatchify(int64_t B, int64_t C, int64_t h, int64_t w, const Flux2LatentNorm& n, In in) {
    Tensor out(DType::f32, {B, C, 2 * h, 2 * w});
    float* o = out.data<float>();
    for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t y = 0; y < 2 * h; ++y)
                for (int64_t x = 0; x < 2 * w; ++x) {
                    const int64_t k = c * 4 + (y % 2) * 2 + x % 2;
                    const float v = in(b, k, y / 2, x / 2) * n.std[(size_t)k];  // two float32 ops, as torch
                    o[((b * C + c) * 2 * h + y) * 2 * w + x] = v + n.mean[(size_t)k];
                }
    return out;
}

void check_norm(const Flux2LatentNorm& n, int64_t K, const char* what, const Shape& s) {
    KILN_CHECK(
        n.latent_channels > 0 && (int64_t)n.mean.size() == 4 * n.latent_channels && n.std.size() == n.mean.size(), what,
        ": no latent statistics (Flux2LatentNorm::from)");
    KILN_CHECK(K == 4 * n.latent_channels, what, ": ", shape_str(s), " is ", K, " patchified channels; the VAE's ",
               n.latent_channels, " latent channels patchify to ", 4 * n.latent_channels);
}
}  // namespace

Tensor flux2_unpack_denormalize(const Tensor& tokens, const Flux2LatentNorm& n, int h, int w) {
    const Shape& s = tokens.shape;
    KILN_CHECK(s.size() == 3 && h > 0 && w > 0 && s[1] == (int64_t)h * w, "flux2_unpack_denormalize: tokens ",
               shape_str(s), " are not [B, ", h, "*", w, ", 4C]");
    check_norm(n, s[2], "flux2_unpack_denormalize", s);
    const std::vector<float> t = tokens.to_f32();
    const int64_t K = s[2], N = s[1];
    return denormalize_unpatchify(s[0], K / 4, h, w, n, [&](int64_t b, int64_t k, int64_t y, int64_t x) {
        return t[(size_t)((b * N + y * w + x) * K + k)];  // token y*w + x, channel k
    });
}

Tensor flux2_denormalize_unpatchify(const Tensor& patchified, const Flux2LatentNorm& n) {
    const Shape& s = patchified.shape;
    KILN_CHECK(s.size() == 4, "flux2_denormalize_unpatchify: latents ", shape_str(s), " are not [B, 4C, h, w]");
    check_norm(n, s[1], "flux2_denormalize_unpatchify", s);
    const std::vector<float> t = patchified.to_f32();
    const int64_t K = s[1], h = s[2], w = s[3];
    return denormalize_unpatchify(s[0], K / 4, h, w, n, [&](int64_t b, int64_t k, int64_t y, int64_t x) {
        return t[(size_t)(((b * K + k) * h + y) * w + x)];
    });
}

Tensor flux2_patchify_normalize(const Tensor& latents, const Flux2LatentNorm& n) {
    const Shape& s = latents.shape;
    KILN_CHECK(s.size() == 4 && s[2] % 2 == 0 && s[3] % 2 == 0, "flux2_patchify_normalize: latents ", shape_str(s),
               " are not [B, C, H, W] with H and W even");
    check_norm(n, 4 * s[1], "flux2_patchify_normalize", s);
    const std::vector<float> t = latents.to_f32();
    const int64_t B = s[0], C = s[1], H = s[2], W = s[3], h = H / 2, w = W / 2;
    Tensor out(DType::f32, {B, 4 * C, h, w});
    float* o = out.data<float>();
    for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t y = 0; y < H; ++y)
                for (int64_t x = 0; x < W; ++x) {
                    const int64_t k = c * 4 + (y % 2) * 2 + x % 2;
                    const float v = t[(size_t)(((b * C + c) * H + y) * W + x)] - n.mean[(size_t)k];
                    o[((b * 4 * C + k) * h + y / 2) * w + x / 2] = v / n.std[(size_t)k];
                }
    return out;
}

}  // namespace kiln::models
