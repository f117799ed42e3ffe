#include "models/transformers/sana.h"

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers writes it.
std::string cls() { return class_name(ComponentKind::sana); }

// nn.Linear whose bias the config decides (a required tensor when `bias`, never read otherwise), with the runtime
// LoRA side path as common.h's linear().
ir::Val lin(Builder& b, const std::string& name, ir::Val x, int in, int out, bool bias) {
    ir::Val w = b.matrix(name + ".weight", {out, in});
    ir::Val bv = bias ? b.vec(name + ".bias", {out}) : ir::Val{};
    return b.lora_side(name, x, b.g().linear(x, w, bv), in, out);
}

// Attention.norm_q / norm_k for qk_norm "rms_norm_across_heads": RMSNorm over the whole projection (all heads at
// once), eps 1e-5 (Attention's default), weight only.
ir::Val qk_norm(Builder& b, const std::string& name, ir::Val x, int dim) {
    return b.g().rms_norm(x, b.vec(name + ".weight", {dim}), 1e-5f);
}

// [B, N, H*d] -> [B*H, N, d] (perm {0, 2, 1, 3}) or [B*H, d, N] (perm {0, 2, 3, 1}).
ir::Val heads_first(ir::Graph& g, ir::Val x, int B, int N, int H, int d, bool transposed) {
    x = g.reshape(x, {B, N, H, d});
    x = transposed ? g.permute(x, {0, 2, 3, 1}) : g.permute(x, {0, 2, 1, 3});
    return g.reshape(x, transposed ? Shape{(int64_t)B * H, d, N} : Shape{(int64_t)B * H, N, d});
}

// attn1 with SanaLinearAttnProcessor2_0: per head, with q = relu(q_n), k = relu(k_m) (after the optional qk_norm),
//   out_n = (sum_m v_m k_m^T) q_n / ((sum_m k_m) . q_n + 1e-15)
// -- ReLU kernel, no softmax, no 1/sqrt(d), no mask. diffusers appends a row of ones to V so one product gives both
// sums; here the key sum is its own product with `ones` [1, N, 1], in the same association (sum over m first, then
// the dot with q), all in f32. x [B, N, D] -> [B, N, D].
ir::Val linear_attention(Builder& b, const std::string& pre, ir::Val x, const SanaConfig& c, int B, int N,
                         ir::Val ones) {
    auto& g = b.g();
    const int D = c.inner(), H = c.heads, d = c.head_dim;
    ir::Val q = lin(b, pre + ".to_q", x, D, D, c.attention_bias);  // [B, N, D]
    ir::Val k = lin(b, pre + ".to_k", x, D, D, c.attention_bias);
    ir::Val v = lin(b, pre + ".to_v", x, D, D, c.attention_bias);
    if (c.qk_norm) {
        q = qk_norm(b, pre + ".norm_q", q, D);
        k = qk_norm(b, pre + ".norm_k", k, D);
    }
    ir::Val qh = heads_first(g, g.relu(q), B, N, H, d, false);  // [B*H, N, d]
    ir::Val kt = heads_first(g, g.relu(k), B, N, H, d, true);   // [B*H, d, N]
    ir::Val vh = heads_first(g, v, B, N, H, d, false);          // [B*H, N, d]
    ir::Val kv = g.matmul(kt, vh);                              // [B*H, d, d]: sum_m k_m v_m^T
    ir::Val num = g.matmul(qh, kv);                             // [B*H, N, d]
    ir::Val ksum = g.matmul(kt, ones);                          // [B*H, d, 1]: sum_m k_m
    ir::Val den = g.scale(g.matmul(qh, ksum), 1.f, 1e-15f);     // [B*H, N, 1]
    ir::Val o = g.div(num, den);                                // [B*H, N, d]
    o = g.reshape(g.permute(g.reshape(o, {B, H, N, d}), {0, 2, 1, 3}), {B, N, D});
    return lin(b, pre + ".to_out.0", o, D, D, true);
}

