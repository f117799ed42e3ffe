#include "models/transformers/sd3.h"

#include <algorithm>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers / transformers do.
std::string cls() { return class_name(ComponentKind::sd3); }
}  // namespace

bool SD3Config::dual(int i) const {
    return std::find(dual_attention_layers.begin(), dual_attention_layers.end(), i) != dual_attention_layers.end();
}

SD3Config SD3Config::from_json(const nlohmann::json& j) {
    SD3Config c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.heads = get("num_attention_heads", 18);
    c.head_dim = get("attention_head_dim", 64);
    c.in_channels = get("in_channels", 16);
    c.out_channels = get("out_channels", c.in_channels);
    c.layers = get("num_layers", 18);
    c.patch = get("patch_size", 2);
    c.sample_size = get("sample_size", 128);
    c.joint_attention_dim = get("joint_attention_dim", 4096);
    c.caption_projection_dim = get("caption_projection_dim", 1152);
    c.pooled_projection_dim = get("pooled_projection_dim", 2048);
    // pos_embed_max_size defaults to 96; an explicit null means a sincos table computed per latent size.
    c.pos_embed_max_size = !j.contains("pos_embed_max_size") ? 96 : get("pos_embed_max_size", 0);
    c.qk_norm = get("qk_norm", std::string());
    c.dual_attention_layers = get("dual_attention_layers", std::vector<int>{});
    KILN_CHECK(c.qk_norm.empty() || c.qk_norm == "rms_norm" || c.qk_norm == "layer_norm", cls(), ": qk_norm '",
               c.qk_norm, "' is not supported (null, rms_norm, layer_norm)");
    KILN_CHECK(c.heads > 0 && c.head_dim > 0 && c.layers > 0 && c.patch > 0, cls(), ": bad config");
    // The joint attention's add_*_proj take `dim` features: the projected caption must be as wide as the image.
    KILN_CHECK(c.caption_projection_dim == c.inner(), cls(), ": caption_projection_dim ", c.caption_projection_dim,
               " differs from the inner dim ", c.inner());
    return c;
}

