#include "models/vae/dc_ae.h"

#include <cmath>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
using Cfg = DcAeConfig;
std::string cls() { return class_name(ComponentKind::dc_ae); }

// A per-stage config value: a string applies to every stage, a list gives one per stage.
std::vector<std::string> per_stage(const nlohmann::json& j, const char* key, const std::string& def, size_t n) {
    if (!j.contains(key) || j[key].is_null()) return std::vector<std::string>(n, def);
    if (j[key].is_string()) return std::vector<std::string>(n, j[key].get<std::string>());
    auto v = config_value(j, key, std::vector<std::string>{});
    KILN_CHECK(v.size() == n, cls(), ": '", key, "' has ", v.size(), " entries for ", n, " stages");
    return v;
}

Cfg::Act activation(const std::string& key, const std::string& a) {
    if (a == "silu" || a == "swish") return Cfg::Act::silu;
    KILN_CHECK(a == "relu", cls(), ": ", key, " '", a, "' is not supported (silu, swish, relu)");
    return Cfg::Act::relu;
}

// The stages of one side from its block types, widths, layer counts and multiscales.
std::vector<Cfg::Stage> stages(const nlohmann::json& j, const std::string& side, const std::vector<int>& def_layers) {
    auto key = [&](const char* k) { return side + "_" + k; };
    const auto ch =
        config_value(j, key("block_out_channels").c_str(), std::vector<int>{128, 256, 512, 512, 1024, 1024});
    const size_t n = ch.size();
    KILN_CHECK(n >= 1, cls(), ": '", key("block_out_channels"), "' is empty");
    const auto layers = config_value(j, key("layers_per_block").c_str(), def_layers);
    const auto types = per_stage(j, key("block_types").c_str(), "ResBlock", n);
    const auto ms =
        config_value(j, key("qkv_multiscales").c_str(), std::vector<std::vector<int>>{{}, {}, {}, {5}, {5}, {5}});
    KILN_CHECK(layers.size() == n && ms.size() == n, cls(), ": ", side, " block_out_channels, layers_per_block and ",
               "qkv_multiscales must have one entry per stage (", n, ")");
    std::vector<Cfg::Stage> s(n);
    for (size_t i = 0; i < n; ++i) {
        s[i].channels = ch[i];
        s[i].layers = layers[i];
        s[i].scales = ms[i];
        KILN_CHECK(types[i] == "ResBlock" || types[i] == "EfficientViTBlock", cls(), ": ", key("block_types"), " '",
                   types[i], "' is not supported (ResBlock, EfficientViTBlock)");
        s[i].block = types[i] == "ResBlock" ? Cfg::Block::res : Cfg::Block::vit;
        KILN_CHECK(ch[i] > 0 && layers[i] >= 0, cls(), ": ", side, " stage ", i, " has ", ch[i], " channels and ",
                   layers[i], " layers");
        for (int k : ms[i])
            KILN_CHECK(k > 0 && k % 2 == 1, cls(), ": ", key("qkv_multiscales"), " kernel ", k, " is not odd");
    }
    KILN_CHECK(s[0].layers > 0 || n >= 2, cls(), ": ", side, " stage 0 has no layers and there is no stage 1");
    return s;
}
}  // namespace

