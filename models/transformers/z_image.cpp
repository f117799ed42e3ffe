#include "models/transformers/z_image.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers does.
std::string cls() { return class_name(ComponentKind::z_image); }

constexpr int kSeqMultiple = 32;  // SEQ_MULTI_OF: image and caption tokens are padded to a multiple of it

int round_up(int n) { return (n + kSeqMultiple - 1) / kSeqMultiple * kSeqMultiple; }
}  // namespace

ZImageConfig ZImageConfig::from_json(const nlohmann::json& j) {
    ZImageConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.in_channels = get("in_channels", 16);
    c.dim = get("dim", 3840);
    c.layers = get("n_layers", 30);
    c.refiner_layers = get("n_refiner_layers", 2);
    c.heads = get("n_heads", 30);  // n_kv_heads is accepted by diffusers and unused: plain multi-head attention
    c.norm_eps = (float)get("norm_eps", 1e-5);
    c.qk_norm = get("qk_norm", true);
    c.cap_feat_dim = get("cap_feat_dim", 2560);
    c.rope_theta = get("rope_theta", 256.0);
    c.t_scale = (float)get("t_scale", 1000.0);
    c.axes_dims = get("axes_dims", std::vector<int>{32, 48, 48});
    c.axes_lens = get("axes_lens", std::vector<int>{1024, 512, 512});
    KILN_CHECK(!j.contains("siglip_feat_dim") || j["siglip_feat_dim"].is_null(), cls(),
               ": siglip_feat_dim (the Omni variant's SigLIP branch) is not supported (null only)");
    // The pipeline calls forward with its defaults patch_size=2, f_patch_size=1: the "2-1" embedder and final layer.
    auto ps = get("all_patch_size", std::vector<int>{2}), fs = get("all_f_patch_size", std::vector<int>{1});
    bool has_2_1 = false;
    for (size_t i = 0; i < ps.size() && i < fs.size(); ++i) has_2_1 |= ps[i] == 2 && fs[i] == 1;
    KILN_CHECK(has_2_1, cls(), ": all_patch_size / all_f_patch_size have no (2, 1) pair (the pipeline's patch sizes)");
    KILN_CHECK(c.dim > 0 && c.heads > 0 && c.dim % c.heads == 0, cls(), ": n_heads ", c.heads, " does not divide dim ",
               c.dim);
    KILN_CHECK(c.layers >= 0 && c.refiner_layers >= 0 && c.in_channels > 0 && c.cap_feat_dim > 0, cls(),
               ": bad config");
    // Position ids have three columns (frame, row, column), one per axis.
    KILN_CHECK(c.axes_dims.size() == 3 && c.axes_lens.size() == 3, cls(), ": axes_dims and axes_lens must have 3 axes");
    int sum = 0;
    for (int d : c.axes_dims) {
        KILN_CHECK(d > 0 && d % 2 == 0, cls(), ": axes_dims entries must be even, got ", d);
        sum += d;
    }
    KILN_CHECK(sum == c.head_dim(), cls(), ": axes_dims sum ", sum, " != head dim ", c.head_dim());
    return c;
}

ZImageLayout ZImageLayout::of(const ZImageConfig& c, const std::vector<ZImageItem>& items) {
    KILN_CHECK(!items.empty(), cls(), ": no items");
    ZImageLayout lay;
    lay.items = items;
    for (const ZImageItem& it : items) {
        KILN_CHECK(it.height > 0 && it.width > 0 && it.height % c.patch == 0 && it.width % c.patch == 0, cls(),
                   ": latent ", it.height, "x", it.width, " is not a positive multiple of the patch size ", c.patch);
        KILN_CHECK(it.cap_len > 0, cls(), ": an item has no caption tokens");
        const int n = (it.height / c.patch) * (it.width / c.patch);
        lay.n.push_back(n);
        lay.n_pad.push_back(round_up(n));
        lay.l.push_back(it.cap_len);
        lay.l_pad.push_back(round_up(it.cap_len));
        lay.s.push_back(lay.n_pad.back() + lay.l_pad.back());
        lay.n_max = std::max(lay.n_max, lay.n_pad.back());
        lay.l_max = std::max(lay.l_max, lay.l_pad.back());
        lay.s_max = std::max(lay.s_max, lay.s.back());
        // RopeEmbedder indexes tables of axes_lens rows: image tokens sit at frame l_pad + 1.
        KILN_CHECK(lay.l_pad.back() + 1 < c.axes_lens[0] && it.height / c.patch <= c.axes_lens[1] &&
                       it.width / c.patch <= c.axes_lens[2],
                   cls(), ": ", it.cap_len, " caption tokens and a ", it.height, "x", it.width,
                   " latent exceed axes_lens");
    }
    return lay;
}

