#pragma once
// The KL autoencoder (diffusers models/autoencoders/autoencoder_kl.py, vae.py Encoder/Decoder,
// unet_2d_blocks UpDecoderBlock2D / DownEncoderBlock2D / UNetMidBlock2D, resnet.py ResnetBlock2D), and FLUX.2's
// AutoencoderKLFlux2 (autoencoder_kl_flux2.py): the same encoder and decoder (the decoder's channels may differ:
// decoder_block_out_channels), no scaling or shift factor, plus a BatchNorm2d `bn` whose running statistics
// normalise the 2x2-patchified latents the transformer sees (Flux2LatentNorm below).
#include <nlohmann/json.hpp>
#include <vector>

#include "models/core/weights.h"

namespace kiln::models {

struct VaeConfig {
    int in_channels = 3, out_channels = 3, latent_channels = 4, layers_per_block = 1, groups = 32;
    std::vector<int> block_out{64};
    std::vector<int> decoder_block_out{64};  // AutoencoderKLFlux2's decoder_block_out_channels, else block_out
    bool mid_attention = true, quant_conv = true, post_quant_conv = true;
    double scaling_factor = 0.18215, shift_factor = 0;  // AutoencoderKLFlux2: 1 and 0 (it has neither)
    int sample_size = 32;  // config sample_size (the first entry of a list): the tile size of enable_tiling()
    // AutoencoderKLFlux2 (the class per the registry, from the config's _class_name): `bn` holds the statistics.
    bool latent_bn = false;
    std::vector<int> patch_size{2, 2};
    double batch_norm_eps = 1e-4;
    static VaeConfig from_json(const nlohmann::json& j);
};

// decode: input "latents" [B, L, h, w] -> output "decoded" [B, out, h*2^(n-1), w*2^(n-1)].
void build_vae_decoder(Builder& b, const VaeConfig& c, int B, int h, int w);
// encode: input "image" [B, in, H, W] -> outputs "latent_mean", "latent_logvar_raw" [B, L, ...]
// (the caller clamps logvar to [-30, 20] as DiagonalGaussianDistribution does).
void build_vae_encoder(Builder& b, const VaeConfig& c, int B, int H, int W);

// FLUX.2's latent normalisation (pipeline_flux2_klein.py), per patchified channel k = c*4 + dy*2 + dx of the
// 2x2-patchified latents [B, 4C, h, w] (c the VAE latent channel, (dy, dx) the position in the 2x2 patch):
//   transformer space -> VAE: z = x * std[k] + mean[k];  VAE -> transformer space: x = (z - mean[k]) / std[k],
// with mean = bn.running_mean and std = sqrt(bn.running_var + batch_norm_eps), all float32 as torch computes them.
struct Flux2LatentNorm {
    int latent_channels = 0;       // C; mean and std have 4C entries
    std::vector<float> mean, std;  // [4C]
    // From an AutoencoderKLFlux2's weights (bn.running_mean, bn.running_var, [4C] each) and config (latent_bn,
    // patch_size [2, 2] as the pipeline's _unpatchify_latents assumes). kiln::Error for any other VAE.
    static Flux2LatentNorm from(const WeightStore& ws, const VaeConfig& c);
};

// Flux2KleinPipeline's decode preamble: _unpack_latents_with_ids (img_ids (0, y, x, 0): tokens in row-major
// order), x * std + mean per channel, _unpatchify_latents. Packed tokens [B, h*w, 4C] (the transformer's latents)
// -> the VAE's decode input [B, C, 2h, 2w] (then VaeRunner::decode, no scaling). Any float dtype in, f32 out.
// In a pipeline: `vae.decode(flux2_unpack_denormalize(tokens, vae.latent_norm(), h, w))` (VaeRunner vae). The token
// layout is Flux.1's packing (channel c*4 + dy*2 + dx), so this is Flux.1's unpack with the affine per channel.
Tensor flux2_unpack_denormalize(const Tensor& tokens, const Flux2LatentNorm& n, int h, int w);
// The same from patchified latents [B, 4C, h, w] (without the token unpacking).
Tensor flux2_denormalize_unpatchify(const Tensor& patchified, const Flux2LatentNorm& n);
// _encode_vae_image after vae.encode(...).mode(): _patchify_latents then (z - mean) / std. Latents [B, C, H, W]
// (H, W even) -> patchified [B, 4C, H/2, W/2], f32; the pipeline then packs them to tokens (_pack_latents).
Tensor flux2_patchify_normalize(const Tensor& latents, const Flux2LatentNorm& n);

}  // namespace kiln::models