DcAeConfig DcAeConfig::from_json(const nlohmann::json& j) {
    DcAeConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.in_channels = get("in_channels", 3);
    c.latent_channels = get("latent_channels", 32);
    c.head_dim = get("attention_head_dim", 32);
    c.encoder = stages(j, "encoder", {2, 2, 2, 3, 3, 3});
    c.decoder = stages(j, "decoder", {3, 3, 3, 3, 3, 3});
    KILN_CHECK(c.encoder.size() == c.decoder.size(), cls(), ": the encoder has ", c.encoder.size(),
               " stages, the decoder ", c.decoder.size());
    const size_t n = c.decoder.size();
    const auto norms = per_stage(j, "decoder_norm_types", "rms_norm", n);
    const auto acts = per_stage(j, "decoder_act_fns", "silu", n);
    for (size_t i = 0; i < n; ++i) {
        KILN_CHECK(norms[i] == "rms_norm" || norms[i] == "batch_norm", cls(), ": decoder_norm_types '", norms[i],
                   "' is not supported (rms_norm, batch_norm)");
        c.decoder[i].norm = norms[i] == "rms_norm" ? Norm::rms : Norm::batch;
        c.decoder[i].act = activation("decoder_act_fns", acts[i]);
    }
    // As diffusers tests them: any other value is a strided conv ("conv") / a pixel shuffle.
    c.pixel_shuffle_up = get("upsample_block_type", std::string("pixel_shuffle")) != "interpolate";
    c.pixel_unshuffle_down = get("downsample_block_type", std::string("pixel_unshuffle")) == "pixel_unshuffle";
    c.encoder_out_shortcut = get("encoder_out_shortcut", true);
    c.decoder_in_shortcut = get("decoder_in_shortcut", true);
    c.conv_act = activation("decoder_conv_act_fn", get("decoder_conv_act_fn", std::string("relu")));
    c.scaling_factor = get("scaling_factor", 1.0);
    KILN_CHECK(c.in_channels > 0 && c.latent_channels > 0 && c.head_dim > 0, cls(), ": in_channels ", c.in_channels,
               ", latent_channels ", c.latent_channels, ", attention_head_dim ", c.head_dim);
    // The shortcuts average / repeat whole groups of channels; the attention splits channels into heads.
    const int top_e = c.encoder.back().channels, top_d = c.decoder.back().channels;
    KILN_CHECK(!c.encoder_out_shortcut || top_e % c.latent_channels == 0, cls(), ": encoder width ", top_e,
               " is not a multiple of latent_channels ", c.latent_channels);
    KILN_CHECK(!c.decoder_in_shortcut || top_d % c.latent_channels == 0, cls(), ": decoder width ", top_d,
               " is not a multiple of latent_channels ", c.latent_channels);
    for (const auto* side : {&c.encoder, &c.decoder})
        for (const Stage& s : *side)
            KILN_CHECK(s.block != Block::vit || s.channels % c.head_dim == 0, cls(), ": width ", s.channels,
                       " is not a multiple of attention_head_dim ", c.head_dim);
    return c;
}

