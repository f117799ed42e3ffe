#pragma once
// The KL autoencoder (diffusers models/autoencoders/autoencoder_kl.py, vae.py Encoder/Decoder,
// unet_2d_blocks UpDecoderBlock2D / DownEncoderBlock2D / UNetMidBlock2D, resnet.py ResnetBlock2D).
#include <nlohmann/json.hpp>
#include <vector>

#include "models/weights.h"

namespace kiln::models {

struct VaeConfig {
    int in_channels = 3, out_channels = 3, latent_channels = 4, layers_per_block = 1, groups = 32;
    std::vector<int> block_out{64};
    bool mid_attention = true, quant_conv = true, post_quant_conv = true;
    double scaling_factor = 0.18215, shift_factor = 0;
    int sample_size = 32;  // config sample_size (the first entry of a list): the tile size of enable_tiling()
    static VaeConfig from_json(const nlohmann::json& j);
};

// decode: input "latents" [B, L, h, w] -> output "decoded" [B, out, h*2^(n-1), w*2^(n-1)].
void build_vae_decoder(Builder& b, const VaeConfig& c, int B, int h, int w);
// encode: input "image" [B, in, H, W] -> outputs "latent_mean", "latent_logvar_raw" [B, L, ...]
// (the caller clamps logvar to [-30, 20] as DiagonalGaussianDistribution does).
void build_vae_encoder(Builder& b, const VaeConfig& c, int B, int H, int W);

}  // namespace kiln::models