namespace {
struct Ctx {
    Builder& b;
    const SD3Config& c;
    int B, D;
};

// Attention's norm_q / norm_k / norm_added_q / norm_added_k: per head over head_dim, eps 1e-6.
ir::Val head_norm(const Ctx& s, const std::string& name, ir::Val x) {
    if (s.c.qk_norm.empty()) return x;
    auto& g = s.b.g();
    const Shape sh = g.shape(x);  // [B, S, H*hd]
    const int hd = s.c.head_dim;
    ir::Val h = g.reshape(x, {sh[0], sh[1], s.c.heads, hd});
    if (s.c.qk_norm == "rms_norm")
        h = g.rms_norm(h, s.b.vec(name + ".weight", {hd}), 1e-6f);
    else
        h = g.layer_norm(h, s.b.vec(name + ".weight", {hd}), s.b.vec(name + ".bias", {hd}), 1e-6f);
    return g.reshape(h, sh);
}

struct Qkv {
    ir::Val q, k, v;
};
Qkv project(const Ctx& s, const std::string& attn, ir::Val x, const char* q, const char* k, const char* v,
            const char* nq, const char* nk) {
    return {head_norm(s, attn + nq, linear(s.b, attn + q, x, s.D, s.D)),
            head_norm(s, attn + nk, linear(s.b, attn + k, x, s.D, s.D)), linear(s.b, attn + v, x, s.D, s.D)};
}

ir::Val gated(const Ctx& s, ir::Val gate, ir::Val x) {  // gate [B, D] unsqueezed over tokens
    return s.b.g().mul(s.b.g().reshape(gate, {s.B, 1, s.D}), x);
}

// JointTransformerBlock. hs [B, N, D], ctx [B, L, D], silu_temb = silu(temb) [B, D]. The last block
// (context_pre_only) returns no context.
void joint_block(const Ctx& s, int i, ir::Val& hs, ir::Val& ctx, ir::Val silu_temb) {
    auto& g = s.b.g();
    const int D = s.D;
    const bool pre_only = i == s.c.layers - 1, dual = s.c.dual(i);
    const std::string pre = "transformer_blocks." + std::to_string(i) + ".";
    const int64_t N = g.shape(hs)[1], L = g.shape(ctx)[1];

    // norm1: AdaLayerNormZero (6 chunks) or SD35AdaLayerNormZeroX (9: + shift/scale/gate of attn2).
    auto m = g.chunk(linear(s.b, pre + "norm1.linear", silu_temb, D, (dual ? 9 : 6) * D), 1, dual ? 9 : 6);
    ir::Val ln = g.layer_norm(hs, {}, {}, 1e-6f);
    ir::Val n1 = g.modulate(ln, m[0], m[1]);
    // norm1_context: AdaLayerNormZero, or AdaLayerNormContinuous (scale, shift) for the last block.
    std::vector<ir::Val> cm;
    ir::Val nc;
    if (pre_only) {
        cm = g.chunk(linear(s.b, pre + "norm1_context.linear", silu_temb, D, 2 * D), 1, 2);
        nc = g.modulate(g.layer_norm(ctx, {}, {}, 1e-6f), cm[1], cm[0]);
    } else {
        cm = g.chunk(linear(s.b, pre + "norm1_context.linear", silu_temb, D, 6 * D), 1, 6);
        nc = g.modulate(g.layer_norm(ctx, {}, {}, 1e-6f), cm[0], cm[1]);
    }

    // attn: JointAttnProcessor2_0, image tokens first, then text tokens, one softmax over both.
    const std::string a = pre + "attn.";
    Qkv x = project(s, a, n1, "to_q", "to_k", "to_v", "norm_q", "norm_k");
    Qkv e = project(s, a, nc, "add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k");
    ir::Val o = g.attention(g.concat(x.q, e.q, 1), g.concat(x.k, e.k, 1), g.concat(x.v, e.v, 1), s.c.heads);
    ir::Val o_img = linear(s.b, a + "to_out.0", g.slice(o, 1, 0, N), D, D);
    hs = g.add(hs, gated(s, m[2], o_img));
    if (dual) {  // attn2: self-attention of the image tokens on the second modulation of the same norm
        ir::Val n2 = g.modulate(ln, m[6], m[7]);
        Qkv y = project(s, pre + "attn2.", n2, "to_q", "to_k", "to_v", "norm_q", "norm_k");
        ir::Val o2 = linear(s.b, pre + "attn2.to_out.0", g.attention(y.q, y.k, y.v, s.c.heads), D, D);
        hs = g.add(hs, gated(s, m[8], o2));
    }
    ir::Val n3 = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), m[3], m[4]);
    hs = g.add(hs, gated(s, m[5], feed_forward(s.b, pre + "ff", n3, D, 4 * D, true)));

    if (pre_only) {
        ctx = {};
        return;
    }
    ir::Val o_ctx = linear(s.b, a + "to_add_out", g.slice(o, 1, N, L), D, D);
    ctx = g.add(ctx, gated(s, cm[2], o_ctx));
    ir::Val nc2 = g.modulate(g.layer_norm(ctx, {}, {}, 1e-6f), cm[3], cm[4]);
    ctx = g.add(ctx, gated(s, cm[5], feed_forward(s.b, pre + "ff_context", nc2, D, 4 * D, true)));
}
}  // namespace

