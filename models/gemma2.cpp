#include "models/gemma2.h"

#include <cmath>
#include <limits>

#include "models/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
std::string cls() { return class_name(ComponentKind::gemma2); }
}  // namespace

Gemma2Config Gemma2Config::from_json(const nlohmann::json& j) {
    Gemma2Config c;  // transformers' Gemma2Config defaults (gemma-2-2b)
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.vocab_size = get("vocab_size", 256000);
    c.hidden_size = get("hidden_size", 2304);
    c.intermediate_size = get("intermediate_size", 9216);
    c.layers = get("num_hidden_layers", 26);
    c.heads = get("num_attention_heads", 8);
    c.kv_heads = get("num_key_value_heads", 4);
    c.head_dim = get("head_dim", 256);
    c.query_pre_attn_scalar = get("query_pre_attn_scalar", 256.0);
    c.sliding_window = get("sliding_window", 4096);
    c.attn_logit_softcapping = get("attn_logit_softcapping", 0.0);  // null: no soft-capping
    if (!j.contains("attn_logit_softcapping")) c.attn_logit_softcapping = 50;
    c.rms_norm_eps = (float)get("rms_norm_eps", 1e-6);
    c.rope_theta = get("rope_theta", 10000.0);
    // ACT2FN: gelu_pytorch_tanh and gelu_new are both the tanh approximation of GELU.
    const std::string act = get("hidden_activation", std::string("gelu_pytorch_tanh"));
    KILN_CHECK(act == "gelu_pytorch_tanh" || act == "gelu_new", cls(), ": hidden_activation '", act,
               "' is not supported (gelu_pytorch_tanh)");
    KILN_CHECK(!get("attention_bias", false), cls(), ": attention_bias true is not supported (q/k/v/o without bias)");
    KILN_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.layers > 0 && c.vocab_size > 0, cls(),
               ": bad config (hidden_size ", c.hidden_size, ", intermediate_size ", c.intermediate_size, ", ", c.layers,
               " layers, vocab_size ", c.vocab_size, ")");
    KILN_CHECK(c.heads > 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0 && c.head_dim > 0 && c.head_dim % 2 == 0,
               cls(), ": bad attention config (", c.heads, " heads, ", c.kv_heads, " key/value heads, head_dim ",
               c.head_dim, "): heads must be a multiple of key/value heads and head_dim even");
    KILN_CHECK(c.query_pre_attn_scalar > 0 && c.sliding_window > 0 && c.attn_logit_softcapping >= 0, cls(),
               ": bad config (query_pre_attn_scalar ", c.query_pre_attn_scalar, ", sliding_window ", c.sliding_window,
               ", attn_logit_softcapping ", c.attn_logit_softcapping, ")");
    return c;
}

