#pragma once
// transformers' Gemma2Model (models/gemma2/modeling_gemma2.py, 4.47.1), the last hidden state, as Sana's text
// encoder runs it: embedding * sqrt(hidden), N decoder layers (RMSNorm with (1 + weight) before and after both the
// attention and the GeGLU MLP; grouped-query attention with rotate_half RoPE, scores * query_pre_attn_scalar^-0.5,
// tanh soft-capping, causal + key padding masks, a sliding window on even layers), final RMSNorm. No LM head.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "models/core/weights.h"
#include "models/text/encoders/decoder_llm.h"

namespace kiln::models {

struct Gemma2Config {
    int vocab_size = 256000, hidden_size = 2304, intermediate_size = 9216, layers = 26;
    int heads = 8, kv_heads = 4, head_dim = 256;
    double query_pre_attn_scalar = 256;
    int sliding_window = 4096;
    double attn_logit_softcapping = 50;  // 0: no soft-capping (config null)
    float rms_norm_eps = 1e-6f;
    double rope_theta = 10000;
    // transformers' config.json keys; rejects what Kiln does not implement (hidden_activation other than the tanh
    // GELU, attention_bias) with one line naming the key and value.
    static Gemma2Config from_json(const nlohmann::json& j);
    // The shared decoder block's settings (models/text/encoders/decoder_llm.h): sandwich norms, (1 + w) RMSNorm
    // weights, embeddings * sqrt(hidden), soft-capping, a sliding window on even layers, GELU-tanh gate.
    DecoderLlmConfig llm() const;
};

// The graph inputs for input_ids [B, S] and an optional 0/1 attention_mask [B, S] (right padding, as Sana's pipeline
// pads): "input_ids" i32 [B*S] (build_component turns it into "inputs_embeds" f32 [B*S, hidden], embed_tokens rows
// gathered on the host), "rope_cos" / "rope_sin" f32 [S, head_dim/2] (positions 0..S-1), and the additive masks
// [B, 1, S, S] of finfo(f32).min: "sliding_attention_bias" (causal + padded keys + keys i - j >= sliding_window, for
// layers 0, 2, ...) and, with more than one layer, "attention_bias" (causal + padded keys, layers 1, 3, ...).
std::map<std::string, Tensor> gemma2_encoder_inputs(const Gemma2Config& c, const Tensor& input_ids,
                                                    const Tensor* attention_mask);

// Forward graph for B sequences of S tokens. Output: last_hidden_state [B, S, hidden]. A row whose attention_mask is
// 0 is implementation-defined (transformers averages every key where its window holds no valid one). Layers run in
// pairs (sliding, global) as regions of kind "gemma2_layer_pairs", so one recorded pair replays with the same two
// masks; an odd last layer is a region of its own kind. The layers are the shared decoder block's (build_decoder_llm).
void build_gemma2_encoder(Builder& b, const Gemma2Config& c, int B, int S);

}  // namespace kiln::models