// attn2 with SanaAttnProcessor2_0: softmax attention of the (un-normalised) image tokens x [B, N, D] over the caption
// ctx [B, L, D], scale 1/sqrt(cross_head_dim), the text mask as an additive bias [B, 1, L] (or none).
ir::Val cross_attention(Builder& b, const std::string& pre, ir::Val x, ir::Val ctx, ir::Val bias, const SanaConfig& c) {
    const int D = c.inner(), Ci = c.cross_inner();
    ir::Val q = lin(b, pre + ".to_q", x, D, Ci, true);
    ir::Val k = lin(b, pre + ".to_k", ctx, c.cross_attention_dim, Ci, true);
    ir::Val v = lin(b, pre + ".to_v", ctx, c.cross_attention_dim, Ci, true);
    if (c.qk_norm) {
        q = qk_norm(b, pre + ".norm_q", q, Ci);
        k = qk_norm(b, pre + ".norm_k", k, Ci);
    }
    ir::Val o = b.g().attention(q, k, v, c.cross_heads, bias);  // [B, N, Ci]
    return lin(b, pre + ".to_out.0", o, Ci, D, true);
}

// GLUMBConv (Mix-FFN) on the token grid: x [B, N, D] as NCHW [B, D, h, w] (token n = row n / w, column n % w);
// conv_inverted 1x1 (D -> 2F, bias) -> SiLU -> conv_depth 3x3 depthwise (pad 1, bias) -> value, gate = first and
// second F channels -> value * silu(gate) -> conv_point 1x1 (F -> D, no bias). Back to [B, N, D].
ir::Val glumbconv(Builder& b, const std::string& pre, ir::Val x, const SanaConfig& c, int B, int h, int w) {
    auto& g = b.g();
    const int D = c.inner(), F = c.ff_hidden();
    const int64_t N = (int64_t)h * w;
    // The 1x1 convolutions are linears over the tokens' channels (their [O, C, 1, 1] weights read as [O, C]), so the
    // JIT selects their weights per replayed block like every other linear's; only the depthwise conv runs on NCHW.
    ir::Val wi = b.matrix_1x1(pre + ".conv_inverted.weight", 2 * F, D);
    ir::Val t = g.silu(g.linear(x, wi, b.vec(pre + ".conv_inverted.bias", {2 * F})));  // [B, N, 2F]
    t = g.reshape(g.transpose(t, 1, 2), {B, 2 * F, h, w});
    ir::Val wd = b.matrix(pre + ".conv_depth.weight", {2 * F, 1, 3, 3});
    t = g.conv2d(t, wd, b.vec(pre + ".conv_depth.bias", {2 * F}), {1, 1, 1, 1, 2 * F});
    auto vg = g.chunk(t, 1, 2);  // value, gate: [B, F, h, w] each
    t = g.mul(vg[0], g.silu(vg[1]));
    t = g.transpose(g.reshape(t, {B, F, N}), 1, 2);                          // [B, N, F]
    return g.linear(t, b.matrix_1x1(pre + ".conv_point.weight", D, F), {});  // [B, N, D]
}

// time_embed -> (the [B, 6, D] modulation every block adds to its scale_shift_table, embedded_timestep [B, D]).
// AdaLayerNormSingle: emb = TimestepEmbedding(Timesteps(256, flip_sin_to_cos, shift 0)(t)); Sana-Sprint's
// SanaCombinedTimestepGuidanceEmbeddings adds the same embedding of the guidance. Both: linear(silu(emb)).
std::pair<ir::Val, ir::Val> time_embedding(Builder& b, const SanaConfig& c, ir::Val t, ir::Val guidance, int B) {
    auto& g = b.g();
    const int D = c.inner();
    auto embed = [&](const std::string& name, ir::Val v) {  // Timesteps(256, True, 0) -> TimestepEmbedding
        ir::Val h = lin(b, name + ".linear_1", g.timestep_embedding(v, {256, true, 0.f, 1.f, 10000.f}), 256, D, true);
        return lin(b, name + ".linear_2", g.silu(h), D, D, true);
    };
    ir::Val emb = c.guidance_embeds
                      ? g.add(embed("time_embed.timestep_embedder", t), embed("time_embed.guidance_embedder", guidance))
                      : embed("time_embed.emb.timestep_embedder", t);
    ir::Val t6 = lin(b, "time_embed.linear", g.silu(emb), D, 6 * D, true);  // [B, 6D]
    return {g.reshape(t6, {B, 6, D}), emb};
}
}  // namespace

