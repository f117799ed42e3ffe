#include "models/transformers/flux2.h"

#include <cmath>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "models/transformers/flux.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers does.
std::string cls() { return class_name(ComponentKind::flux2); }
}  // namespace

Flux2Config Flux2Config::from_json(const nlohmann::json& j) {
    Flux2Config c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.heads = get("num_attention_heads", 48);
    c.head_dim = get("attention_head_dim", 128);
    c.in_channels = get("in_channels", 128);
    c.out_channels = get("out_channels", c.in_channels);
    c.layers = get("num_layers", 8);
    c.single_layers = get("num_single_layers", 48);
    c.patch = get("patch_size", 1);
    c.joint_attention_dim = get("joint_attention_dim", 15360);
    c.timestep_channels = get("timestep_guidance_channels", 256);
    c.mlp_ratio = get("mlp_ratio", 3.0);
    c.rope_theta = get("rope_theta", 2000.0);
    c.eps = (float)get("eps", 1e-6);
    c.guidance_embeds = get("guidance_embeds", true);
    c.axes_dims_rope = get("axes_dims_rope", std::vector<int>{32, 32, 32, 32});
    int sum = 0;
    for (int d : c.axes_dims_rope) {
        KILN_CHECK(d > 0 && d % 2 == 0, cls(), ": axes_dims_rope entries must be even, got ", d);
        sum += d;
    }
    KILN_CHECK(sum == c.head_dim, cls(), ": axes_dims_rope sum ", sum, " != attention_head_dim ", c.head_dim);
    KILN_CHECK(c.heads > 0 && c.head_dim > 0 && c.layers >= 0 && c.single_layers >= 0 && c.patch > 0 &&
                   c.in_channels > 0 && c.out_channels > 0 && c.mlp_hidden() > 0 && c.timestep_channels > 0 &&
                   c.timestep_channels % 2 == 0 && c.rope_theta > 0,
               cls(), ": bad config");
    return c;
}

std::pair<Tensor, Tensor> flux2_rope_tables(const Flux2Config& c, const Tensor& txt_ids, const Tensor& img_ids) {
    const int64_t n_axes = (int64_t)c.axes_dims_rope.size();
    // pos = ids.float(); `if ids.ndim == 3: ids = ids[0]`. Flux2PosEmbed loops over the axes, not ids' columns.
    auto pos = [&](const Tensor& ids, const char* name) {
        KILN_CHECK((ids.shape.size() == 2 || ids.shape.size() == 3) && ids.shape.back() >= n_axes, cls(), ": ", name,
                   " must be [S, ", n_axes, "] or [B, S, ", n_axes, "], got ", shape_str(ids.shape));
        Tensor t = ids.astype(DType::f32);
        const int64_t S = ids.shape[ids.shape.size() - 2], n = ids.shape.back();
        t.bytes.resize((size_t)(S * n) * sizeof(float));  // the first row of a batched tensor
        t.shape = {S, n};
        return t;
    };
    return axes_rope_tables(c.axes_dims_rope, c.rope_theta, pos(txt_ids, "txt_ids"), pos(img_ids, "img_ids"));
}

