#include "models/transformers/flux.h"

#include <cmath>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers / transformers do.
std::string cls() { return class_name(ComponentKind::flux); }
}  // namespace

FluxConfig FluxConfig::from_json(const nlohmann::json& j) {
    FluxConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.heads = get("num_attention_heads", 24);
    c.head_dim = get("attention_head_dim", 128);
    c.in_channels = get("in_channels", 64);
    c.out_channels = get("out_channels", c.in_channels);
    c.layers = get("num_layers", 19);
    c.single_layers = get("num_single_layers", 38);
    c.patch = get("patch_size", 1);
    c.joint_attention_dim = get("joint_attention_dim", 4096);
    c.pooled_projection_dim = get("pooled_projection_dim", 768);
    c.guidance_embeds = get("guidance_embeds", false);
    c.axes_dims_rope = get("axes_dims_rope", std::vector<int>{16, 56, 56});
    int sum = 0;
    for (int d : c.axes_dims_rope) {
        KILN_CHECK(d > 0 && d % 2 == 0, cls(), ": axes_dims_rope entries must be even, got ", d);
        sum += d;
    }
    KILN_CHECK(sum == c.head_dim, cls(), ": axes_dims_rope sum ", sum, " != attention_head_dim ", c.head_dim);
    KILN_CHECK(c.heads > 0 && c.head_dim > 0 && c.layers >= 0 && c.single_layers >= 0 && c.patch > 0, cls(),
               ": bad config");
    return c;
}

std::pair<Tensor, Tensor> flux_rope_tables(const FluxConfig& c, const Tensor& txt_ids, const Tensor& img_ids) {
    const int n_axes = (int)c.axes_dims_rope.size();
    // pos = ids.float(); a deprecated batched [B, S, n] ids tensor is read as its first row, as diffusers does.
    auto pos = [&](const Tensor& ids) {
        KILN_CHECK((ids.shape.size() == 2 || ids.shape.size() == 3) && ids.shape.back() == n_axes, cls(),
                   ": ids must be [S, ", n_axes, "], got ", shape_str(ids.shape));
        Tensor t = ids.astype(DType::f32);
        int64_t S = ids.shape[ids.shape.size() - 2];
        t.bytes.resize((size_t)(S * n_axes) * sizeof(float));
        t.shape = {S, n_axes};
        return t;
    };
    return axes_rope_tables(c.axes_dims_rope, 10000.0, pos(txt_ids), pos(img_ids));
}

std::pair<Tensor, Tensor> axes_rope_tables(const std::vector<int>& axes_dims, double theta, const Tensor& txt,
                                           const Tensor& img) {
    const int64_t n_axes = (int64_t)axes_dims.size(), St = txt.shape[0], S = St + img.shape[0];
    KILN_CHECK(txt.shape.size() == 2 && img.shape.size() == 2 && txt.shape[1] >= n_axes && img.shape[1] >= n_axes,
               "rope positions must be [S, >= ", n_axes, "], got ", shape_str(txt.shape), " and ",
               shape_str(img.shape));
    int64_t half = 0;
    for (int d : axes_dims) half += d / 2;
    Tensor tc(DType::f32, {S, half}), ts(DType::f32, {S, half});
    for (int64_t s = 0; s < S; ++s) {
        const float* id = s < St ? txt.data<float>() + s * txt.shape[1] : img.data<float>() + (s - St) * img.shape[1];
        int64_t col = 0;
        for (int64_t a = 0; a < n_axes; ++a) {
            const int dim = axes_dims[(size_t)a];
            for (int i = 0; i < dim / 2; ++i, ++col) {
                // freqs = 1 / theta^(arange(0, dim, 2) / dim) in f64; angle = outer(pos, freqs).
                double freq = 1.0 / std::pow(theta, (double)(2 * i) / (double)dim);
                double angle = (double)id[a] * freq;
                tc.data<float>()[s * half + col] = (float)std::cos(angle);
                ts.data<float>()[s * half + col] = (float)std::sin(angle);
            }
        }
    }
    return {tc, ts};
}