std::map<std::string, Tensor> gemma2_encoder_inputs(const Gemma2Config& c, const Tensor& input_ids,
                                                    const Tensor* attention_mask) {
    KILN_CHECK(input_ids.shape.size() == 2, cls(), ": input_ids must be [B, S], got ", shape_str(input_ids.shape));
    const int64_t B = input_ids.shape[0], S = input_ids.shape[1], half = c.head_dim / 2;
    Tensor ids = input_ids.astype(DType::i64), tok(DType::i32, {B * S});
    for (int64_t i = 0; i < B * S; ++i) {
        const int64_t id = ids.data<int64_t>()[i];
        KILN_CHECK(id >= 0 && id < c.vocab_size, cls(), ": token id ", id, " outside the vocabulary of ", c.vocab_size);
        tok.data<int32_t>()[i] = (int32_t)id;
    }
    Tensor keep(DType::f32, {B, S});  // 1: a valid key
    if (attention_mask) {
        keep = attention_mask->astype(DType::f32);
        KILN_CHECK(keep.numel() == B * S, cls(), ": attention_mask must be [B, S] = [", B, ", ", S, "], got ",
                   shape_str(keep.shape));
    } else {
        for (int64_t i = 0; i < B * S; ++i) keep.data<float>()[i] = 1.f;
    }

    // Gemma2RotaryEmbedding, in f32 as torch: inv_freq = 1 / base^(f32(2i) / dim), angle = f32(inv_freq * t);
    // cos/sin of the rounded angle (emb = cat(freqs, freqs): one value per rotated pair).
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

    // _prepare_4d_causal_attention_mask_with_cache_position: finfo.min above the diagonal and on padded keys (0
    // elsewhere); sliding layers (Gemma2DecoderLayer) also put finfo.min where i - j >= sliding_window.
    const float lowest = std::numeric_limits<float>::lowest();
    Tensor global(DType::f32, {B, 1, S, S}), sliding(DType::f32, {B, 1, S, S});
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < S; ++i)
            for (int64_t j = 0; j < S; ++j) {
                const bool masked = j > i || keep.data<float>()[b * S + j] == 0.f;
                const size_t o = (size_t)((b * S + i) * S + j);
                global.data<float>()[o] = masked ? lowest : 0.f;
                sliding.data<float>()[o] = masked || i - j >= c.sliding_window ? lowest : 0.f;
            }
    std::map<std::string, Tensor> in = {
        {"input_ids", tok}, {"rope_cos", cos}, {"rope_sin", sin}, {"sliding_attention_bias", sliding}};
    if (c.layers > 1) in["attention_bias"] = global;
    return in;
}

namespace {
// Gemma2RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), in f32. (1 + w) is formed on the host, one f32 rounding as
// torch's `1.0 + weight.float()`, and enters the graph as a per-layer constant named after the layer's weight, which
// the JIT selects per replayed block like the weights. (An in-graph scale(w, 1, 1) gives the same values, but a shader
// reading a block weight through a plain binding made every replay copy the layer pair's weights.)
ir::Val rms_norm(Builder& b, const Gemma2Config& c, const std::string& name, ir::Val x) {
    Tensor w = b.read_f32(name, {c.hidden_size});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 1.f + w.data<float>()[i];
    return b.g().rms_norm(x, b.constant(name + ".plus_one", std::move(w)), c.rms_norm_eps);
}

// Gemma2Attention (eager), x [B, S, hidden] -> [B, S, hidden]; bias [B, 1, S, S] additive.
ir::Val attention(Builder& b, const Gemma2Config& c, const std::string& p, ir::Val x, ir::Val cos, ir::Val sin,
                  ir::Val bias, int B, int S) {
    auto& g = b.g();
    const int D = c.head_dim, Hq = c.heads, Hkv = c.kv_heads, half = D / 2;
    ir::Val q = g.linear(x, b.matrix(p + "q_proj.weight", {(int64_t)Hq * D, c.hidden_size}), {});   // [B, S, Hq*D]
    ir::Val k = g.linear(x, b.matrix(p + "k_proj.weight", {(int64_t)Hkv * D, c.hidden_size}), {});  // [B, S, Hkv*D]
    ir::Val v = g.linear(x, b.matrix(p + "v_proj.weight", {(int64_t)Hkv * D, c.hidden_size}), {});  // [B, S, Hkv*D]

    // rotate_half RoPE pairs element i with i + D/2 of each head; Kiln's rope op pairs 2i with 2i+1. Interleave the
    // halves ([.., 2, D/2] -> [.., D/2, 2]) and rope rotates exactly transformers' pairs: y[2i] = q[i] cos - q[i+D/2]
    // sin, y[2i+1] = q[i+D/2] cos + q[i] sin. q and k stay in that order: q.k sums the same products (order aside).
    auto rotate = [&](ir::Val t, int H) {
        t = g.permute(g.reshape(t, {B, S, H, 2, half}), {0, 1, 2, 4, 3});  // [B, S, H, D/2, 2]
        return g.rope(g.reshape(t, {B, S, (int64_t)H * D}), cos, sin);     // [B, S, H*D]
    };
    q = rotate(q, Hq);
    k = rotate(k, Hkv);

    // One attention op (the score matrix is never stored): GQA (repeat_kv: q head h reads kv head h / rep), scores
    // * query_pre_attn_scalar^-0.5, soft-capped cap * tanh(s / cap) before the additive mask (causal, padding and,
    // on sliding layers, the window, as the host built it), softmax in f32. The causal flag is left off: a row
    // whose keys are all masked averages every key, as transformers' softmax over finfo.min logits does.
    ir::AttentionAttrs a;
    a.heads = Hq;
    a.kv_heads = Hkv;
    a.scale = (float)std::pow(c.query_pre_attn_scalar, -0.5);
    a.softcap = c.attn_logit_softcapping > 0 ? (float)c.attn_logit_softcapping : 0.f;
    ir::Val o = g.attention(q, k, v, a, g.reshape(bias, {B, S, S}));  // [B, S, Hq*D]
    return g.linear(o, b.matrix(p + "o_proj.weight", {c.hidden_size, (int64_t)Hq * D}), {});  // [B, S, hidden]
}

// Gemma2DecoderLayer i: h += post_attention_layernorm(attn(input_layernorm(h))); h += post_feedforward_layernorm(
// down(gelu_tanh(gate(x)) * up(x))) with x = pre_feedforward_layernorm(h).
ir::Val layer(Builder& b, const Gemma2Config& c, int i, ir::Val h, ir::Val cos, ir::Val sin, ir::Val bias, int B,
              int S) {
    auto& g = b.g();
    const std::string p = "layers." + std::to_string(i) + ".";
    ir::Val a =
        attention(b, c, p + "self_attn.", rms_norm(b, c, p + "input_layernorm.weight", h), cos, sin, bias, B, S);
    h = g.add(h, rms_norm(b, c, p + "post_attention_layernorm.weight", a));  // [B, S, hidden]

    const int H = c.hidden_size, F = c.intermediate_size;
    ir::Val x = rms_norm(b, c, p + "pre_feedforward_layernorm.weight", h);
    ir::Val gate = g.gelu(g.linear(x, b.matrix(p + "mlp.gate_proj.weight", {F, H}), {}), true);  // [B, S, F]
    ir::Val up = g.linear(x, b.matrix(p + "mlp.up_proj.weight", {F, H}), {});                    // [B, S, F]
    ir::Val m = g.linear(g.mul(gate, up), b.matrix(p + "mlp.down_proj.weight", {H, F}), {});     // [B, S, hidden]
    return g.add(h, rms_norm(b, c, p + "post_feedforward_layernorm.weight", m));
}
}  // namespace

