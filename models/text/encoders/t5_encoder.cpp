#include "models/text/encoders/t5_encoder.h"

#include <cmath>
#include <limits>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers / transformers do.
std::string cls() { return class_name(ComponentKind::t5_encoder); }
}  // namespace

T5Config T5Config::from_json(const nlohmann::json& j) {
    T5Config c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.vocab_size = get("vocab_size", 32128);
    c.d_model = get("d_model", 512);
    c.d_kv = get("d_kv", 64);
    c.d_ff = get("d_ff", 2048);
    c.heads = get("num_heads", 8);
    c.layers = get("num_layers", 6);
    c.num_buckets = get("relative_attention_num_buckets", 32);
    c.max_distance = get("relative_attention_max_distance", 128);
    c.eps = (float)get("layer_norm_epsilon", 1e-6);
    // T5Config: act = feed_forward_proj.split("-")[-1], gated when it starts with "gated"; "gated-gelu" means
    // gelu_new. The plain "relu" FFN of T5 v1.0 needs a relu op Kiln does not have.
    const std::string ff = get("feed_forward_proj", std::string("relu"));
    if (ff == "gated-gelu" || ff == "gated-gelu_new")
        c.act = "gelu_new";
    else if (ff == "gated-silu")
        c.act = "silu";
    else
        KILN_FAIL(cls(), ": feed_forward_proj '", ff, "' is not supported (gated-gelu, gated-silu)");
    KILN_CHECK(c.heads > 0 && c.d_kv > 0 && c.layers > 0 && c.num_buckets >= 4 && c.max_distance > c.num_buckets / 4,
               cls(), ": bad config (", c.heads, " heads, d_kv ", c.d_kv, ", ", c.layers, " layers, ", c.num_buckets,
               " buckets, max distance ", c.max_distance, ")");
    return c;
}

Tensor t5_relative_buckets(const T5Config& c, int S) {
    // Bidirectional: half the buckets per direction (keys after the query in the upper half); distances below
    // max_exact = nb/4 get their own bucket, larger ones log-spaced up to max_distance:
    // max_exact + int(log(n / max_exact) / log(max_distance / max_exact) * (nb/2 - max_exact)), capped.
    // torch: f32 log of an f32 tensor, divided by the Python float (applied in f32), times an int, truncated.
    const int nb = c.num_buckets / 2, max_exact = nb / 2;
    const float log_ratio = (float)std::log((double)c.max_distance / max_exact);
    Tensor t(DType::i32, {(int64_t)S * S});
    for (int i = 0; i < S; ++i)
        for (int j = 0; j < S; ++j) {
            int rel = j - i, bucket = rel > 0 ? nb : 0, n = std::abs(rel);
            if (n < max_exact) {
                bucket += n;
            } else {
                float f = std::log((float)n / (float)max_exact) / log_ratio * (float)(nb - max_exact);
                bucket += std::min(max_exact + (int)f, nb - 1);
            }
            t.data<int32_t>()[(size_t)i * S + j] = bucket;
        }
    return t;
}

std::map<std::string, Tensor> t5_encoder_inputs(const T5Config& c, const Tensor& input_ids,
                                                const Tensor* attention_mask) {
    KILN_CHECK(input_ids.shape.size() == 2, cls(), ": input_ids must be [B, S], got ", shape_str(input_ids.shape));
    const int64_t B = input_ids.shape[0], S = input_ids.shape[1];
    Tensor ids = input_ids.astype(DType::i64);
    Tensor tok(DType::i32, {B * S}), bias(DType::f32, {B, 1, 1, S});
    for (int64_t i = 0; i < B * S; ++i) {
        const int64_t id = ids.data<int64_t>()[i];
        KILN_CHECK(id >= 0 && id < c.vocab_size, cls(), ": token id ", id, " outside the vocabulary of ", c.vocab_size);
        tok.data<int32_t>()[i] = (int32_t)id;
    }
    if (attention_mask) {  // get_extended_attention_mask: (1 - mask) * finfo(f32).min on the keys
        Tensor m = attention_mask->astype(DType::f32);
        KILN_CHECK(m.numel() == B * S, cls(), ": attention_mask must be [B, S] = [", B, ", ", S, "], got ",
                   shape_str(m.shape));
        for (int64_t i = 0; i < B * S; ++i)
            bias.data<float>()[i] = (1.f - m.data<float>()[i]) * std::numeric_limits<float>::lowest();
    }
    return {{"input_ids", tok}, {"position_buckets", t5_relative_buckets(c, (int)S)}, {"attention_bias", bias}};
}