namespace {
struct Ctx {
    Builder& b;
    const FluxConfig& c;
    int B, D;
    ir::Val cos, sin;
};

// FluxAttention projection of one stream: q/k/v [B, S, D], q/k RMS-normed per head (eps 1e-6, weight [hd]).
struct Qkv {
    ir::Val q, k, v;
};
Qkv project(const Ctx& s, const std::string& attn, ir::Val x, int in, const char* q, const char* k, const char* v,
            const char* nq, const char* nk) {
    auto& g = s.b.g();
    auto head_norm = [&](const std::string& name, ir::Val t) {
        Shape sh = g.shape(t);  // [B, S, D] -> [B, S, H, hd] -> rms over hd -> [B, S, D]
        ir::Val h = g.reshape(t, {sh[0], sh[1], s.c.heads, s.c.head_dim});
        h = g.rms_norm(h, s.b.vec(name + ".weight", {s.c.head_dim}), 1e-6f);
        return g.reshape(h, sh);
    };
    return {head_norm(attn + nq, linear(s.b, attn + q, x, in, s.D)),
            head_norm(attn + nk, linear(s.b, attn + k, x, in, s.D)), linear(s.b, attn + v, x, in, s.D)};
}

// Rotary embedding on q and k, then SDPA (scale 1/sqrt(hd)) over the joint sequence.
ir::Val rope_attention(const Ctx& s, const Qkv& p) {
    auto& g = s.b.g();
    return g.attention(g.rope(p.q, s.cos, s.sin), g.rope(p.k, s.cos, s.sin), p.v, s.c.heads);
}

ir::Val gated(ir::Graph& g, const Ctx& s, ir::Val gate, ir::Val x) {  // gate [B, D] * x [B, S, D]
    return g.mul(g.reshape(gate, {s.B, 1, s.D}), x);
}

// FluxTransformerBlock: returns {encoder_hidden_states, hidden_states}.
std::pair<ir::Val, ir::Val> double_block(const Ctx& s, const std::string& pre, ir::Val hs, ir::Val ehs,
                                         ir::Val temb_act, int S_txt, int S_img) {
    auto& g = s.b.g();
    const int D = s.D;
    // norm1 / norm1_context = AdaLayerNormZero: shift, scale, gate (msa), shift, scale, gate (mlp).
    auto m = g.chunk(linear(s.b, pre + "norm1.linear", temb_act, D, 6 * D), 1, 6);
    auto mc = g.chunk(linear(s.b, pre + "norm1_context.linear", temb_act, D, 6 * D), 1, 6);
    ir::Val n = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), m[0], m[1]);      // [B, S_img, D]
    ir::Val nc = g.modulate(g.layer_norm(ehs, {}, {}, 1e-6f), mc[0], mc[1]);  // [B, S_txt, D]

    // Joint attention: text tokens first, then image tokens.
    const std::string a = pre + "attn.";
    Qkv img = project(s, a, n, D, "to_q", "to_k", "to_v", "norm_q", "norm_k");
    Qkv txt = project(s, a, nc, D, "add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k");
    Qkv joint{g.concat(txt.q, img.q, 1), g.concat(txt.k, img.k, 1), g.concat(txt.v, img.v, 1)};
    ir::Val o = rope_attention(s, joint);  // [B, S_txt + S_img, D]
    ir::Val attn_out = linear(s.b, a + "to_out.0", g.slice(o, 1, S_txt, S_img), D, D);
    ir::Val ctx_out = linear(s.b, a + "to_add_out", g.slice(o, 1, 0, S_txt), D, D);

    hs = g.add(hs, gated(g, s, m[2], attn_out));
    ir::Val n2 = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), m[3], m[4]);
    hs = g.add(hs, gated(g, s, m[5], feed_forward(s.b, pre + "ff", n2, D, 4 * D, true)));

    ehs = g.add(ehs, gated(g, s, mc[2], ctx_out));
    ir::Val nc2 = g.modulate(g.layer_norm(ehs, {}, {}, 1e-6f), mc[3], mc[4]);
    ehs = g.add(ehs, gated(g, s, mc[5], feed_forward(s.b, pre + "ff_context", nc2, D, 4 * D, true)));
    return {ehs, hs};
}