namespace {
// Per-slot RoPE tables [rows, head_dim/2] from position ids (frame, row, column), as RopeEmbedder: per axis a of
// dim d, freqs 1 / theta^(2i/d) in f64, angle = (f32)(pos * freq), then torch.polar's cos/sin of that f32 angle.
struct RopeTables {
    Tensor cos, sin;
    std::vector<std::vector<double>> freqs;  // per axis
    RopeTables(const ZImageConfig& c, int64_t rows)
        : cos(DType::f32, {rows, c.head_dim() / 2}), sin(DType::f32, {rows, c.head_dim() / 2}) {
        for (int d : c.axes_dims) {
            std::vector<double> f;
            for (int i = 0; i < d / 2; ++i) f.push_back(1.0 / std::pow(c.rope_theta, (double)(2 * i) / (double)d));
            freqs.push_back(std::move(f));
        }
    }
    void set(int64_t row, int f, int h, int w) {
        const int pos[3] = {f, h, w};
        const int64_t half = cos.shape[1];
        int64_t col = 0;
        for (size_t a = 0; a < freqs.size(); ++a)
            for (double fr : freqs[a]) {
                const float angle = (float)((double)pos[a] * fr);
                cos.data<float>()[row * half + col] = (float)std::cos((double)angle);
                sin.data<float>()[row * half + col] = (float)std::sin((double)angle);
                ++col;
            }
    }
};

// A key mask [B, 1, max] over items of lengths len (0 on an item's slots, lowest() past them), or none when every
// item has the longest length (diffusers passes attn_mask=None then).
void key_mask(std::map<std::string, Tensor>& out, const std::string& name, const std::vector<int>& len, int max) {
    if (std::all_of(len.begin(), len.end(), [&](int l) { return l == max; })) return;
    const int64_t B = (int64_t)len.size();
    Tensor m(DType::f32, {B, 1, max});
    for (int64_t i = 0; i < B; ++i)
        for (int j = len[(size_t)i]; j < max; ++j) m.data<float>()[i * max + j] = std::numeric_limits<float>::lowest();
    out[name] = m;
}
}  // namespace

