#pragma once
// PixArt's transformer (diffusers models/transformers/pixart_transformer_2d.py): patch embedding with
// 2-D sin-cos positions (base_size = sample_size / patch, interpolation_scale), adaLN-single (one timestep
// MLP shared by all blocks, a per-block scale_shift_table), N BasicTransformerBlocks (self-attention,
// cross-attention to the projected caption, feed-forward), final modulated norm, proj_out, unpatchify.
#include <nlohmann/json.hpp>

#include "models/core/weights.h"

namespace kiln::models {

struct PixArtConfig {
    int heads = 16, head_dim = 72, in_channels = 4, out_channels = 8, layers = 28, patch = 2, sample_size = 128;
    int cross_attention_dim = 1152;  // 0: no cross-attention (config null)
    int caption_channels = 0;        // 0: no caption_projection (config null)
    bool gelu_tanh = true, attention_bias = true, norm_affine = false, use_additional_conditions = false;
    float norm_eps = 1e-6f;
    double interpolation_scale = 1.0;
    int inner() const { return heads * head_dim; }
    static PixArtConfig from_json(const nlohmann::json& j);  // rejects configs Kiln does not implement
};

// Forward graph for a batch of B latents of H x W with L text tokens. Inputs: hidden_states [B, C, H, W],
// encoder_hidden_states [B, L, caption_channels], timestep [B] (f32), and when `mask`
// encoder_attention_mask [B, 1, L] (the additive bias diffusers makes of the 0/1 mask); with
// use_additional_conditions also resolution [B, 2] and aspect_ratio [B, 1]. Output: "sample"
// [B, out_channels, H, W]. Blocks are regions of kind "transformer_blocks".
void build_pixart(Builder& b, const PixArtConfig& c, int B, int H, int W, int L, bool mask);

}  // namespace kiln::models
