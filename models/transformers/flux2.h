#pragma once
// FLUX.2's transformer (diffusers models/transformers/transformer_flux2.py, Flux2Transformer2DModel; FLUX.2 [klein]
// and [dev]): no biases anywhere; x_embedder / context_embedder; Flux2TimestepGuidanceEmbeddings; modulations shared
// by all blocks, computed once from temb (double_stream_modulation_img / _txt: two shift, scale, gate sets each;
// single_stream_modulation: one set); Flux2TransformerBlocks (double stream, joint attention over concat(txt, img)
// with per-head RMS qk norm and 4-axis rotary embedding, SwiGLU feed-forwards); Flux2SingleTransformerBlocks (one
// Linear to [q, k, v, mlp_in (2x)], SwiGLU, to_out over concat(attn, mlp)); AdaLayerNormContinuous; proj_out.
#include <nlohmann/json.hpp>
#include <vector>

#include "models/core/weights.h"

namespace kiln::models {

struct Flux2Config {
    int heads = 48, head_dim = 128, in_channels = 128, out_channels = 128, layers = 8, single_layers = 48, patch = 1;
    int joint_attention_dim = 15360, timestep_channels = 256;  // timestep_guidance_channels
    double mlp_ratio = 3.0, rope_theta = 2000.0;
    float eps = 1e-6f;
    bool guidance_embeds = true;
    std::vector<int> axes_dims_rope{32, 32, 32, 32};
    int inner() const { return heads * head_dim; }
    int mlp_hidden() const { return (int)(inner() * mlp_ratio); }  // int(dim * mlp_ratio), as diffusers
    static Flux2Config from_json(const nlohmann::json& j);         // rejects configs Kiln does not implement
};

// Flux2PosEmbed(rope_theta, axes_dims_rope) over concat(txt_ids, img_ids): ids [S, n] or [B, S, n] (integer or
// float; a batched tensor is read as its first row, as diffusers does; axis a reads column a, n >= the axes). Returns
// the tables [S_txt + S_img, head_dim/2] (diffusers' [S, head_dim] repeat_interleave(2) holds each value twice).
std::pair<Tensor, Tensor> flux2_rope_tables(const Flux2Config& c, const Tensor& txt_ids, const Tensor& img_ids);

// Forward graph for a batch of B with S_img packed latent tokens and S_txt text tokens. Inputs: hidden_states
// [B, S_img, in_channels], encoder_hidden_states [B, S_txt, joint_attention_dim], timestep [B] (t/1000), guidance
// [B] when `guidance` (only with guidance_embeds; diffusers adds the guidance embedding only when guidance is
// given: FLUX.2 [klein] passes None), rope_cos/rope_sin [S_txt + S_img, head_dim/2]. Output "sample"
// [B, S_img, patch^2 * out_channels]. Region kinds: "transformer_blocks" (chains hidden and encoder hidden states)
// and "single_transformer_blocks".
void build_flux2(Builder& b, const Flux2Config& c, int B, int S_img, int S_txt, bool guidance = false);

}  // namespace kiln::models
