#include "models/text/encoders/gemma2.h"

#include <cmath>

#include "models/core/common.h"
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

DecoderLlmConfig Gemma2Config::llm() const {
    DecoderLlmConfig d;
    d.cls = cls();
    d.region_kind = "gemma2_layer_pairs";
    d.vocab_size = vocab_size, d.hidden_size = hidden_size, d.intermediate_size = intermediate_size, d.layers = layers;
    d.heads = heads, d.kv_heads = kv_heads, d.head_dim = head_dim;
    d.rms_norm_eps = rms_norm_eps;
    d.rope_theta = rope_theta;
    d.attn_scale = std::pow(query_pre_attn_scalar, -0.5);
    d.softcap = attn_logit_softcapping;
    d.sliding_window = sliding_window;
    d.norm_plus_one = d.sandwich_norms = d.embed_scale = d.gelu_tanh = true;
    return d;
}

std::map<std::string, Tensor> gemma2_encoder_inputs(const Gemma2Config& c, const Tensor& input_ids,
                                                    const Tensor* attention_mask) {
    return decoder_llm_inputs(c.llm(), input_ids, attention_mask);
}

void build_gemma2_encoder(Builder& b, const Gemma2Config& c, int B, int S) {
    build_decoder_llm(b, c.llm(), B, S, true);
}

}  // namespace kiln::models