namespace {
struct Ctx {
    Builder& b;
    const Flux2Config& c;
    int B, D;
    ir::Val cos, sin;
    std::vector<ir::Val> mod_img, mod_txt, mod_single;  // [B, D] each: (shift, scale, gate) x sets
};

// q or k [B, S, D] RMS-normed per head over head_dim (torch RMSNorm(head_dim, eps), weight [head_dim]).
ir::Val head_norm(const Ctx& s, const std::string& name, ir::Val t) {
    auto& g = s.b.g();
    Shape sh = g.shape(t);  // [B, S, D] -> [B, S, H, hd] -> rms over hd -> [B, S, D]
    ir::Val h = g.reshape(t, {sh[0], sh[1], s.c.heads, s.c.head_dim});
    h = g.rms_norm(h, s.b.vec(name + ".weight", {s.c.head_dim}), s.c.eps);
    return g.reshape(h, sh);
}

struct Qkv {
    ir::Val q, k, v;
};
// Flux2Attention projections of one stream (no bias): q, k normed per head, v.
Qkv project(const Ctx& s, const std::string& attn, ir::Val x, const char* q, const char* k, const char* v,
            const char* nq, const char* nk) {
    return {head_norm(s, attn + nq, linear(s.b, attn + q, x, s.D, s.D)),
            head_norm(s, attn + nk, linear(s.b, attn + k, x, s.D, s.D)), linear(s.b, attn + v, x, s.D, s.D)};
}

// Rotary embedding on q and k, then SDPA (scale 1/sqrt(hd), no mask) over the joint sequence.
ir::Val rope_attention(const Ctx& s, const Qkv& p) {
    auto& g = s.b.g();
    return g.attention(g.rope(p.q, s.cos, s.sin), g.rope(p.k, s.cos, s.sin), p.v, s.c.heads);
}

ir::Val gated(const Ctx& s, ir::Val gate, ir::Val x) {  // gate [B, D] * x [B, S, D]
    return s.b.g().mul(s.b.g().reshape(gate, {s.B, 1, s.D}), x);
}

// Flux2SwiGLU: x [.., 2M] -> silu(x[.., :M]) * x[.., M:].
ir::Val swiglu(ir::Graph& g, ir::Val x) {
    auto h = g.chunk(x, (int)g.shape(x).size() - 1, 2);
    return g.mul(g.silu(h[0]), h[1]);
}

// Flux2FeedForward: linear_in (D -> 2M) -> SwiGLU -> linear_out (M -> D), no biases.
ir::Val feed_forward2(const Ctx& s, const std::string& name, ir::Val x) {
    const int M = s.c.mlp_hidden();
    return linear(s.b, name + ".linear_out", swiglu(s.b.g(), linear(s.b, name + ".linear_in", x, s.D, 2 * M)), M, s.D);
}

// Flux2TransformerBlock: returns {encoder_hidden_states, hidden_states}. m / mc: the shared image / text
// modulations (shift, scale, gate) of attention, then of the feed-forward.
std::pair<ir::Val, ir::Val> double_block(const Ctx& s, const std::string& pre, ir::Val hs, ir::Val ehs, int S_txt,
                                         int S_img) {
    auto& g = s.b.g();
    const auto &m = s.mod_img, &mc = s.mod_txt;
    const float eps = s.c.eps;
    ir::Val n = g.modulate(g.layer_norm(hs, {}, {}, eps), m[0], m[1]);      // [B, S_img, D]
    ir::Val nc = g.modulate(g.layer_norm(ehs, {}, {}, eps), mc[0], mc[1]);  // [B, S_txt, D]

    // Joint attention: text tokens first, then image tokens.
    const std::string a = pre + "attn.";
    Qkv img = project(s, a, n, "to_q", "to_k", "to_v", "norm_q", "norm_k");
    Qkv txt = project(s, a, nc, "add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k");
    Qkv joint{g.concat(txt.q, img.q, 1), g.concat(txt.k, img.k, 1), g.concat(txt.v, img.v, 1)};
    ir::Val o = rope_attention(s, joint);  // [B, S_txt + S_img, D]
    ir::Val attn_out = linear(s.b, a + "to_out.0", g.slice(o, 1, S_txt, S_img), s.D, s.D);
    ir::Val ctx_out = linear(s.b, a + "to_add_out", g.slice(o, 1, 0, S_txt), s.D, s.D);

    hs = g.add(hs, gated(s, m[2], attn_out));
    ir::Val n2 = g.modulate(g.layer_norm(hs, {}, {}, eps), m[3], m[4]);
    hs = g.add(hs, gated(s, m[5], feed_forward2(s, pre + "ff", n2)));

    ehs = g.add(ehs, gated(s, mc[2], ctx_out));
    ir::Val nc2 = g.modulate(g.layer_norm(ehs, {}, {}, eps), mc[3], mc[4]);
    ehs = g.add(ehs, gated(s, mc[5], feed_forward2(s, pre + "ff_context", nc2)));
    return {ehs, hs};
}

// Flux2SingleTransformerBlock on x = concat(txt, img) [B, S, D]: one Linear to [q, k, v, mlp_in (2M)], attention and
// SwiGLU in parallel, to_out over concat(attn, mlp) (D + M -> D), gated residual.
ir::Val single_block(const Ctx& s, const std::string& pre, ir::Val x) {
    auto& g = s.b.g();
    const int D = s.D, M = s.c.mlp_hidden();
    const auto& m = s.mod_single;
    ir::Val n = g.modulate(g.layer_norm(x, {}, {}, s.c.eps), m[0], m[1]);
    const std::string a = pre + "attn.";
    ir::Val proj = linear(s.b, a + "to_qkv_mlp_proj", n, D, 3 * D + 2 * M);  // [B, S, 3D + 2M]
    auto parts = g.split(proj, 2, {D, D, D, 2 * M});
    Qkv p{head_norm(s, a + "norm_q", parts[0]), head_norm(s, a + "norm_k", parts[1]), parts[2]};
    ir::Val attn = rope_attention(s, p);
    ir::Val h = linear(s.b, a + "to_out", g.concat(attn, swiglu(g, parts[3]), 2), D + M, D);
    return g.add(x, gated(s, m[2], h));
}
}  // namespace

