#include "models/text/encoders/decoder_llm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.h"

namespace kiln::models {

void DecoderLlmConfig::check() const {
    KILN_CHECK(hidden_size > 0 && intermediate_size > 0 && layers > 0 && vocab_size > 0, cls,
               ": bad config (hidden_size ", hidden_size, ", intermediate_size ", intermediate_size, ", ", layers,
               " layers, vocab_size ", vocab_size, ")");
    KILN_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim > 0 && head_dim % 2 == 0, cls,
               ": bad attention config (", heads, " heads, ", kv_heads, " key/value heads, head_dim ", head_dim,
               "): heads must be a multiple of key/value heads and head_dim even");
    KILN_CHECK(attn_scale > 0 && softcap >= 0 && sliding_window >= 0 && rope_theta > 0 && rms_norm_eps >= 0, cls,
               ": bad config (attention scale ", attn_scale, ", soft-capping ", softcap, ", sliding_window ",
               sliding_window, ", rope_theta ", rope_theta, ", rms_norm_eps ", rms_norm_eps, ")");
}

std::vector<int> resolve_hidden_states(const DecoderLlmConfig& c, const std::vector<int64_t>& requested) {
    const int64_t n = c.layers;
    std::vector<int> out;
    for (int64_t i : requested) {
        KILN_CHECK(i >= -(n + 1) && i <= n, c.cls, ": hidden_states[", i, "] does not exist (", n,
                   " layers: hidden_states has ", n + 1, " entries, indices ", -(n + 1), "..", n, ")");
        out.push_back((int)(i < 0 ? i + n + 1 : i));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::map<std::string, Tensor> decoder_llm_inputs(const DecoderLlmConfig& c, const Tensor& input_ids,
                                                 const Tensor* attention_mask) {
    KILN_CHECK(input_ids.shape.size() == 2, c.cls, ": input_ids must be [B, S], got ", shape_str(input_ids.shape));
    const int64_t B = input_ids.shape[0], S = input_ids.shape[1], half = c.head_dim / 2;
    Tensor ids = input_ids.astype(DType::i64), tok(DType::i32, {B * S});
    for (int64_t i = 0; i < B * S; ++i) {
        const int64_t id = ids.data<int64_t>()[i];
        KILN_CHECK(id >= 0 && id < c.vocab_size, c.cls, ": token id ", id, " outside the vocabulary of ", c.vocab_size);
        tok.data<int32_t>()[i] = (int32_t)id;
    }
    Tensor keep(DType::f32, {B, S});  // 1: a valid key
    if (attention_mask) {
        keep = attention_mask->astype(DType::f32);
        KILN_CHECK(keep.numel() == B * S, c.cls, ": attention_mask must be [B, S] = [", B, ", ", S, "], got ",
                   shape_str(keep.shape));
    } else {
        for (int64_t i = 0; i < B * S; ++i) keep.data<float>()[i] = 1.f;
    }

    // The default rotary embedding (Gemma2RotaryEmbedding, Qwen3RotaryEmbedding), in f32 as torch: inv_freq = 1 /
    // base^(f32(2i) / dim), angle = f32(inv_freq * t); cos/sin of the rounded angle (emb = cat(freqs, freqs): one
    // value per rotated pair; attention_scaling 1).
    Tensor cos(DType::f32, {S, half}), sin(DType::f32, {S, half});
    for (int64_t i = 0; i < half; ++i) {
        const float e = (float)(2 * i) / (float)c.head_dim;
        const float inv = 1.f / (float)std::pow(c.rope_theta, (double)e);
        for (int64_t t = 0; t < S; ++t) {
            const float a = inv * (float)t;
            cos.data<float>()[t * half + i] = (float)std::cos((double)a);
            sin.data<float>()[t * half + i] = (float)std::sin((double)a);
        }
    }
    std::map<std::string, Tensor> in = {{"input_ids", tok}, {"rope_cos", cos}, {"rope_sin", sin}};

    // transformers' masks: finfo.min on the keys a query must not see (causal: j > i; padding: attention_mask 0;
    // Gemma-2's sliding layers: i - j >= sliding_window), 0 elsewhere.
    const float lowest = std::numeric_limits<float>::lowest();
    if (c.sliding_window == 0) {
        if (attention_mask) {
            Tensor pad(DType::f32, {B, 1, S});
            for (int64_t i = 0; i < B * S; ++i) pad.data<float>()[i] = keep.data<float>()[i] == 0.f ? lowest : 0.f;
            in["key_padding_bias"] = pad;
        }
        return in;
    }
    Tensor global(DType::f32, {B, 1, S, S}), sliding(DType::f32, {B, 1, S, S});
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < S; ++i)
            for (int64_t j = 0; j < S; ++j) {
                const bool masked = j > i || keep.data<float>()[b * S + j] == 0.f;
                const size_t o = (size_t)((b * S + i) * S + j);
                global.data<float>()[o] = masked ? lowest : 0.f;
                sliding.data<float>()[o] = masked || i - j >= c.sliding_window ? lowest : 0.f;
            }
    in["sliding_attention_bias"] = sliding;
    if (c.layers > 1) in["attention_bias"] = global;
    return in;
}

namespace {
struct Masks {
    ir::Val cos, sin;
    ir::Val sliding, global;  // [B, S, S] additive (sliding_window > 0)
    ir::Val padding;          // [B, 1, S] additive, or absent (sliding_window 0)
};

// RMSNorm over the last dim in f32: x * rsqrt(mean(x^2) + eps) * w (Gemma-2: * (1 + w)). Gemma's (1 + w) is formed on
// the host, one f32 rounding as torch's `1.0 + weight.float()`, and enters the graph as a per-layer constant named
// after the layer's weight, which the JIT selects per replayed block like the weights. (An in-graph scale(w, 1, 1)
// gives the same values, but a shader reading a block weight through a plain binding made every replay copy the
// layer pair's weights.)
ir::Val rms_norm(Builder& b, const DecoderLlmConfig& c, const std::string& name, ir::Val x, int64_t dim) {
    if (!c.norm_plus_one) return b.g().rms_norm(x, b.vec(name, {dim}), c.rms_norm_eps);
    Tensor w = b.read_f32(name, {dim});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 1.f + w.data<float>()[i];
    return b.g().rms_norm(x, b.constant(name + ".plus_one", std::move(w)), c.rms_norm_eps);
}

// nn.Linear(in, out, bias) of x [.., in] -> [.., out].
ir::Val proj(Builder& b, const std::string& name, ir::Val x, int64_t in, int64_t out, bool bias) {
    return b.g().linear(x, b.matrix(name + ".weight", {out, in}), bias ? b.vec(name + ".bias", {out}) : ir::Val{});
}

// Self-attention (Gemma2Attention, Qwen3Attention), x [B, S, hidden] -> [B, S, hidden]; `bias` [B, S, S] (windowed
// layers) or absent.
ir::Val attention(Builder& b, const DecoderLlmConfig& c, const std::string& p, ir::Val x, const Masks& m, ir::Val bias,
                  int B, int S) {
    auto& g = b.g();
    const int D = c.head_dim, Hq = c.heads, Hkv = c.kv_heads, half = D / 2, H = c.hidden_size;
    ir::Val q = proj(b, p + "q_proj", x, H, (int64_t)Hq * D, c.attention_bias);   // [B, S, Hq*D]
    ir::Val k = proj(b, p + "k_proj", x, H, (int64_t)Hkv * D, c.attention_bias);  // [B, S, Hkv*D]
    ir::Val v = proj(b, p + "v_proj", x, H, (int64_t)Hkv * D, c.attention_bias);  // [B, S, Hkv*D]

    // Qwen3: q_norm / k_norm, RMSNorm over each head's D values (weight [D]), before RoPE.
    auto head_norm = [&](ir::Val t, int heads, const std::string& name) {
        if (!c.qk_norm) return t;
        t = rms_norm(b, c, p + name + ".weight", g.reshape(t, {B, S, heads, D}), D);  // [B, S, heads, D]
        return g.reshape(t, {B, S, (int64_t)heads * D});
    };
    // rotate_half RoPE pairs element i with i + D/2 of each head; Kiln's rope op pairs 2i with 2i+1. Interleave the
    // halves ([.., 2, D/2] -> [.., D/2, 2]) and rope rotates exactly transformers' pairs: y[2i] = q[i] cos - q[i+D/2]
    // sin, y[2i+1] = q[i+D/2] cos + q[i] sin. q and k stay in that order: q.k sums the same products (order aside).
    auto rotate = [&](ir::Val t, int heads) {
        t = g.permute(g.reshape(t, {B, S, heads, 2, half}), {0, 1, 2, 4, 3});   // [B, S, heads, D/2, 2]
        return g.rope(g.reshape(t, {B, S, (int64_t)heads * D}), m.cos, m.sin);  // [B, S, heads*D]
    };
    q = rotate(head_norm(q, Hq, "q_norm"), Hq);
    k = rotate(head_norm(k, Hkv, "k_norm"), Hkv);

    // One attention op (the score matrix is never stored): GQA (repeat_kv: q head h reads kv head h / rep), scores
    // * attn_scale, soft-capped before the additive mask, softmax in f32.
    ir::AttentionAttrs a;
    a.heads = Hq;
    a.kv_heads = Hkv;
    a.scale = (float)c.attn_scale;
    a.softcap = (float)c.softcap;
    ir::Val o;
    if (c.sliding_window > 0) {
        // The host built the whole mask (causal, padding, window). The causal flag stays off: a row whose keys are
        // all masked averages every key, as transformers' softmax over finfo.min logits does.
        o = g.attention(q, k, v, a, bias);  // [B, S, Hq*D]
    } else {
        a.causal = true;  // key j <= query i, then the key padding (finfo.min) on top
        o = g.attention(q, k, v, a, m.padding);
    }
    return proj(b, p + "o_proj", o, (int64_t)Hq * D, H, c.attention_bias);  // [B, S, hidden]
}

// Decoder layer i. Qwen3DecoderLayer: h += attn(input_layernorm(h)); h += mlp(post_attention_layernorm(h)).
// Gemma2DecoderLayer: h += post_attention_layernorm(attn(input_layernorm(h))); h += post_feedforward_layernorm(
// mlp(pre_feedforward_layernorm(h))). mlp(x) = down(act(gate(x)) * up(x)).
ir::Val layer(Builder& b, const DecoderLlmConfig& c, int i, ir::Val h, const Masks& m, int B, int S) {
    auto& g = b.g();
    const std::string p = c.prefix + "layers." + std::to_string(i) + ".";
    const int H = c.hidden_size, F = c.intermediate_size;
    const bool windowed = c.sliding_window > 0 && i % 2 == 0;
    ir::Val bias = c.sliding_window > 0 ? (windowed ? m.sliding : m.global) : ir::Val{};
    ir::Val a = attention(b, c, p + "self_attn.", rms_norm(b, c, p + "input_layernorm.weight", h, H), m, bias, B, S);
    if (c.sandwich_norms) a = rms_norm(b, c, p + "post_attention_layernorm.weight", a, H);
    h = g.add(h, a);  // [B, S, hidden]

    ir::Val x = rms_norm(
        b, c, p + (c.sandwich_norms ? "pre_feedforward_layernorm" : "post_attention_layernorm") + ".weight", h, H);
    ir::Val gate = proj(b, p + "mlp.gate_proj", x, H, F, false);  // [B, S, F]
    gate = c.gelu_tanh ? g.gelu(gate, true) : g.silu(gate);
    ir::Val up = proj(b, p + "mlp.up_proj", x, H, F, false);                   // [B, S, F]
    ir::Val mlp = proj(b, p + "mlp.down_proj", g.mul(gate, up), F, H, false);  // [B, S, hidden]
    if (c.sandwich_norms) mlp = rms_norm(b, c, p + "post_feedforward_layernorm.weight", mlp, H);
    return g.add(h, mlp);
}
}  // namespace

void build_decoder_llm(Builder& b, const DecoderLlmConfig& c, int B, int S, bool mask, const std::vector<int>& states) {
    c.check();
    auto& g = b.g();
    const int H = c.hidden_size, n = c.layers;
    for (size_t t = 0; t < states.size(); ++t)
        KILN_CHECK(states[t] >= 0 && states[t] <= n && (t == 0 || states[t] > states[t - 1]), c.cls,
                   ": hidden_states indices must be resolved (resolve_hidden_states)");
    const std::vector<int> taps = states.empty() ? std::vector<int>{n} : states;

    Masks m;
    m.cos = g.input("rope_cos", {S, c.head_dim / 2});
    m.sin = g.input("rope_sin", {S, c.head_dim / 2});
    if (c.sliding_window > 0) {
        m.sliding = g.reshape(g.input("sliding_attention_bias", {B, 1, S, S}), {B, S, S});
        if (n > 1) m.global = g.reshape(g.input("attention_bias", {B, 1, S, S}), {B, S, S});
    } else if (mask) {
        m.padding = g.input("key_padding_bias", {B, 1, S});
    }

    // embed_tokens(input_ids) (rows gathered on the host); Gemma-2: * tensor(sqrt(hidden), f32), the normaliser
    // rounded to the activation dtype as transformers does (48 exactly for gemma-2-2b).
    ir::Val h = g.reshape(g.input("inputs_embeds", {(int64_t)B * S, H}), {B, S, H});  // [B, S, hidden]
    if (c.embed_scale) h = g.scale(h, (float)std::sqrt((double)H));

    // Layers between two requested states replay as one block kind. The regional JIT may read only the carried
    // residual of a kind's last instance after it, and never a value the next kind's replays overwrite: a state
    // that later layers still run from is output as a copy (scale by 1, exact) taken before them.
    const int unit = c.sliding_window > 0 ? 2 : 1;  // Gemma-2: a (sliding, global) pair per region
    int done = 0, kinds = 0;
    for (size_t t = 0; t < taps.size(); ++t) {
        const int target = taps[t];
        if (target > done) {
            const std::string kind = c.region_kind + (kinds ? "." + std::to_string(kinds) : "");
            for (int i = done; i < target; i += unit) {
                const int count = std::min(unit, target - i);  // a lone last layer of a pair is a kind of its own
                g.begin_region(count < unit ? kind + ".tail" : kind, i / unit);
                for (int j = i; j < i + count; ++j) h = layer(b, c, j, h, m, B, S);
                g.end_region();
            }
            done = target;
            ++kinds;
        }
        if (target == n) {  // the last entry of hidden_states is the final-normed output
            ir::Val last = rms_norm(b, c, c.prefix + "norm.weight", h, H);
            g.output(last, "last_hidden_state");
            if (!states.empty()) g.output(last, "hidden_states_" + std::to_string(n));
        } else {
            // (hidden_states_0 alone is copied too: it may be a view of the graph input.)
            const bool copy = t + 1 < taps.size() || target == 0;
            g.output(copy ? g.scale(h, 1.f) : h, "hidden_states_" + std::to_string(target));
        }
    }
}

}  // namespace kiln::models
