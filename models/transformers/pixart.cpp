#include "models/transformers/pixart.h"

#include <algorithm>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers / transformers do.
std::string cls() { return class_name(ComponentKind::pixart); }
}  // namespace

PixArtConfig PixArtConfig::from_json(const nlohmann::json& j) {
    PixArtConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.heads = get("num_attention_heads", 16);
    c.head_dim = get("attention_head_dim", 72);
    c.in_channels = get("in_channels", 4);
    c.out_channels = get("out_channels", c.in_channels);
    c.layers = get("num_layers", 28);
    c.patch = get("patch_size", 2);
    c.sample_size = get("sample_size", 128);
    // cross_attention_dim defaults to 1152; an explicit null means no cross-attention.
    c.cross_attention_dim = !j.contains("cross_attention_dim") ? 1152 : get("cross_attention_dim", 0);
    c.caption_channels = get("caption_channels", 0);
    c.attention_bias = get("attention_bias", true);
    c.norm_affine = get("norm_elementwise_affine", false);
    c.norm_eps = (float)get("norm_eps", 1e-6);
    // diffusers: use_additional_conditions = sample_size == 128 when null; interpolation_scale =
    // max(sample_size // 64, 1) when null.
    c.use_additional_conditions = get("use_additional_conditions", c.sample_size == 128);
    c.interpolation_scale = get("interpolation_scale", (double)std::max(c.sample_size / 64, 1));
    std::string act = get("activation_fn", std::string("gelu-approximate"));
    KILN_CHECK(act == "gelu-approximate" || act == "gelu", cls(), ": activation_fn '", act,
               "' is not supported (gelu, gelu-approximate)");
    c.gelu_tanh = act == "gelu-approximate";
    std::string norm = get("norm_type", std::string("ada_norm_single"));
    KILN_CHECK(norm == "ada_norm_single", cls(), ": norm_type '", norm, "' is not supported (ada_norm_single)");
    std::string att = get("attention_type", std::string("default"));
    KILN_CHECK(att == "default", cls(), ": attention_type '", att, "' is not supported (default)");
    KILN_CHECK(c.heads > 0 && c.head_dim > 0 && c.layers > 0 && c.patch > 0, cls(), ": bad config");
    KILN_CHECK(!c.use_additional_conditions || c.inner() % 3 == 0, cls(), ": inner dim ", c.inner(),
               " is not a multiple of 3 (needed by the size embeddings)");
    return c;
}