void build_flux2(Builder& b, const Flux2Config& c, int B, int S_img, int S_txt, bool guidance) {
    KILN_CHECK(!guidance || c.guidance_embeds, cls(), ": guidance given but the config has no guidance_embeds");
    auto& g = b.g();
    const int D = c.inner(), S = S_txt + S_img;
    ir::Val x = g.input("hidden_states", {B, S_img, c.in_channels});
    ir::Val ctx = g.input("encoder_hidden_states", {B, S_txt, c.joint_attention_dim});
    ir::Val t = g.input("timestep", {B});
    ir::Val gs = guidance ? g.input("guidance", {B}) : ir::Val{};
    Ctx s{b, c, B, D, g.input("rope_cos", {S, c.head_dim / 2}), g.input("rope_sin", {S, c.head_dim / 2}), {}, {}, {}};

    // time_guidance_embed: Timesteps(timestep_guidance_channels, flip_sin_to_cos=True, shift 0) of t*1000 (and
    // guidance*1000) -> TimestepEmbedding MLPs (no bias), summed.
    const ir::TimestepAttrs tp{c.timestep_channels, true, 0.f, 1.f, 10000.f};
    ir::Val temb = timestep_embedding_mlp(b, "time_guidance_embed.timestep_embedder",
                                          g.timestep_embedding(g.scale(t, 1000.f), tp), c.timestep_channels, D);
    if (guidance)
        temb =
            g.add(temb, timestep_embedding_mlp(b, "time_guidance_embed.guidance_embedder",
                                               g.timestep_embedding(g.scale(gs, 1000.f), tp), c.timestep_channels, D));
    const ir::Val temb_act = g.silu(temb);  // Flux2Modulation and AdaLayerNormContinuous start with silu(temb)
    // The shared modulations, Flux2Modulation.split: (shift, scale, gate) per set.
    s.mod_img = g.chunk(linear(b, "double_stream_modulation_img.linear", temb_act, D, 6 * D), 1, 6);
    s.mod_txt = g.chunk(linear(b, "double_stream_modulation_txt.linear", temb_act, D, 6 * D), 1, 6);
    s.mod_single = g.chunk(linear(b, "single_stream_modulation.linear", temb_act, D, 3 * D), 1, 3);

    ir::Val hs = linear(b, "x_embedder", x, c.in_channels, D);                   // [B, S_img, D]
    ir::Val ehs = linear(b, "context_embedder", ctx, c.joint_attention_dim, D);  // [B, S_txt, D]
    for (int i = 0; i < c.layers; ++i) {
        g.begin_region("transformer_blocks", i);
        std::tie(ehs, hs) = double_block(s, "transformer_blocks." + std::to_string(i) + ".", hs, ehs, S_txt, S_img);
        g.end_region();
    }
    // Single blocks run on concat(txt, img), which stays concatenated across blocks.
    ir::Val joint = g.concat(ehs, hs, 1);  // [B, S_txt + S_img, D]
    for (int i = 0; i < c.single_layers; ++i) {
        g.begin_region("single_transformer_blocks", i);
        joint = single_block(s, "single_transformer_blocks." + std::to_string(i) + ".", joint);
        g.end_region();
    }
    hs = g.slice(joint, 1, S_txt, S_img);

    // norm_out = AdaLayerNormContinuous(elementwise_affine=False, eps, bias=False): scale first, then shift.
    auto ss = g.chunk(linear(b, "norm_out.linear", temb_act, D, 2 * D), 1, 2);
    hs = g.modulate(g.layer_norm(hs, {}, {}, c.eps), ss[1], ss[0]);
    g.output(linear(b, "proj_out", hs, D, c.patch * c.patch * c.out_channels), "sample");
}

}  // namespace kiln::models
