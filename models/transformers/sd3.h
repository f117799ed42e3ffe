#pragma once
// SD3's transformer (diffusers models/transformers/transformer_sd3.py): patch embedding with a stored
// positional table cropped to the latent (pos_embed_max_size), CombinedTimestepTextProjEmbeddings, N
// JointTransformerBlocks (joint attention over image and text tokens, AdaLayerNormZero per stream, optional
// per-head qk norm; SD3.5 dual-attention blocks add a second image self-attention), the last block updating
// the image stream only (context_pre_only), AdaLayerNormContinuous, proj_out, unpatchify.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/core/weights.h"

namespace kiln::models {

struct SD3Config {
    int heads = 18, head_dim = 64, in_channels = 16, out_channels = 16, layers = 18, patch = 2, sample_size = 128;
    int joint_attention_dim = 4096, caption_projection_dim = 1152, pooled_projection_dim = 2048;
    int pos_embed_max_size = 96;  // 0: sincos table computed for the latent (config null)
    std::string qk_norm;          // "", "rms_norm" or "layer_norm"
    std::vector<int> dual_attention_layers;
    int inner() const { return heads * head_dim; }
    bool dual(int i) const;
    static SD3Config from_json(const nlohmann::json& j);  // rejects configs Kiln does not implement
};

// Forward graph for a batch of B latents of H x W with L text tokens. Inputs: hidden_states [B, C, H, W],
// encoder_hidden_states [B, L, joint_attention_dim], pooled_projections [B, pooled_projection_dim],
// timestep [B] (f32). Output: "sample" [B, out_channels, H, W]. Each contiguous run of structurally equal
// blocks is a region kind ("transformer_blocks", "dual_blocks"); the last block runs inline.
// skip_layers: blocks left out, both streams passing them unchanged (diffusers' forward(skip_layers=...), which
// SD3's pipeline calls for skip-layer guidance).
void build_sd3(Builder& b, const SD3Config& c, int B, int H, int W, int L, const std::vector<int>& skip_layers = {});

}  // namespace kiln::models
