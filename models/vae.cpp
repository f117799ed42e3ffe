#include "models/vae.h"

#include "models/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers / transformers do.
std::string cls() { return class_name(ComponentKind::vae); }
}  // namespace

VaeConfig VaeConfig::from_json(const nlohmann::json& j) {
    VaeConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.in_channels = get("in_channels", 3);
    c.out_channels = get("out_channels", 3);
    c.latent_channels = get("latent_channels", 4);
    c.layers_per_block = get("layers_per_block", 1);
    c.groups = get("norm_num_groups", 32);
    c.block_out = get("block_out_channels", std::vector<int>{64});
    c.mid_attention = get("mid_block_add_attention", true);
    c.quant_conv = get("use_quant_conv", true);
    c.post_quant_conv = get("use_post_quant_conv", true);
    c.scaling_factor = get("scaling_factor", 0.18215);
    c.shift_factor = get("shift_factor", 0.0);
    if (j.contains("sample_size") && j["sample_size"].is_array() && !j["sample_size"].empty())
        c.sample_size = j["sample_size"][0].get<int>();
    else
        c.sample_size = get("sample_size", 32);
    std::string act = get("act_fn", std::string("silu"));
    KILN_CHECK(act == "silu", cls(), ": act_fn '", act, "' is not supported (silu)");
    for (auto& t : get("down_block_types", std::vector<std::string>{"DownEncoderBlock2D"}))
        KILN_CHECK(t == "DownEncoderBlock2D", cls(), ": down block '", t, "' is not supported");
    for (auto& t : get("up_block_types", std::vector<std::string>{"UpDecoderBlock2D"}))
        KILN_CHECK(t == "UpDecoderBlock2D", cls(), ": up block '", t, "' is not supported");
    KILN_CHECK(!c.block_out.empty(), cls(), ": empty block_out_channels");
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

ir::Val mid_block(Builder& b, const std::string& name, ir::Val x, const VaeConfig& c) {
    int ch = c.block_out.back();
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
    const int L = c.latent_channels, top = c.block_out.back();
    ir::Val z = g.input("latents", {B, L, h, w});
    if (c.post_quant_conv) z = conv(b, "post_quant_conv", z, L, L, 1, 1, 0);
    ir::Val x = conv(b, "decoder.conv_in", z, L, top, 3, 1, 1);
    x = mid_block(b, "decoder.mid_block", x, c);
    const int n = (int)c.block_out.size();
    int out_ch = top;
    for (int i = 0; i < n; ++i) {
        const std::string pre = "decoder.up_blocks." + std::to_string(i);
        int in_ch = out_ch;
        out_ch = c.block_out[(size_t)(n - 1 - i)];
        for (int j = 0; j <= c.layers_per_block; ++j)
            x = resnet(b, pre + ".resnets." + std::to_string(j), x, j == 0 ? in_ch : out_ch, out_ch, c.groups);
        if (i != n - 1) x = conv(b, pre + ".upsamplers.0.conv", g.upsample_nearest2x(x), out_ch, out_ch, 3, 1, 1);
    }
    x = g.silu(group_norm(b, "decoder.conv_norm_out", x, c.block_out[0], c.groups));
    g.output(conv(b, "decoder.conv_out", x, c.block_out[0], c.out_channels, 3, 1, 1), "decoded");
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
    x = mid_block(b, "encoder.mid_block", x, c);
    x = g.silu(group_norm(b, "encoder.conv_norm_out", x, c.block_out.back(), c.groups));
    x = conv(b, "encoder.conv_out", x, c.block_out.back(), 2 * L, 3, 1, 1);
    if (c.quant_conv) x = conv(b, "quant_conv", x, 2 * L, 2 * L, 1, 1, 0);
    auto mv = g.chunk(x, 1, 2);
    g.output(mv[0], "latent_mean");
    g.output(mv[1], "latent_logvar_raw");
}

}  // namespace kiln::models