std::map<std::string, Tensor> prepare_z_image(const ZImageConfig& c, const ZImageLayout& lay) {
    const int B = lay.batch();
    int sum_n = 0, sum_l = 0;
    for (int i = 0; i < B; ++i) sum_n += lay.n[(size_t)i], sum_l += lay.l[(size_t)i];
    Tensor xg(DType::i32, {(int64_t)B * lay.n_max}), cg(DType::i32, {(int64_t)B * lay.l_max});
    Tensor ug(DType::i32, {(int64_t)B * lay.s_max});
    RopeTables xr(c, (int64_t)B * lay.n_max), cr(c, (int64_t)B * lay.l_max), ur(c, (int64_t)B * lay.s_max);
    int off_n = 0, off_l = 0;
    for (int i = 0; i < B; ++i) {
        const int n = lay.n[(size_t)i], np = lay.n_pad[(size_t)i], l = lay.l[(size_t)i], lp = lay.l_pad[(size_t)i];
        const int wt = lay.items[(size_t)i].width / c.patch;
        // Position ids: image token j = (h, w) at (lp + 1, h, w), its pad slots at (0, 0, 0); caption slot j at
        // (1 + j, 0, 0), pad slots included. Batch padding: (0, 0, 0) (diffusers: zeros; masked keys either way).
        auto img_pos = [&](RopeTables& r, int64_t row, int j) {
            j < n ? r.set(row, lp + 1, j / wt, j % wt) : r.set(row, 0, 0, 0);
        };
        auto cap_pos = [&](RopeTables& r, int64_t row, int j) { r.set(row, j < lp ? 1 + j : 0, 0, 0); };
        // x_gather: item i's token j is row off_n + j of the embedded tokens of all items; its pad slots and the batch
        // padding take the x_pad_token row (sum_n). cap_gather likewise (the cap_pad_token row: sum_l).
        for (int j = 0; j < lay.n_max; ++j) {
            const int64_t row = (int64_t)i * lay.n_max + j;
            xg.data<int32_t>()[row] = j < n ? off_n + j : sum_n;
            img_pos(xr, row, j);
        }
        for (int j = 0; j < lay.l_max; ++j) {
            const int64_t row = (int64_t)i * lay.l_max + j;
            cg.data<int32_t>()[row] = j < l ? off_l + j : sum_l;
            cap_pos(cr, row, j);
        }
        // unified_gather: rows of cat(refined image [B * n_max], refined captions [B * l_max]): the item's n_pad image
        // slots, then its l_pad caption slots; batch padding reads the item's first row (its key is masked, its output
        // dropped).
        for (int j = 0; j < lay.s_max; ++j) {
            const int64_t row = (int64_t)i * lay.s_max + j;
            if (j < np) {
                ug.data<int32_t>()[row] = i * lay.n_max + j;
                img_pos(ur, row, j);
            } else if (j < np + lp) {
                ug.data<int32_t>()[row] = B * lay.n_max + i * lay.l_max + (j - np);
                cap_pos(ur, row, j - np);
            } else {
                ug.data<int32_t>()[row] = i * lay.n_max;
                ur.set(row, 0, 0, 0);
            }
        }
        off_n += n, off_l += l;
    }
    std::map<std::string, Tensor> out = {{"x_gather", xg},         {"cap_gather", cg},     {"unified_gather", ug},
                                         {"x_rope_cos", xr.cos},   {"x_rope_sin", xr.sin}, {"cap_rope_cos", cr.cos},
                                         {"cap_rope_sin", cr.sin}, {"rope_cos", ur.cos},   {"rope_sin", ur.sin}};
    key_mask(out, "x_mask", lay.n_pad, lay.n_max);
    key_mask(out, "cap_mask", lay.l_pad, lay.l_max);
    key_mask(out, "mask", lay.s, lay.s_max);
    return out;
}

