#pragma once
// One decoder-only LLM run as a text encoder: transformers' Gemma2Model and Qwen3Model (Qwen3ForCausalLM's `model`),
// which share the decoder layer: pre-norm RMSNorm, grouped-query attention with rotate_half RoPE over the full
// head_dim, causal + key-padding masks, a gated MLP. What differs is a switch of DecoderLlmConfig:
//   Gemma-2: RMSNorm weights applied as (1 + w), embeddings * sqrt(hidden), "sandwich" norms after the attention
//            and around the MLP, tanh soft-capped scores, a sliding window on even layers, GELU-tanh gate;
//   Qwen3:   per-head RMSNorm of q and k before RoPE, SiLU gate (SwiGLU), optional q/k/v/o biases.
// Output: any of transformers' hidden_states (output_hidden_states=True): [0] the (scaled) embeddings, [i] the
// output of layer i - 1, and the last, [n], the final-normed output (last_hidden_state). Only the layers the
// requested states need are built.
#include <map>
#include <string>
#include <vector>

#include "models/core/weights.h"

namespace kiln::models {

struct DecoderLlmConfig {
    std::string cls;          // class name, for messages
    std::string prefix;       // weight names' prefix: "" (Gemma2Model, Qwen3Model) or "model." (Qwen3ForCausalLM)
    std::string region_kind;  // the JIT block kind of the layers ("gemma2_layer_pairs", "qwen3_layers")
    int vocab_size = 0, hidden_size = 0, intermediate_size = 0, layers = 0;
    int heads = 0, kv_heads = 0, head_dim = 0;
    float rms_norm_eps = 1e-6f;
    double rope_theta = 10000;
    double attn_scale = 0;  // scores * attn_scale (Gemma-2: query_pre_attn_scalar^-0.5; Qwen3: head_dim^-0.5)
    double softcap = 0;     // > 0: scores = softcap * tanh(scores / softcap) before the mask
    // > 0: even layers see keys j with i - j < sliding_window; the layers then run in (sliding, global) pairs, one
    // region each, so every replayed pair reads the same two masks. 0: full causal attention on every layer.
    int sliding_window = 0;
    bool attention_bias = false;  // q/k/v/o_proj have biases
    bool qk_norm = false;         // Qwen3: self_attn.q_norm / k_norm, RMSNorm over head_dim of each head, before RoPE
    bool norm_plus_one = false;   // Gemma-2: RMSNorm x * (1 + w)
    bool sandwich_norms = false;  // Gemma-2: post_attention_layernorm on the attention output, pre/post_feedforward
    bool embed_scale = false;     // Gemma-2: embeddings * sqrt(hidden_size), rounded to f32
    bool gelu_tanh = false;       // the MLP's gate activation: GELU (tanh approximation); false: SiLU
    // Checks sizes and head counts; throws one line naming cls.
    void check() const;
};

// Resolves hidden_states indices in transformers' numbering (negative: from the end, -1 = n = layers) to sorted,
// distinct indices in [0, n]; throws naming the range for one outside it.
std::vector<int> resolve_hidden_states(const DecoderLlmConfig& c, const std::vector<int64_t>& requested);

// The graph inputs for input_ids [B, S] and an optional 0/1 attention_mask [B, S] (any padding, left or right):
//   "input_ids" i32 [B*S] (the caller gathers embed_tokens rows into "inputs_embeds" f32 [B*S, hidden]);
//   "rope_cos" / "rope_sin" f32 [S, head_dim/2] (positions 0..S-1 whatever the padding, as transformers);
//   sliding_window 0: "key_padding_bias" f32 [B, 1, S], finfo(f32).min at padded keys (only with a mask; the causal
//     part is the attention op's causal flag);
//   sliding_window > 0: the additive masks [B, 1, S, S] of finfo(f32).min, "sliding_attention_bias" (causal + padded
//     keys + keys i - j >= sliding_window) and, with more than one layer, "attention_bias" (causal + padded keys).
std::map<std::string, Tensor> decoder_llm_inputs(const DecoderLlmConfig& c, const Tensor& input_ids,
                                                 const Tensor* attention_mask);

// Forward graph for B sequences of S tokens, with a key-padding mask input exactly when `mask` (sliding_window 0;
// the windowed masks always exist). Outputs: `states` empty: "last_hidden_state" [B, S, hidden] only; else
// "hidden_states_<i>" for each resolved index i (resolve_hidden_states), and "last_hidden_state" too when n is
// among them. Layers past the largest index requested are not built. The layers between two requested indices
// form one block kind (the first "<region_kind>", then "<region_kind>.1", ...), recorded once and replayed, so a
// state requested in the middle costs one template recording. A query row whose keys are all masked is
// implementation-defined (with right padding none is: every row sees its sequence's first token).
void build_decoder_llm(Builder& b, const DecoderLlmConfig& c, int B, int S, bool mask,
                       const std::vector<int>& states = {});

}  // namespace kiln::models