void build_sd3(Builder& b, const SD3Config& c, int B, int H, int W, int L, const std::vector<int>& skip_layers) {
    for (int i : skip_layers)
        KILN_CHECK(i >= 0 && i < c.layers, "SD3: skip layer ", i, " is not a block (0..", c.layers - 1, ")");
    auto& g = b.g();
    const int D = c.inner(), p = c.patch;
    KILN_CHECK(H % p == 0 && W % p == 0, "SD3: latent size ", H, "x", W, " is not a multiple of patch size ", p);
    const int h = H / p, w = W / p;
    const int M = c.pos_embed_max_size;
    KILN_CHECK(!M || (h <= M && w <= M), "SD3: latent of ", h, "x", w, " patches exceeds pos_embed_max_size ", M);
    ir::Val x = g.input("hidden_states", {B, c.in_channels, H, W});
    ir::Val txt = g.input("encoder_hidden_states", {B, L, c.joint_attention_dim});
    ir::Val pooled = g.input("pooled_projections", {B, c.pooled_projection_dim});
    ir::Val t = g.input("timestep", {B});

    // pos_embed: PatchEmbed conv(k=p, s=p) -> [B, h*w, D] + the stored [1, M*M, D] table cropped to the
    // centre h x w (top = (M - h) / 2, left = (M - w) / 2). The crop is taken on the host: the whole table
    // can exceed a device's maxStorageBufferRange (SD3 medium: 192^2 x 1536 f32 = 226 MB; lavapipe: 128 MB).
    ir::Val pw = b.matrix("pos_embed.proj.weight", {D, c.in_channels, p, p});
    ir::Val pb = b.vec("pos_embed.proj.bias", {D});
    ir::Val hs = g.conv2d(x, pw, pb, {p, p, 0, 0});                 // [B, D, h, w]
    hs = g.transpose(g.reshape(hs, {B, D, (int64_t)h * w}), 1, 2);  // [B, h*w, D]
    Tensor pos(DType::f32, {1, (int64_t)h * w, D});
    if (M) {
        // Declared (shape-checked) but read by no op, so never uploaded; its bytes come through weight_fn.
        const ir::Value& tv = g.value(b.vec("pos_embed.pos_embed", {1, (int64_t)M * M, D}));
        Tensor table(DType::f32, tv.shape);
        b.weight_fn()(tv, table.bytes.data(), table.bytes.size());
        const int top = (M - h) / 2, left = (M - w) / 2;
        for (int i = 0; i < h; ++i)
            std::copy_n(table.data<float>() + ((size_t)(top + i) * M + left) * D, (size_t)w * D,
                        pos.data<float>() + (size_t)i * w * D);
    } else {
        pos = sincos_pos_embed_2d(D, h, w, c.sample_size / p, 1.0);
    }
    hs = g.add(hs, b.constant("const.pos_embed", std::move(pos)));  // [1, h*w, D]

    // time_text_embed: TimestepEmbedding(Timesteps(256, True, 0)) + PixArtAlphaTextProjection(silu) -> temb [B, D].
    ir::Val t_proj = g.timestep_embedding(t, {256, true, 0.f, 1.f, 10000.f});
    ir::Val temb = timestep_embedding_mlp(b, "time_text_embed.timestep_embedder", t_proj, 256, D);
    ir::Val pe = linear(b, "time_text_embed.text_embedder.linear_1", pooled, c.pooled_projection_dim, D);
    temb = g.add(temb, linear(b, "time_text_embed.text_embedder.linear_2", g.silu(pe), D, D));
    ir::Val silu_temb = g.silu(temb);  // every adaLN takes linear(silu(temb)): computed once

    ir::Val ctx = linear(b, "context_embedder", txt, c.joint_attention_dim, c.caption_projection_dim);  // [B, L, D]

    // Blocks: each contiguous run of one structure is a region kind; a kind seen again later gets a new name
    // (kinds must be contiguous). The last block (context_pre_only) differs from all others: inline.
    const Ctx s{b, c, B, D};
    std::vector<std::string> used;
    std::string kind;
    int prev = -1;  // the last block built: a skipped block emits nothing, so its neighbours stay one run
    for (int i = 0; i < c.layers; ++i) {
        if (std::find(skip_layers.begin(), skip_layers.end(), i) != skip_layers.end()) continue;
        const bool last = i == c.layers - 1;
        if (!last) {
            std::string base = c.dual(i) ? "dual_blocks" : "transformer_blocks";
            if (prev < 0 || c.dual(i) != c.dual(prev)) {
                int n = (int)std::count_if(used.begin(), used.end(), [&](auto& u) { return u.rfind(base, 0) == 0; });
                kind = n ? base + "." + std::to_string(n) : base;
                used.push_back(kind);
            }
            g.begin_region(kind, i);
        }
        joint_block(s, i, hs, ctx, silu_temb);
        if (!last) g.end_region();
        prev = i;
    }

    // norm_out: AdaLayerNormContinuous (scale, shift), proj_out, unpatchify.
    auto ss = g.chunk(linear(b, "norm_out.linear", silu_temb, D, 2 * D), 1, 2);
    hs = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), ss[1], ss[0]);
    hs = linear(b, "proj_out", hs, D, p * p * c.out_channels);  // [B, h*w, p*p*C]
    g.output(g.unpatchify(hs, p, c.out_channels, h, w), "sample");
}

}  // namespace kiln::models