namespace {
constexpr float kEps = 1e-5f;  // RMSNorm and BatchNorm2d of every DC-AE block

ir::Val conv(Builder& b, const std::string& name, ir::Val x, int cin, int cout, int k, int stride = 1, bool bias = true,
             int groups = 1) {
    ir::Val w = b.matrix(name + ".weight", {cout, cin / groups, k, k});
    ir::Val bv = bias ? b.vec(name + ".bias", {cout}) : ir::Val{};
    return b.g().conv2d(x, w, bv, {stride, stride, k / 2, k / 2, groups});
}

ir::Val act(Builder& b, ir::Val x, Cfg::Act a) { return a == Cfg::Act::silu ? b.g().silu(x) : b.g().relu(x); }

ir::Val nchw_to_nhwc(Builder& b, ir::Val x) { return b.g().permute(x, {0, 2, 3, 1}); }
ir::Val nhwc_to_nchw(Builder& b, ir::Val x) { return b.g().permute(x, {0, 3, 1, 2}); }

// diffusers RMSNorm(C, 1e-5, affine, bias) over the last (channel) axis: x * rsqrt(mean(x^2) + eps) * w + b.
ir::Val rms_norm_last(Builder& b, const std::string& name, ir::Val x, int ch) {
    ir::Val y = b.g().rms_norm(x, b.vec(name + ".weight", {ch}), kEps);
    return b.g().add(y, b.vec(name + ".bias", {ch}));
}

// BatchNorm2d in eval mode, as torch's CPU kernel folds it: alpha = w / sqrt(var + eps), beta = b - mean * alpha,
// y = x * alpha + beta (per channel of [B, C, H, W]); the statistics are read at build time.
ir::Val batch_norm(Builder& b, const std::string& name, ir::Val x, int ch) {
    const Tensor w = b.read_f32(name + ".weight", {ch}), bias = b.read_f32(name + ".bias", {ch});
    const Tensor mean = b.read_f32(name + ".running_mean", {ch}), var = b.read_f32(name + ".running_var", {ch});
    Tensor alpha(DType::f32, {ch, 1, 1}), beta(DType::f32, {ch, 1, 1});
    for (int c = 0; c < ch; ++c) {
        const float inv = 1.f / std::sqrt(var.data<float>()[c] + kEps);
        alpha.data<float>()[c] = w.data<float>()[c] * inv;
        beta.data<float>()[c] = bias.data<float>()[c] - mean.data<float>()[c] * alpha.data<float>()[c];
    }
    auto& g = b.g();
    return g.add(g.mul(x, b.constant(name + ".bn_alpha", alpha)), b.constant(name + ".bn_beta", beta));
}

// The channel norm of a block on [B, C, H, W]: RMSNorm over channels (via channels-last) or BatchNorm2d.
ir::Val channel_norm(Builder& b, const std::string& name, ir::Val x, int ch, Cfg::Norm norm) {
    if (norm == Cfg::Norm::batch) return batch_norm(b, name, x, ch);
    return nhwc_to_nchw(b, rms_norm_last(b, name, nchw_to_nhwc(b, x), ch));
}

// x.repeat_interleave(r, dim=1): channel c*r + i = channel c, as a grouped 1x1 conv with weights 1 (exact).
ir::Val repeat_channels(Builder& b, const std::string& name, ir::Val x, int r) {
    const int C = (int)b.g().shape(x)[1];
    if (r == 1) return x;
    Tensor w(DType::f32, {(int64_t)C * r, 1, 1, 1});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 1.f;
    return b.g().conv2d(x, b.constant(name + ".repeat_w", w), {}, {1, 1, 0, 0, C});
}

// x.unflatten(1, (-1, g)).mean(dim=2): groups of g consecutive channels averaged, as a grouped 1x1 conv with
// weights 1/g (exact for the power-of-two g DC-AE uses; else one rounding per term, ~1e-7 relative).
ir::Val mean_channels(Builder& b, const std::string& name, ir::Val x, int g) {
    const int C = (int)b.g().shape(x)[1];
    if (g == 1) return x;
    Tensor w(DType::f32, {C / g, g, 1, 1});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 1.f / (float)g;
    return b.g().conv2d(x, b.constant(name + ".mean_w", w), {}, {1, 1, 0, 0, C / g});
}

// F.pixel_unshuffle(x, 2): [B, C, H, W] -> [B, 4C, H/2, W/2], out[c*4 + 2i + j, y, x] = in[c, 2y + i, 2x + j].
ir::Val pixel_unshuffle(Builder& b, ir::Val x) {
    auto& g = b.g();
    const Shape s = g.shape(x);
    ir::Val t = g.reshape(x, {s[0], s[1], s[2] / 2, 2, s[3] / 2, 2});  // [B, C, y, i, x, j]
    t = g.permute(t, {0, 1, 3, 5, 2, 4});                              // [B, C, i, j, y, x]
    return g.reshape(t, {s[0], s[1] * 4, s[2] / 2, s[3] / 2});
}

// F.pixel_shuffle(x, 2): [B, 4C, H, W] -> [B, C, 2H, 2W], the inverse of pixel_unshuffle.
ir::Val pixel_shuffle(Builder& b, ir::Val x) {
    auto& g = b.g();
    const Shape s = g.shape(x);
    ir::Val t = g.reshape(x, {s[0], s[1] / 4, 2, 2, s[2], s[3]});  // [B, C, i, j, y, x]
    t = g.permute(t, {0, 1, 4, 2, 5, 3});                          // [B, C, y, i, x, j]
    return g.reshape(t, {s[0], s[1] / 4, s[2] * 2, s[3] * 2});
}

// ResBlock: norm(conv2(act(conv1(x)))) + x; conv2 has no bias.
ir::Val res_block(Builder& b, const std::string& name, ir::Val x, int ch, Cfg::Norm norm, Cfg::Act a) {
    ir::Val h = act(b, conv(b, name + ".conv1", x, ch, ch, 3), a);
    h = conv(b, name + ".conv2", h, ch, ch, 3, 1, false);
    return b.g().add(channel_norm(b, name + ".norm", h, ch, norm), x);
}

// SanaMultiscaleLinearAttention + residual (SanaMultiscaleAttnProcessor2_0). qkv = [to_q x | to_k x | to_v x] on
// channels, plus per kernel size a depthwise kxk conv then a 1x1 conv with 3*heads groups of it; the whole
// [B, 3*inner*(1 + #scales), H, W] is read as G groups of 3d channels (q, k, v of d each: group g = channels
// [3dg, 3d(g+1)), not the heads of to_q/to_k/to_v). Per group, with relu'd q and k over the N = H*W pixels:
//   out_n = sum_m v_m (k_m . q_n) / (sum_m k_m . q_n + 1e-15) = ((V K^T) Q)_n / ((K 1)^T Q)_n + eps)
// computed in that linear order (diffusers' "linear" branch; its "quadratic" one is the same formula).
ir::Val multiscale_attention(Builder& b, const std::string& name, ir::Val x, int ch, int d,
                             const std::vector<int>& scales, Cfg::Norm norm) {
    auto& g = b.g();
    const Shape s = g.shape(x);
    const int64_t B = s[0], N = s[2] * s[3];
    const int heads = ch / d, inner = heads * d;
    ir::Val xl = nchw_to_nhwc(b, x);  // [B, H, W, C]
    auto proj = [&](const char* p) { return g.linear(xl, b.matrix(name + "." + p + ".weight", {inner, ch}), {}); };
    ir::Val qkv = g.concat(g.concat(proj("to_q"), proj("to_k"), 3), proj("to_v"), 3);
    qkv = nhwc_to_nchw(b, qkv);  // [B, 3 inner, H, W]
    ir::Val all = qkv;
    for (size_t i = 0; i < scales.size(); ++i) {
        const std::string p = name + ".to_qkv_multiscale." + std::to_string(i);
        ir::Val m = conv(b, p + ".proj_in", qkv, 3 * inner, 3 * inner, scales[i], 1, false, 3 * inner);
        m = conv(b, p + ".proj_out", m, 3 * inner, 3 * inner, 1, 1, false, 3 * heads);
        all = g.concat(all, m, 1);
    }
    const int64_t G = (int64_t)heads * (1 + (int64_t)scales.size());
    ir::Val t = g.reshape(all, {B * G, 3 * (int64_t)d, N});
    ir::Val q = g.relu(g.slice(t, 1, 0, d)), k = g.relu(g.slice(t, 1, d, d)), v = g.slice(t, 1, 2 * d, d);
    ir::Val kt = g.transpose(k, 1, 2);           // [BG, N, d]
    ir::Val num = g.matmul(g.matmul(v, kt), q);  // (V K^T) Q: [BG, d, N]
    Tensor ones(DType::f32, {1, N, 1});
    for (int64_t i = 0; i < N; ++i) ones.data<float>()[i] = 1.f;
    ir::Val ksum = g.matmul(k, b.constant(name + ".ones", ones));  // K 1: [BG, d, 1]
    ir::Val den = g.matmul(g.transpose(ksum, 1, 2), q);            // [BG, 1, N]
    ir::Val o = g.div(num, g.scale(den, 1.f, 1e-15f));
    o = g.reshape(o, {B, G * d, s[2], s[3]});
    ir::Val y = g.linear(nchw_to_nhwc(b, o), b.matrix(name + ".to_out.weight", {ch, (int)(G * d)}), {});
    y = norm == Cfg::Norm::rms ? nhwc_to_nchw(b, rms_norm_last(b, name + ".norm_out", y, ch))
                               : batch_norm(b, name + ".norm_out", nhwc_to_nchw(b, y), ch);
    return g.add(y, x);
}

// GLUMBConv (expand 4, rms_norm, residual): conv_inverted 1x1 -> silu -> conv_depth 3x3 depthwise -> value, gate
// halves -> value * silu(gate) -> conv_point 1x1 (no bias) -> RMSNorm over channels -> + x.
ir::Val glumb_conv(Builder& b, const std::string& name, ir::Val x, int ch) {
    auto& g = b.g();
    const int hid = 4 * ch;
    ir::Val h = g.silu(conv(b, name + ".conv_inverted", x, ch, 2 * hid, 1));
    h = conv(b, name + ".conv_depth", h, 2 * hid, 2 * hid, 3, 1, true, 2 * hid);
    auto vg = g.chunk(h, 1, 2);
    h = conv(b, name + ".conv_point", g.mul(vg[0], g.silu(vg[1])), hid, ch, 1, 1, false);
    return g.add(channel_norm(b, name + ".norm", h, ch, Cfg::Norm::rms), x);
}

ir::Val block(Builder& b, const std::string& name, ir::Val x, const Cfg& c, const Cfg::Stage& s) {
    if (s.block == Cfg::Block::res) return res_block(b, name, x, s.channels, s.norm, s.act);
    x = multiscale_attention(b, name + ".attn", x, s.channels, c.head_dim, s.scales, s.norm);
    return glumb_conv(b, name + ".conv_out", x, s.channels);
}

// The blocks of a stage, each a region of kind `name` (the JIT records the first and replays the others).
ir::Val stage_blocks(Builder& b, const std::string& name, ir::Val x, const Cfg& c, const Cfg::Stage& s, int first) {
    for (int j = 0; j < s.layers; ++j) {
        b.g().begin_region(name, first + j);  // the block's index in the checkpoint
        x = block(b, name + "." + std::to_string(first + j), x, c, s);
        b.g().end_region();
    }
    return x;
}

// DCDownBlock2d: "conv": conv 3x3 stride 2; "pixel_unshuffle": conv 3x3 (cin -> cout/4) then pixel_unshuffle(2);
// shortcut: pixel_unshuffle(x, 2) then the mean over groups of 4*cin/cout channels.
ir::Val down_block(Builder& b, const std::string& name, ir::Val x, int cin, int cout, bool unshuffle, bool shortcut) {
    ir::Val h = unshuffle ? pixel_unshuffle(b, conv(b, name + ".conv", x, cin, cout / 4, 3))
                          : conv(b, name + ".conv", x, cin, cout, 3, 2);
    if (!shortcut) return h;
    return b.g().add(h, mean_channels(b, name, pixel_unshuffle(b, x), 4 * cin / cout));
}

// DCUpBlock2d: "interpolate": nearest x2 then conv 3x3; "pixel_shuffle": conv 3x3 (cin -> 4 cout) then
// pixel_shuffle(2); shortcut: pixel_shuffle(x.repeat_interleave(4*cout/cin, dim=1), 2).
ir::Val up_block(Builder& b, const std::string& name, ir::Val x, int cin, int cout, bool shuffle, bool shortcut) {
    ir::Val h = shuffle ? pixel_shuffle(b, conv(b, name + ".conv", x, cin, 4 * cout, 3))
                        : conv(b, name + ".conv", b.g().upsample_nearest2x(x), cin, cout, 3);
    if (!shortcut) return h;
    return b.g().add(h, pixel_shuffle(b, repeat_channels(b, name, x, 4 * cout / cin)));
}
}  // namespace