namespace {
struct Ctx {
    Builder& b;
    const ZImageConfig& c;
    int B;
};

// One sequence's shared inputs: [B, S, dim] activations, RoPE tables [B * S, head_dim/2], the key mask (or none).
struct Seq {
    int S;
    ir::Val cos, sin, mask;
};

// Per-head RMSNorm (Attention.norm_q / norm_k, eps 1e-5) then the rotary embedding, over the batch flattened to one
// sequence [1, B * S, H * hd] so that each slot takes its own row of the tables (items differ in positions). The
// reshapes are views; ir::fuse makes the norm and the rotation one rms_norm_rope.
ir::Val norm_rope(const Ctx& s, const Seq& q, const std::string& norm, ir::Val t) {
    auto& g = s.b.g();
    const int D = s.c.dim, hd = s.c.head_dim();
    ir::Val flat = g.reshape(t, {1, (int64_t)s.B * q.S, D});
    ir::Val h = flat;
    if (s.c.qk_norm) {
        h = g.reshape(flat, {1, (int64_t)s.B * q.S, s.c.heads, hd});
        h = g.rms_norm(h, s.b.vec(norm + ".weight", {hd}), 1e-5f);
        h = g.reshape(h, {1, (int64_t)s.B * q.S, D});
    }
    return g.reshape(g.rope(h, q.cos, q.sin), {s.B, q.S, D});
}

// ZSingleStreamAttnProcessor: to_q/k/v (no biases), q/k norm, RoPE, SDPA with the key mask, to_out.0.
ir::Val attention(const Ctx& s, const Seq& q, const std::string& pre, ir::Val x) {
    auto& g = s.b.g();
    const int D = s.c.dim;
    ir::Val qv = norm_rope(s, q, pre + "norm_q", linear(s.b, pre + "to_q", x, D, D));
    ir::Val kv = norm_rope(s, q, pre + "norm_k", linear(s.b, pre + "to_k", x, D, D));
    ir::Val vv = linear(s.b, pre + "to_v", x, D, D);
    return linear(s.b, pre + "to_out.0", g.attention(qv, kv, vv, s.c.heads, q.mask), D, D);
}

// FeedForward: w2(silu(w1 x) * w3 x), hidden int(dim / 3 * 8), no biases.
ir::Val feed_forward(const Ctx& s, const std::string& pre, ir::Val x) {
    auto& g = s.b.g();
    const int D = s.c.dim, F = s.c.ffn_dim();
    ir::Val h = g.mul(g.silu(linear(s.b, pre + "w1", x, D, F)), linear(s.b, pre + "w3", x, D, F));
    return linear(s.b, pre + "w2", h, F, D);
}

// ZImageTransformerBlock on x [B, S, dim]. With adaln (modulation=True): scale_msa, gate_msa, scale_mlp, gate_mlp =
// adaLN_modulation(adaln).chunk(4) (a Linear, no SiLU, no shift), gates tanh'd, scales 1 + s;
//   x += tanh(g_msa) * attention_norm2(attn(attention_norm1(x) * (1 + s_msa)))
//   x += tanh(g_mlp) * ffn_norm2(ffn(ffn_norm1(x) * (1 + s_mlp)))
// Without (modulation=False: the context refiner) the same without scales and gates. RMSNorms eps norm_eps.
ir::Val block(const Ctx& s, const Seq& q, const std::string& pre, ir::Val x, ir::Val adaln) {
    auto& g = s.b.g();
    const int D = s.c.dim;
    const float eps = s.c.norm_eps;
    auto norm = [&](const char* name, ir::Val t) { return g.rms_norm(t, s.b.vec(pre + name + ".weight", {D}), eps); };
    ir::Val scale_msa, gate_msa, scale_mlp, gate_mlp;
    if (adaln) {
        auto m = g.chunk(linear(s.b, pre + "adaLN_modulation.0", adaln, s.c.adaln_dim(), 4 * D), 1, 4);  // [B, D] x 4
        auto per_item = [&](ir::Val v) { return g.reshape(v, {s.B, 1, D}); };
        scale_msa = per_item(g.scale(m[0], 1.f, 1.f));
        gate_msa = per_item(g.tanh(m[1]));
        scale_mlp = per_item(g.scale(m[2], 1.f, 1.f));
        gate_mlp = per_item(g.tanh(m[3]));
    }
    ir::Val h = norm("attention_norm1", x);
    if (adaln) h = g.mul(h, scale_msa);
    ir::Val a = norm("attention_norm2", attention(s, q, pre + "attention.", h));
    x = g.add(x, adaln ? g.mul(gate_msa, a) : a);
    h = norm("ffn_norm1", x);
    if (adaln) h = g.mul(h, scale_mlp);
    ir::Val f = norm("ffn_norm2", feed_forward(s, pre + "feed_forward.", h));
    return g.add(x, adaln ? g.mul(gate_mlp, f) : f);
}

// Rows [n, D] placed by gather indices: rows of `table` [R, D] with the learned pad token [1, D] appended as row R.
ir::Val place(const Ctx& s, ir::Val table, const std::string& pad_token, ir::Val ids, int S) {
    auto& g = s.b.g();
    const int D = s.c.dim;
    ir::Val t = g.concat(table, s.b.vec(pad_token, {1, D}), 0);
    return g.reshape(g.embedding(t, ids), {s.B, S, D});
}

// The repeated blocks of one kind over x, each a region.
ir::Val blocks(const Ctx& s, const Seq& q, const char* kind, int count, ir::Val x, ir::Val adaln) {
    auto& g = s.b.g();
    for (int i = 0; i < count; ++i) {
        g.begin_region(kind, i);
        x = block(s, q, std::string(kind) + "." + std::to_string(i) + ".", x, adaln);
        g.end_region();
    }
    return x;
}
}  // namespace

