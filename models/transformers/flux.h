#pragma once
// Flux's transformer (diffusers models/transformers/transformer_flux.py): x_embedder / context_embedder,
// CombinedTimestep(Guidance)TextProjEmbeddings, FluxTransformerBlocks (double stream: AdaLayerNormZero per
// stream, joint attention over concat(txt, img) with per-head RMS qk norm and rotary embedding),
// FluxSingleTransformerBlocks (one stream over concat(txt, img): parallel attention and MLP, proj_out over
// their concat), AdaLayerNormContinuous, proj_out.
#include <nlohmann/json.hpp>
#include <vector>

#include "models/core/weights.h"

namespace kiln::models {

struct FluxConfig {
    int heads = 24, head_dim = 128, in_channels = 64, out_channels = 64, layers = 19, single_layers = 38, patch = 1;
    int joint_attention_dim = 4096, pooled_projection_dim = 768;
    bool guidance_embeds = false;
    std::vector<int> axes_dims_rope{16, 56, 56};
    int inner() const { return heads * head_dim; }
    static FluxConfig from_json(const nlohmann::json& j);  // rejects configs Kiln does not implement
};

// FluxPosEmbed(theta=10000, axes_dims_rope) over ids = concat(txt_ids, img_ids) [S, n_axes] (f32 positions):
// per axis, angles pos * theta^(-2i/dim) in f64 (as diffusers on the CPU), cos/sin cast to f32. Returns the
// tables [S, head_dim/2] (diffusers' [S, head_dim] repeat_interleave(2) holds each value twice).
std::pair<Tensor, Tensor> flux_rope_tables(const FluxConfig& c, const Tensor& txt_ids, const Tensor& img_ids);

// The tables of FluxPosEmbed / Flux2PosEmbed (get_1d_rotary_pos_embed per axis, repeat_interleave_real) for the
// positions pos = concat(txt_pos, img_pos) [S, >= axes] (f32; axis a reads column a): angle pos * theta^(-2i/dim)
// in f64, cos/sin cast to f32, as [S, sum(axes_dims)/2].
std::pair<Tensor, Tensor> axes_rope_tables(const std::vector<int>& axes_dims, double theta, const Tensor& txt_pos,
                                           const Tensor& img_pos);

// Forward graph for a batch of B with S_img packed latent tokens and S_txt text tokens. Inputs: hidden_states
// [B, S_img, in_channels], encoder_hidden_states [B, S_txt, joint_attention_dim], pooled_projections
// [B, pooled_projection_dim], timestep [B] (t/1000), guidance [B] (guidance_embeds only), rope_cos/rope_sin
// [S_txt + S_img, head_dim/2]. Output "sample" [B, S_img, patch^2 * out_channels]. Region kinds:
// "transformer_blocks" (chains hidden and encoder hidden states) and "single_transformer_blocks".
void build_flux(Builder& b, const FluxConfig& c, int B, int S_img, int S_txt);

}  // namespace kiln::models
