#pragma once
// The token layouts of the packed-latent families (Flux, FLUX.2 [klein]): 2x2 packing of latents into tokens and back,
// klein's flatten of its patchified noise and its decode input, and the rotary ids of the packed tokens. Host-side,
// once per generation (t2i_pipeline.cpp).
#include <map>
#include <string>
#include <vector>

#include "models/pipelines/t2i_pipeline.h"

namespace kiln::models {

class LatentDecoder;

// Flux's pipeline _pack_latents: [B, C, h, w] -> [B, (h/2)(w/2), C*4], channel c*4 + dy*2 + dx; unpack_2x2 is
// _unpack_latents, its inverse.
std::vector<float> pack_2x2(const float* x, int B, int C, int h, int w);
std::vector<float> unpack_2x2(const float* p, int B, int C, int h, int w);
// [B, C, S] -> [B, S, C] (FLUX.2's _pack_latents: reshape(B, C, H*W).permute(0, 2, 1)).
std::vector<float> channels_last(const std::vector<float>& x, int64_t B, int64_t C, int64_t S);
// FLUX.2 [klein]: the packed tokens (shape `tokens`, [B, S, 4C]) -> the VAE's input [B, C, h, w]: x * std + mean per
// patchified channel (AutoencoderKLFlux2's BatchNorm statistics), unpatchified (models/vae/vae.h).
std::vector<float> klein_decode_input(LatentDecoder& vx, const std::vector<float>& x, const Shape& tokens, int h,
                                      int w);
// Flux: the rotary ids of the packed tokens, img (0, row, col) and txt (zeros), and the embedded guidance, the same
// for the negative rows (BB rows in all). FLUX.2 [klein]: 4-axis ids, img (0, row, col, 0) and txt (0, 0, 0, l)
// (_prepare_latent_ids, _prepare_text_ids), and guidance=None.
void flux_inputs(std::map<std::string, Tensor>& in, const T2IPlan& p, int64_t L_txt, int BB);

}  // namespace kiln::models