void build_z_image(Builder& b, const ZImageConfig& c, const ZImageLayout& lay) {
    auto& g = b.g();
    const int B = lay.batch(), D = c.dim, p = c.patch, half = c.head_dim() / 2;
    Ctx s{b, c, B};
    // The three sequences (image tokens, caption tokens, unified): RoPE tables, and a key mask where items differ in
    // length (prepare_z_image's key_mask makes one exactly then).
    auto seq = [&](const std::string& pre, const std::string& mask, const std::vector<int>& len, int S) {
        const Shape ts{(int64_t)B * S, half};
        const bool masked = std::any_of(len.begin(), len.end(), [&](int l) { return l != S; });
        return Seq{S, g.input(pre + "rope_cos", ts), g.input(pre + "rope_sin", ts),
                   masked ? g.input(mask, {B, 1, S}) : ir::Val{}};
    };
    const Seq xs = seq("x_", "x_mask", lay.n_pad, lay.n_max), cs = seq("cap_", "cap_mask", lay.l_pad, lay.l_max),
              us = seq("", "mask", lay.s, lay.s_max);

    // t_embedder: sinusoid of t * t_scale (256, [cos, sin]) -> Linear(256, 1024) -> SiLU -> Linear(1024, adaln_dim).
    ir::Val t = g.scale(g.input("t", {B}), c.t_scale);
    ir::Val adaln = g.timestep_embedding(t, ir::TimestepAttrs{256, true, 0.f, 1.f, 10000.f});
    adaln = linear(b, "t_embedder.mlp.2", g.silu(linear(b, "t_embedder.mlp.0", adaln, 256, 1024)), 1024, c.adaln_dim());

    // Patchify each item (token order (h, w) row-major, features (ph, pw, c)), embed the tokens of all items at once.
    ir::Val tokens, caps;
    for (int i = 0; i < B; ++i) {
        const ZImageItem& it = lay.items[(size_t)i];
        const int64_t h = it.height / p, w = it.width / p;
        ir::Val x = g.input("x_" + std::to_string(i), {c.in_channels, 1, it.height, it.width});
        x = g.permute(g.reshape(x, {c.in_channels, h, p, w, p}), {1, 3, 2, 4, 0});  // [h, w, ph, pw, C]
        x = g.reshape(x, {h * w, c.token_dim()});
        ir::Val cap = g.input("cap_feats_" + std::to_string(i), {it.cap_len, c.cap_feat_dim});
        tokens = tokens ? g.concat(tokens, x, 0) : x;
        caps = caps ? g.concat(caps, cap, 0) : cap;
    }
    ir::Val x = linear(b, "all_x_embedder.2-1", tokens, c.token_dim(), D);  // [sum N_i, D]
    x = place(s, x, "x_pad_token", g.input("x_gather", {(int64_t)B * lay.n_max}, DType::i32), lay.n_max);
    x = blocks(s, xs, "noise_refiner", c.refiner_layers, x, adaln);

    // cap_embedder: RMSNorm(cap_feat_dim) -> Linear(cap_feat_dim, dim).
    ir::Val cap = g.rms_norm(caps, b.vec("cap_embedder.0.weight", {c.cap_feat_dim}), c.norm_eps);
    cap = linear(b, "cap_embedder.1", cap, c.cap_feat_dim, D);
    cap = place(s, cap, "cap_pad_token", g.input("cap_gather", {(int64_t)B * lay.l_max}, DType::i32), lay.l_max);
    cap = blocks(s, cs, "context_refiner", c.refiner_layers, cap, ir::Val{});

    // Unified sequence: per item cat(image slots, caption slots), right-padded to s_max.
    ir::Val joint = g.concat(g.reshape(x, {(int64_t)B * lay.n_max, D}), g.reshape(cap, {(int64_t)B * lay.l_max, D}), 0);
    ir::Val u = g.reshape(g.embedding(joint, g.input("unified_gather", {(int64_t)B * lay.s_max}, DType::i32)),
                          {B, lay.s_max, D});
    u = blocks(s, us, "layers", c.layers, u, adaln);

    // FinalLayer: LayerNorm (no affine, eps 1e-6) * (1 + Linear(SiLU(adaln))), no shift, then Linear.
    ir::Val scale = linear(b, "all_final_layer.2-1.adaLN_modulation.1", g.silu(adaln), c.adaln_dim(), D);
    u = g.mul(g.layer_norm(u, {}, {}, 1e-6f), g.reshape(g.scale(scale, 1.f, 1.f), {B, 1, D}));
    u = linear(b, "all_final_layer.2-1.linear", u, D, c.token_dim());  // [B, s_max, p*p*C]

    // Unpatchify each item's first n image tokens: "f h w pf ph pw c -> c (f pf) (h ph) (w pw)".
    for (int i = 0; i < B; ++i) {
        const ZImageItem& it = lay.items[(size_t)i];
        ir::Val o = g.slice(g.slice(u, 0, i, 1), 1, 0, lay.n[(size_t)i]);
        o = g.unpatchify(o, p, c.in_channels, it.height / p, it.width / p);  // [1, C, H, W]
        g.output(g.reshape(o, {c.in_channels, 1, it.height, it.width}), "sample_" + std::to_string(i));
    }
}

}  // namespace kiln::models