void build_dc_ae_decoder(Builder& b, const DcAeConfig& c, int B, int h, int w, bool debug_outputs) {
    auto& g = b.g();
    const auto& st = c.decoder;
    const int n = (int)st.size(), L = c.latent_channels, top = st.back().channels;
    ir::Val z = g.input("latents", {B, L, h, w});
    ir::Val x = conv(b, "decoder.conv_in", z, L, top, 3);
    if (c.decoder_in_shortcut) x = g.add(x, repeat_channels(b, "decoder.in_shortcut", z, top / L));
    if (debug_outputs) g.output(x, "dbg_decoder_in_shortcut_out");
    for (int i = n - 1; i >= 0; --i) {  // up_blocks run last .. first
        const std::string pre = "decoder.up_blocks." + std::to_string(i);
        const bool up = i < n - 1 && st[(size_t)i].layers > 0;
        if (up)
            x = up_block(b, pre + ".0", x, st[(size_t)i + 1].channels, st[(size_t)i].channels, c.pixel_shuffle_up,
                         true);
        x = stage_blocks(b, pre, x, c, st[(size_t)i], up ? 1 : 0);
        if (debug_outputs) g.output(x, "dbg_decoder_stage" + std::to_string(i) + "_out");
    }
    const int ch = st[0].layers > 0 ? st[0].channels : st[1].channels;
    x = act(b, channel_norm(b, "decoder.norm_out", x, ch, Cfg::Norm::rms), c.conv_act);
    x = st[0].layers > 0 ? conv(b, "decoder.conv_out", x, ch, c.in_channels, 3)
                         : up_block(b, "decoder.conv_out", x, ch, c.in_channels, c.pixel_shuffle_up, false);
    g.output(x, "decoded");
}

