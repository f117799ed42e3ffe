#pragma once
// transformers' Qwen3Model (models/qwen3/modeling_qwen3.py, 4.57) as a text encoder, and Qwen3ForCausalLM's `model`
// (its LM head unused): the shared decoder block (decoder_llm.h) with per-head q/k RMSNorm before rotate_half RoPE,
// grouped-query attention scaled by head_dim^-0.5, causal + key-padding masks, SwiGLU MLP, no embedding scale.
// Pipelines tap hidden_states: Z-Image [-2], FLUX.2 [klein] [9, 18, 27] stacked on features.
#include <nlohmann/json.hpp>
#include <string>

#include "models/text/encoders/decoder_llm.h"

namespace kiln::models {

// The block's settings from config.json (transformers' Qwen3Config defaults for absent keys); `cls` is the class
// (Qwen3ForCausalLM: weights under "model."). Refuses with one line naming the key what Kiln does not implement:
// a hidden_act other than silu, sliding-window layers, rope_scaling.
DecoderLlmConfig qwen3_config(const nlohmann::json& j, const std::string& cls);

}  // namespace kiln::models