// FluxSingleTransformerBlock on x = concat(txt, img) [B, S, D] (diffusers concatenates and splits inside each
// block; the concat of the split is x itself, so the stream stays concatenated across blocks).
ir::Val single_block(const Ctx& s, const std::string& pre, ir::Val x, ir::Val temb_act) {
    auto& g = s.b.g();
    const int D = s.D, mlp = 4 * D;
    auto m = g.chunk(linear(s.b, pre + "norm.linear", temb_act, D, 3 * D), 1, 3);  // shift, scale, gate
    ir::Val n = g.modulate(g.layer_norm(x, {}, {}, 1e-6f), m[0], m[1]);
    ir::Val mlp_h = g.gelu(linear(s.b, pre + "proj_mlp", n, D, mlp), true);  // [B, S, 4D]
    ir::Val attn = rope_attention(s, project(s, pre + "attn.", n, D, "to_q", "to_k", "to_v", "norm_q", "norm_k"));
    ir::Val h = linear(s.b, pre + "proj_out", g.concat(attn, mlp_h, 2), D + mlp, D);
    return g.add(x, gated(g, s, m[2], h));
}
}  // namespace

void build_flux(Builder& b, const FluxConfig& c, int B, int S_img, int S_txt) {
    auto& g = b.g();
    const int D = c.inner(), S = S_txt + S_img;
    ir::Val x = g.input("hidden_states", {B, S_img, c.in_channels});
    ir::Val ctx = g.input("encoder_hidden_states", {B, S_txt, c.joint_attention_dim});
    ir::Val pooled = g.input("pooled_projections", {B, c.pooled_projection_dim});
    ir::Val t = g.input("timestep", {B});
    ir::Val guidance = c.guidance_embeds ? g.input("guidance", {B}) : ir::Val{};
    Ctx s{b, c, B, D, g.input("rope_cos", {S, c.head_dim / 2}), g.input("rope_sin", {S, c.head_dim / 2})};

    ir::Val hs = linear(b, "x_embedder", x, c.in_channels, D);                   // [B, S_img, D]
    ir::Val ehs = linear(b, "context_embedder", ctx, c.joint_attention_dim, D);  // [B, S_txt, D]

    // time_text_embed: Timesteps(256, flip_sin_to_cos=True, shift 0) of t*1000 (and guidance*1000) -> MLPs,
    // plus the pooled text projection (linear_1 -> silu -> linear_2).
    const ir::TimestepAttrs tp{256, true, 0.f, 1.f, 10000.f};
    ir::Val temb = timestep_embedding_mlp(b, "time_text_embed.timestep_embedder",
                                          g.timestep_embedding(g.scale(t, 1000.f), tp), 256, D);
    if (c.guidance_embeds)
        temb = g.add(temb, timestep_embedding_mlp(b, "time_text_embed.guidance_embedder",
                                                  g.timestep_embedding(g.scale(guidance, 1000.f), tp), 256, D));
    ir::Val text = linear(b, "time_text_embed.text_embedder.linear_1", pooled, c.pooled_projection_dim, D);
    text = linear(b, "time_text_embed.text_embedder.linear_2", g.silu(text), D, D);
    temb = g.add(temb, text);               // [B, D]
    const ir::Val temb_act = g.silu(temb);  // every AdaLayerNorm* starts with silu(temb)

    for (int i = 0; i < c.layers; ++i) {
        g.begin_region("transformer_blocks", i);
        std::tie(ehs, hs) =
            double_block(s, "transformer_blocks." + std::to_string(i) + ".", hs, ehs, temb_act, S_txt, S_img);
        g.end_region();
    }
    ir::Val joint = g.concat(ehs, hs, 1);  // [B, S_txt + S_img, D]
    for (int i = 0; i < c.single_layers; ++i) {
        g.begin_region("single_transformer_blocks", i);
        joint = single_block(s, "single_transformer_blocks." + std::to_string(i) + ".", joint, temb_act);
        g.end_region();
    }
    hs = g.slice(joint, 1, S_txt, S_img);

    // norm_out = AdaLayerNormContinuous(elementwise_affine=False, eps 1e-6): scale first, then shift.
    auto ss = g.chunk(linear(b, "norm_out.linear", temb_act, D, 2 * D), 1, 2);
    hs = g.modulate(g.layer_norm(hs, {}, {}, 1e-6f), ss[1], ss[0]);
    g.output(linear(b, "proj_out", hs, D, c.patch * c.patch * c.out_channels), "sample");
}

}  // namespace kiln::models