void build_pixart(Builder& b, const PixArtConfig& c, int B, int H, int W, int L, bool mask) {
    auto& g = b.g();
    const int D = c.inner(), p = c.patch;
    KILN_CHECK(H % p == 0 && W % p == 0, "PixArt: latent size ", H, "x", W, " is not a multiple of patch size ", p);
    const int h = H / p, w = W / p;
    const int text_dim = c.caption_channels ? c.caption_channels : c.cross_attention_dim;
    ir::Val x = g.input("hidden_states", {B, c.in_channels, H, W});
    ir::Val ctx = c.cross_attention_dim ? g.input("encoder_hidden_states", {B, L, text_dim}) : ir::Val{};
    ir::Val t = g.input("timestep", {B});
    ir::Val bias = mask && c.cross_attention_dim ? g.input("encoder_attention_mask", {B, 1, L}) : ir::Val{};

    // pos_embed: PatchEmbed(height=width=sample_size, interpolation_scale): conv(k=p, s=p) -> [B, h*w, D]
    // + 2-D sincos table with base_size = sample_size / p.
    ir::Val pw = b.matrix("pos_embed.proj.weight", {D, c.in_channels, p, p});
    ir::Val pb = b.vec("pos_embed.proj.bias", {D});
    ir::Val hs = g.conv2d(x, pw, pb, {p, p, 0, 0});                 // [B, D, h, w]
    hs = g.transpose(g.reshape(hs, {B, D, (int64_t)h * w}), 1, 2);  // [B, h*w, D]
    Tensor table = sincos_pos_embed_2d(D, h, w, c.sample_size / p, c.interpolation_scale);
    hs = g.add(hs, b.constant("const.pos_embed", std::move(table)));

    // adaln_single: PixArtAlphaCombinedTimestepSizeEmbeddings -> embedded_timestep [B, D];
    // linear(silu(.)) -> the [B, 6D] modulation every block adds to its scale_shift_table.
    ir::Val t_proj = g.timestep_embedding(t, {256, true, 0.f, 1.f, 10000.f});  // Timesteps(256, True, 0)
    ir::Val emb = timestep_embedding_mlp(b, "adaln_single.emb.timestep_embedder", t_proj, 256, D);
    if (c.use_additional_conditions) {
        // resolution [B, 2] and aspect_ratio [B, 1] embed like timesteps, each to D/3 features per value.
        ir::Val res = g.reshape(g.input("resolution", {B, 2}), {2 * B});
        ir::Val ar = g.reshape(g.input("aspect_ratio", {B, 1}), {B});
        ir::Val res_emb = timestep_embedding_mlp(b, "adaln_single.emb.resolution_embedder",
                                                 g.timestep_embedding(res, {256, true, 0.f, 1.f, 10000.f}), 256, D / 3);
        ir::Val ar_emb = timestep_embedding_mlp(b, "adaln_single.emb.aspect_ratio_embedder",
                                                g.timestep_embedding(ar, {256, true, 0.f, 1.f, 10000.f}), 256, D / 3);
        emb = g.add(emb, g.concat(g.reshape(res_emb, {B, 2 * (D / 3)}), ar_emb, 1));  // [B, D]
    }
    ir::Val t6 = g.reshape(linear(b, "adaln_single.linear", g.silu(emb), D, 6 * D), {B, 6, D});

    // caption_projection: PixArtAlphaTextProjection (linear_1 -> gelu tanh -> linear_2) -> [B, L, D].
    if (ctx && c.caption_channels) {
        ir::Val e = linear(b, "caption_projection.linear_1", ctx, c.caption_channels, D);
        ctx = linear(b, "caption_projection.linear_2", g.gelu(e, true), D, D);
    }
    const int ctx_dim = c.caption_channels ? D : c.cross_attention_dim;

    for (int i = 0; i < c.layers; ++i) {
        const std::string pre = "transformer_blocks." + std::to_string(i) + ".";
        g.begin_region("transformer_blocks", i);
        // scale_shift_table [6, D] + timestep [B, 6, D] -> shift/scale/gate for msa and mlp, each [B, D].
        ir::Val sst = b.vec(pre + "scale_shift_table", {6, D});
        auto m = g.chunk(g.add(t6, g.reshape(sst, {1, 6, D})), 1, 6);
        for (auto& v : m) v = g.reshape(v, {B, D});
        ir::Val w1 = c.norm_affine ? b.vec(pre + "norm1.weight", {D}) : ir::Val{};
        ir::Val b1 = c.norm_affine ? b.vec(pre + "norm1.bias", {D}) : ir::Val{};
        ir::Val n1 = g.modulate(g.layer_norm(hs, w1, b1, c.norm_eps), m[0], m[1]);
        ir::Val attn = self_attention(b, pre + "attn1", n1, D, c.heads);  // [B, N, D]
        hs = g.add(g.mul(g.reshape(m[2], {B, 1, D}), attn), hs);
        if (ctx) {  // attn2: cross-attention on the un-normalised hidden states (PixArt skips norm2 here)
            ir::Val q = linear(b, pre + "attn2.to_q", hs, D, D);
            ir::Val k = linear(b, pre + "attn2.to_k", ctx, ctx_dim, D);
            ir::Val v = linear(b, pre + "attn2.to_v", ctx, ctx_dim, D);
            ir::Val o = g.attention(q, k, v, c.heads, bias);  // bias [B, 1, L]: 0 keep, -10000 discard
            hs = g.add(linear(b, pre + "attn2.to_out.0", o, D, D), hs);
        }
        ir::Val w2 = c.norm_affine ? b.vec(pre + "norm2.weight", {D}) : ir::Val{};
        ir::Val b2 = c.norm_affine ? b.vec(pre + "norm2.bias", {D}) : ir::Val{};
        ir::Val n2 = g.modulate(g.layer_norm(hs, w2, b2, c.norm_eps), m[3], m[4]);
        ir::Val ff = feed_forward(b, pre + "ff", n2, D, 4 * D, c.gelu_tanh);
        hs = g.add(g.mul(g.reshape(m[5], {B, 1, D}), ff), hs);
        g.end_region();
    }

    // Output: (scale_shift_table [2, D] + embedded_timestep) -> shift, scale; norm_out; proj_out; unpatchify.
    ir::Val sst = b.vec("scale_shift_table", {2, D});
    auto ss = g.chunk(g.add(g.reshape(emb, {B, 1, D}), g.reshape(sst, {1, 2, D})), 1, 2);
    hs = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), g.reshape(ss[0], {B, D}), g.reshape(ss[1], {B, D}));
    hs = linear(b, "proj_out", hs, D, p * p * c.out_channels);  // [B, h*w, p*p*C]
    g.output(g.unpatchify(hs, p, c.out_channels, h, w), "sample");
}

}  // namespace kiln::models
