#include "models/transformers/dit.h"

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers / transformers do.
std::string cls() { return class_name(ComponentKind::dit); }
}  // namespace

DiTConfig DiTConfig::from_json(const nlohmann::json& j) {
    DiTConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.heads = get("num_attention_heads", 16);
    c.head_dim = get("attention_head_dim", 72);
    c.in_channels = get("in_channels", 4);
    c.out_channels = get("out_channels", c.in_channels);
    c.layers = get("num_layers", 28);
    c.patch = get("patch_size", 2);
    c.sample_size = get("sample_size", 32);
    c.num_embeds_ada_norm = get("num_embeds_ada_norm", 1000);
    c.attention_bias = get("attention_bias", true);
    c.norm_affine = get("norm_elementwise_affine", false);
    c.norm_eps = (float)get("norm_eps", 1e-5);
    std::string act = get("activation_fn", std::string("gelu-approximate"));
    KILN_CHECK(act == "gelu-approximate" || act == "gelu", cls(), ": activation_fn '", act,
               "' is not supported (gelu, gelu-approximate)");
    c.gelu_tanh = act == "gelu-approximate";
    std::string norm = get("norm_type", std::string("ada_norm_zero"));
    KILN_CHECK(norm == "ada_norm_zero", cls(), ": norm_type '", norm, "' is not supported (ada_norm_zero)");
    KILN_CHECK(c.heads > 0 && c.head_dim > 0 && c.layers > 0 && c.patch > 0, cls(), ": bad config");
    return c;
}

void build_dit(Builder& b, const DiTConfig& c, int B, int H, int W) {
    auto& g = b.g();
    const int D = c.inner(), p = c.patch;
    KILN_CHECK(H % p == 0 && W % p == 0, "DiT: latent size ", H, "x", W, " is not a multiple of patch size ", p);
    const int h = H / p, w = W / p;
    ir::Val x = g.input("hidden_states", {B, c.in_channels, H, W});
    ir::Val t = g.input("timestep", {B});
    ir::Val labels = g.input("class_labels", {B}, DType::i32);

    // pos_embed: PatchEmbed = conv(k=p, s=p) -> flatten(2).transpose(1, 2) -> + 2-D sincos table.
    ir::Val pw = b.matrix("pos_embed.proj.weight", {D, c.in_channels, p, p});
    ir::Val pb = b.vec("pos_embed.proj.bias", {D});
    ir::Val hs = g.conv2d(x, pw, pb, {p, p, 0, 0});                 // [B, D, h, w]
    hs = g.transpose(g.reshape(hs, {B, D, (int64_t)h * w}), 1, 2);  // [B, h*w, D]
    ir::Val pos = b.constant("const.pos_embed", sincos_pos_embed_2d(D, h, w, c.sample_size / p, 1.0));
    hs = g.add(hs, pos);

    // Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1): identical for every block, computed once.
    ir::Val t_proj = g.timestep_embedding(t, {256, true, 1.f, 1.f, 10000.f});  // [B, 256]

    auto conditioning = [&](const std::string& pre) {  // CombinedTimestepLabelEmbeddings -> [B, D]
        ir::Val temb = timestep_embedding_mlp(b, pre + "norm1.emb.timestep_embedder", t_proj, 256, D);
        ir::Val table =
            b.matrix(pre + "norm1.emb.class_embedder.embedding_table.weight", {c.num_embeds_ada_norm + 1, D});
        return g.add(temb, g.embedding(table, labels));
    };

    for (int i = 0; i < c.layers; ++i) {
        const std::string pre = "transformer_blocks." + std::to_string(i) + ".";
        g.begin_region("transformer_blocks", i);
        // norm1 = AdaLayerNormZero: linear(silu(emb)) -> shift/scale/gate for msa and mlp.
        ir::Val emb = linear(b, pre + "norm1.linear", g.silu(conditioning(pre)), D, 6 * D);  // [B, 6D]
        auto m = g.chunk(emb, 1, 6);  // shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
        ir::Val n1 = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), m[0], m[1]);
        ir::Val attn = self_attention(b, pre + "attn1", n1, D, c.heads);  // [B, N, D]
        hs = g.add(g.mul(g.reshape(m[2], {B, 1, D}), attn), hs);
        // norm3 = LayerNorm(dim, norm_eps, norm_elementwise_affine), then the mlp modulation.
        ir::Val w3 = c.norm_affine ? b.vec(pre + "norm3.weight", {D}) : ir::Val{};
        ir::Val b3 = c.norm_affine ? b.vec(pre + "norm3.bias", {D}) : ir::Val{};
        ir::Val n3 = g.modulate(g.layer_norm(hs, w3, b3, c.norm_eps), m[3], m[4]);
        ir::Val ff = feed_forward(b, pre + "ff", n3, D, 4 * D, c.gelu_tanh);
        hs = g.add(g.mul(g.reshape(m[5], {B, 1, D}), ff), hs);
        g.end_region();
    }

    // Output: conditioning from block 0's embedder (declared again: outside the blocks).
    ir::Val cond = conditioning("transformer_blocks.0.");
    auto ss = g.chunk(linear(b, "proj_out_1", g.silu(cond), D, 2 * D), 1, 2);  // shift, scale
    hs = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), ss[0], ss[1]);
    hs = linear(b, "proj_out_2", hs, D, p * p * c.out_channels);  // [B, h*w, p*p*C]
    g.output(g.unpatchify(hs, p, c.out_channels, h, w), "sample");
}

}  // namespace kiln::models