SanaConfig SanaConfig::from_json(const nlohmann::json& j) {
    SanaConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    auto is_null = [&](const char* k) { return j.contains(k) && j[k].is_null(); };
    c.in_channels = get("in_channels", 32);
    c.out_channels = get("out_channels", c.in_channels);  // diffusers: out_channels or in_channels
    c.heads = get("num_attention_heads", 70);
    c.head_dim = get("attention_head_dim", 32);
    c.layers = get("num_layers", 20);
    // Sana's block runs attn2 and norm2 unconditionally: a null cross-attention config cannot run in diffusers.
    for (const char* k : {"num_cross_attention_heads", "cross_attention_head_dim", "cross_attention_dim"})
        KILN_CHECK(!is_null(k), cls(), ": ", k, " null (no cross-attention) is not supported");
    c.cross_heads = get("num_cross_attention_heads", 20);
    c.cross_head_dim = get("cross_attention_head_dim", 112);
    c.cross_attention_dim = get("cross_attention_dim", 2240);
    c.caption_channels = get("caption_channels", 2304);
    c.mlp_ratio = get("mlp_ratio", 2.5);
    c.attention_bias = get("attention_bias", false);
    c.sample_size = get("sample_size", 32);
    c.patch = get("patch_size", 1);
    c.norm_affine = get("norm_elementwise_affine", false);
    c.norm_eps = (float)get("norm_eps", 1e-6);
    c.guidance_embeds = get("guidance_embeds", false);
    c.guidance_embeds_scale = get("guidance_embeds_scale", 0.1);
    c.timestep_scale = get("timestep_scale", 1.0);
    KILN_CHECK(!j.contains("interpolation_scale") || j["interpolation_scale"].is_null(), cls(),
               ": interpolation_scale ", j.value("interpolation_scale", nlohmann::json()).dump(),
               " (the sin-cos positions of the 2K/4K models) is not supported (null only)");
    const std::string qk = get("qk_norm", std::string());
    KILN_CHECK(qk.empty() || qk == "rms_norm_across_heads", cls(), ": qk_norm '", qk,
               "' is not supported (null, rms_norm_across_heads)");
    c.qk_norm = !qk.empty();
    KILN_CHECK(c.in_channels > 0 && c.out_channels > 0 && c.heads > 0 && c.head_dim > 0 && c.layers > 0 &&
                   c.cross_heads > 0 && c.cross_head_dim > 0 && c.caption_channels > 0 && c.patch > 0,
               cls(), ": bad config (sizes must be positive)");
    // The caption is projected to the inner dim, and attn2's to_k / to_v read it as cross_attention_dim features.
    KILN_CHECK(c.cross_attention_dim == c.inner(), cls(), ": cross_attention_dim ", c.cross_attention_dim,
               " != num_attention_heads x attention_head_dim ", c.inner(), " (the projected caption's width)");
    KILN_CHECK(c.ff_hidden() > 0, cls(), ": mlp_ratio ", c.mlp_ratio, " gives no GLUMBConv channels");
    return c;
}

