#pragma once
// Sana's transformer (diffusers models/transformers/sana_transformer.py, SanaTransformer2DModel): patch embedding
// without positions, AdaLN-single (Sana-Sprint: timestep + guidance embeddings), caption projection + RMSNorm, N
// blocks of linear ReLU self-attention, softmax cross-attention to the caption and the GLUMBConv Mix-FFN, final
// modulated norm, proj_out, unpatchify.
#include <nlohmann/json.hpp>

#include "models/core/weights.h"

namespace kiln::models {

struct SanaConfig {
    int in_channels = 32, out_channels = 32, heads = 70, head_dim = 32, layers = 20;
    int cross_heads = 20, cross_head_dim = 112, cross_attention_dim = 2240, caption_channels = 2304;
    int patch = 1, sample_size = 32;
    double mlp_ratio = 2.5;
    bool attention_bias = false, norm_affine = false;
    bool guidance_embeds = false;  // Sana-Sprint: SanaCombinedTimestepGuidanceEmbeddings, a "guidance" input
    bool qk_norm = false;          // "rms_norm_across_heads": RMSNorm over each attention's whole q / k
    float norm_eps = 1e-6f;
    // Read by the pipelines, not by the model: SanaPipeline's timestep = t * timestep_scale, SanaSprintPipeline's
    // guidance = guidance_scale * guidance_embeds_scale.
    double guidance_embeds_scale = 0.1, timestep_scale = 1.0;
    int inner() const { return heads * head_dim; }
    int cross_inner() const { return cross_heads * cross_head_dim; }
    int ff_hidden() const { return (int)(mlp_ratio * inner()); }  // GLUMBConv: int(expand_ratio * in_channels)
    static SanaConfig from_json(const nlohmann::json& j);         // rejects configs Kiln does not implement
};

// Forward graph for a batch of B latents of H x W with L caption tokens. Inputs: hidden_states [B, C, H, W],
// encoder_hidden_states [B, L, caption_channels], timestep [B] (f32, as the pipeline passes it), guidance [B] (f32,
// only with guidance_embeds) and, when `mask`, encoder_attention_mask [B, 1, L]: the additive bias
// (1 - mask) * -10000 that diffusers makes of the 0/1 mask (build_component converts a [B, L] mask). Output:
// "sample" [B, out_channels, H, W]. Blocks are regions of kind "transformer_blocks".
void build_sana(Builder& b, const SanaConfig& c, int B, int H, int W, int L, bool mask);

}  // namespace kiln::models