void build_dc_ae_encoder(Builder& b, const DcAeConfig& c, int B, int H, int W, bool debug_outputs) {
    auto& g = b.g();
    const auto& st = c.encoder;
    const int n = (int)st.size(), L = c.latent_channels, r = c.compression();
    KILN_CHECK(H % r == 0 && W % r == 0, cls(), ": encode needs an image whose sides are multiples of ", r, ", got ", H,
               "x", W);
    ir::Val x = g.input("image", {B, c.in_channels, H, W});
    x = st[0].layers > 0
            ? conv(b, "encoder.conv_in", x, c.in_channels, st[0].channels, 3)
            : down_block(b, "encoder.conv_in", x, c.in_channels, st[1].channels, c.pixel_unshuffle_down, false);
    for (int i = 0; i < n; ++i) {
        const std::string pre = "encoder.down_blocks." + std::to_string(i);
        const Cfg::Stage& s = st[(size_t)i];
        x = stage_blocks(b, pre, x, c, s, 0);
        if (i < n - 1 && s.layers > 0)
            x = down_block(b, pre + "." + std::to_string(s.layers), x, s.channels, st[(size_t)i + 1].channels,
                           c.pixel_unshuffle_down, true);
        if (debug_outputs) g.output(x, "dbg_encoder_stage" + std::to_string(i) + "_out");
    }
    const int top = st.back().channels;
    ir::Val y = conv(b, "encoder.conv_out", x, top, L, 3);
    if (c.encoder_out_shortcut) y = g.add(y, mean_channels(b, "encoder.out_shortcut", x, top / L));
    g.output(y, "latent");
}

}  // namespace kiln::models