void build_sana(Builder& b, const SanaConfig& c, int B, int H, int W, int L, bool mask) {
    auto& g = b.g();
    const int D = c.inner(), p = c.patch;
    KILN_CHECK(H % p == 0 && W % p == 0, cls(), ": latent size ", H, "x", W, " is not a multiple of patch size ", p);
    const int h = H / p, w = W / p, N = h * w;
    ir::Val x = g.input("hidden_states", {B, c.in_channels, H, W});
    ir::Val ctx = g.input("encoder_hidden_states", {B, L, c.caption_channels});
    ir::Val t = g.input("timestep", {B});
    ir::Val guidance = c.guidance_embeds ? g.input("guidance", {B}) : ir::Val{};
    ir::Val bias = mask ? g.input("encoder_attention_mask", {B, 1, L}) : ir::Val{};

    // patch_embed: conv(k = s = p) -> [B, h*w, D]; no positional embedding (interpolation_scale null).
    ir::Val pw = b.matrix("patch_embed.proj.weight", {D, c.in_channels, p, p});
    ir::Val hs = g.conv2d(x, pw, b.vec("patch_embed.proj.bias", {D}), {p, p, 0, 0});  // [B, D, h, w]
    hs = g.transpose(g.reshape(hs, {B, D, (int64_t)N}), 1, 2);                        // [B, N, D]

    auto [t6, emb] = time_embedding(b, c, t, guidance, B);  // [B, 6, D], [B, D]

    // caption_projection (linear_1 -> gelu tanh -> linear_2), then caption_norm RMSNorm(D, eps 1e-5): [B, L, D].
    ir::Val e = lin(b, "caption_projection.linear_1", ctx, c.caption_channels, D, true);
    e = lin(b, "caption_projection.linear_2", g.gelu(e, true), D, D, true);
    e = g.rms_norm(e, b.vec("caption_norm.weight", {D}), 1e-5f);

    // The ones the linear attention sums keys with, an activation shared by every block (not a block weight).
    Tensor one(DType::f32, {1, N, 1});
    for (int64_t i = 0; i < N; ++i) one.data<float>()[i] = 1.f;
    ir::Val ones = g.scale(b.constant("const.ones_" + std::to_string(N), std::move(one)), 1.f);

    for (int i = 0; i < c.layers; ++i) {
        const std::string pre = "transformer_blocks." + std::to_string(i) + ".";
        g.begin_region("transformer_blocks", i);
        // scale_shift_table [6, D] + temb [B, 6, D] -> shift/scale/gate for msa and mlp, each [B, D].
        ir::Val sst = b.vec(pre + "scale_shift_table", {6, D});
        auto m = g.chunk(g.add(t6, g.reshape(sst, {1, 6, D})), 1, 6);
        for (auto& v : m) v = g.reshape(v, {B, D});
        ir::Val n1 = g.modulate(g.layer_norm(hs, {}, {}, c.norm_eps), m[0], m[1]);  // norm1: never affine
        ir::Val a = linear_attention(b, pre + "attn1", n1, c, B, N, ones);
        hs = g.add(g.mul(g.reshape(m[2], {B, 1, D}), a), hs);
        hs = g.add(cross_attention(b, pre + "attn2", hs, e, bias, c), hs);  // no norm, no gate
        ir::Val w2 = c.norm_affine ? b.vec(pre + "norm2.weight", {D}) : ir::Val{};
        ir::Val b2 = c.norm_affine ? b.vec(pre + "norm2.bias", {D}) : ir::Val{};
        ir::Val n2 = g.modulate(g.layer_norm(hs, w2, b2, c.norm_eps), m[3], m[4]);
        ir::Val ff = glumbconv(b, pre + "ff", n2, c, B, h, w);
        hs = g.add(g.mul(g.reshape(m[5], {B, 1, D}), ff), hs);
        g.end_region();
    }

    // norm_out (SanaModulatedNorm): LayerNorm (no affine, eps 1e-6), (scale_shift_table [2, D] + embedded_timestep)
    // -> shift, scale; proj_out; unpatchify (features ordered (py, px, c)).
    ir::Val sst = b.vec("scale_shift_table", {2, D});
    auto ss = g.chunk(g.add(g.reshape(emb, {B, 1, D}), g.reshape(sst, {1, 2, D})), 1, 2);
    hs = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), g.reshape(ss[0], {B, D}), g.reshape(ss[1], {B, D}));
    hs = lin(b, "proj_out", hs, D, p * p * c.out_channels, true);  // [B, N, p*p*C]
    g.output(g.unpatchify(hs, p, c.out_channels, h, w), "sample");
}

}  // namespace kiln::models
