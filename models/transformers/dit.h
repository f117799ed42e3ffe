#pragma once
// DiT's transformer (diffusers models/transformers/dit_transformer_2d.py): patch embedding with
// 2-D sin-cos positions, N BasicTransformerBlocks with adaLN-Zero (per-block timestep + class
// embedding), final modulated norm, proj_out, unpatchify; learned-sigma output.
#include <nlohmann/json.hpp>

#include "models/core/weights.h"

namespace kiln::models {

struct DiTConfig {
    int heads = 16, head_dim = 72, in_channels = 4, out_channels = 4, layers = 28, patch = 2, sample_size = 32;
    int num_embeds_ada_norm = 1000;
    bool gelu_tanh = true, attention_bias = true, norm_affine = false;
    float norm_eps = 1e-5f;
    int inner() const { return heads * head_dim; }
    static DiTConfig from_json(const nlohmann::json& j);  // rejects configs Kiln does not implement
};

// Forward graph for a batch of B latents of H x W. Inputs: hidden_states [B, C, H, W],
// timestep [B] (f32), class_labels [B] (i32). Output: "sample" [B, out_channels, H, W].
// Blocks are regions of kind "transformer_blocks" for the regional JIT.
void build_dit(Builder& b, const DiTConfig& c, int B, int H, int W);

}  // namespace kiln::models