namespace {
// [B, S, H*dk] -> [B*H, S, dk], and back: the attention op's mask has no head axis, so heads go to the batch.
ir::Val heads_to_batch(ir::Graph& g, ir::Val x, int B, int S, int H, int dk) {
    return g.reshape(g.permute(g.reshape(x, {B, S, H, dk}), {0, 2, 1, 3}), {(int64_t)B * H, S, dk});
}
ir::Val batch_to_heads(ir::Graph& g, ir::Val x, int B, int S, int H, int dk) {
    return g.reshape(g.permute(g.reshape(x, {B, H, S, dk}), {0, 2, 1, 3}), {B, S, (int64_t)H * dk});
}

// T5Block (encoder): T5LayerSelfAttention then T5LayerFF, each x += sublayer(T5LayerNorm(x)).
// bias [B*H, S, S] = position bias + attention mask.
ir::Val t5_block(Builder& b, const T5Config& c, int i, ir::Val h, ir::Val bias, int B, int S) {
    auto& g = b.g();
    const int D = c.d_model, I = c.inner(), H = c.heads, dk = c.d_kv;
    const std::string pre = "encoder.block." + std::to_string(i) + ".layer.";
    // T5LayerNorm: x * rsqrt(mean(x^2) + eps) * weight (no mean subtraction, no bias).
    ir::Val x = g.rms_norm(h, b.vec(pre + "0.layer_norm.weight", {D}), c.eps);  // [B, S, D]
    const std::string a = pre + "0.SelfAttention.";
    ir::Val q = heads_to_batch(g, g.linear(x, b.matrix(a + "q.weight", {I, D}), {}), B, S, H, dk);  // [B*H, S, dk]
    ir::Val k = heads_to_batch(g, g.linear(x, b.matrix(a + "k.weight", {I, D}), {}), B, S, H, dk);  // [B*H, S, dk]
    ir::Val v = heads_to_batch(g, g.linear(x, b.matrix(a + "v.weight", {I, D}), {}), B, S, H, dk);  // [B*H, S, dk]
    // softmax(q k^T + bias) v: T5 does not scale the scores (folded into its initialisation).
    ir::Val o = batch_to_heads(g, g.attention(q, k, v, 1, bias, 1.f), B, S, H, dk);  // [B, S, H*dk]
    h = g.add(h, g.linear(o, b.matrix(a + "o.weight", {D, I}), {}));                 // [B, S, D]

    // T5DenseGatedActDense: wo(act(wi_0 x) * wi_1 x). Kiln keeps activations and accumulation in f32 with f16
    // weights, so the f16 overflow in wo's output that transformers guards against (T5 v1.1 in fp16) does not
    // arise.
    x = g.rms_norm(h, b.vec(pre + "1.layer_norm.weight", {D}), c.eps);
    const std::string f = pre + "1.DenseReluDense.";
    ir::Val gate = g.linear(x, b.matrix(f + "wi_0.weight", {c.d_ff, D}), {});  // [B, S, F]
    gate = c.act == "silu" ? g.silu(gate) : g.gelu(gate, true);
    ir::Val lin = g.linear(x, b.matrix(f + "wi_1.weight", {c.d_ff, D}), {});                  // [B, S, F]
    return g.add(h, g.linear(g.mul(gate, lin), b.matrix(f + "wo.weight", {D, c.d_ff}), {}));  // [B, S, D]
}
}  // namespace

void build_t5_encoder(Builder& b, const T5Config& c, int B, int S) {
    auto& g = b.g();
    const int D = c.d_model, H = c.heads;
    ir::Val buckets = g.input("position_buckets", {(int64_t)S * S}, DType::i32);
    ir::Val mask = g.input("attention_bias", {B, 1, 1, S});

    // embed_tokens(input_ids): rows of the vocabulary table gathered on the host (t5_embedding_name).
    ir::Val h = g.reshape(g.input("inputs_embeds", {(int64_t)B * S, D}), {B, S, D});  // [B, S, D]

    // compute_bias of block 0: relative_attention_bias(buckets) [S, S, H] -> [1, H, S, S], plus the mask
    // [B, 1, 1, S], as one [B*H, S, S] bias that every block reads.
    ir::Val table =
        b.matrix("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", {c.num_buckets, H});
    ir::Val pb = g.permute(g.reshape(g.embedding(table, buckets), {S, S, H}), {2, 0, 1});  // [H, S, S]
    ir::Val bias = g.add(g.reshape(pb, {1, H, S, S}), mask);                               // [B, H, S, S]
    bias = g.reshape(bias, {(int64_t)B * H, S, S});

    for (int i = 0; i < c.layers; ++i) {
        g.begin_region("t5_blocks", i);
        h = t5_block(b, c, i, h, bias, B, S);
        g.end_region();
    }
    g.output(g.rms_norm(h, b.vec("encoder.final_layer_norm.weight", {D}), c.eps), "last_hidden_state");
}

}  // namespace kiln::models