void build_gemma2_encoder(Builder& b, const Gemma2Config& c, int B, int S) {
    auto& g = b.g();
    const int H = c.hidden_size;
    ir::Val cos = g.input("rope_cos", {S, c.head_dim / 2}), sin = g.input("rope_sin", {S, c.head_dim / 2});
    ir::Val sliding = g.input("sliding_attention_bias", {B, 1, S, S});
    ir::Val global = c.layers > 1 ? g.input("attention_bias", {B, 1, S, S}) : ir::Val{};

    // embed_tokens(input_ids) (rows gathered on the host) * tensor(sqrt(hidden), f32): the normaliser rounded to
    // the activation dtype as transformers does (48 exactly for gemma-2-2b).
    ir::Val h = g.reshape(g.input("inputs_embeds", {(int64_t)B * S, H}), {B, S, H});  // [B, S, hidden]
    h = g.scale(h, (float)std::sqrt((double)H));

    // Even layers slide, odd ones are global: a region holds one (sliding, global) pair so that every instance
    // reads the same two masks; a last even layer without its partner is a kind of its own.
    for (int i = 0; i < c.layers; i += 2) {
        const bool pair = i + 1 < c.layers;
        g.begin_region(pair ? "gemma2_layer_pairs" : "gemma2_last_layer", i / 2);
        h = layer(b, c, i, h, cos, sin, sliding, B, S);
        if (pair) h = layer(b, c, i + 1, h, cos, sin, global, B, S);
        g.end_region();
    }
    g.output(rms_norm(b, c, "norm.weight", h), "last_hidden_state");
}

}  // namespace kiln::models
