#pragma once
// The deep-compression autoencoder, DC-AE (diffusers models/autoencoders/autoencoder_dc.py: AutoencoderDC, its
// Encoder / Decoder, ResBlock, EfficientViTBlock = SanaMultiscaleLinearAttention + GLUMBConv, DCDownBlock2d,
// DCUpBlock2d). Sana's VAE: 32x spatial compression, 32 latent channels, deterministic encode.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/core/weights.h"

namespace kiln::models {

struct DcAeConfig {
    enum class Block { res, vit };     // "ResBlock", "EfficientViTBlock"
    enum class Norm { rms, batch };    // "rms_norm", "batch_norm"
    enum class Act { silu, relu };     // get_activation: "silu" / "swish", "relu"
    struct Stage {                     // one entry of the *_block_out_channels lists
        int channels = 0, layers = 0;  // block_out_channels[i], layers_per_block[i]
        Block block = Block::res;
        std::vector<int> scales;  // qkv_multiscales[i]: kernel sizes of the multiscale projections
        Norm norm = Norm::rms;    // decoder_norm_types[i] (the encoder's are rms_norm)
        Act act = Act::silu;      // decoder_act_fns[i] (the encoder's are silu)
    };
    int in_channels = 3, latent_channels = 32, head_dim = 32;
    std::vector<Stage> encoder, decoder;
    bool pixel_shuffle_up = true;      // upsample_block_type != "interpolate" (nearest x2 then conv)
    bool pixel_unshuffle_down = true;  // downsample_block_type == "pixel_unshuffle" (else "conv": stride 2)
    bool encoder_out_shortcut = true, decoder_in_shortcut = true;
    Act conv_act = Act::relu;  // decoder_conv_act_fn
    double scaling_factor = 1.0;
    int compression() const { return 1 << ((int)encoder.size() - 1); }  // spatial_compression_ratio
    // Throws one line naming the key and value diffusers' AutoencoderDC would take but Kiln does not implement.
    static DcAeConfig from_json(const nlohmann::json& j);
};

// Debug outputs named as the fixtures' io.json: "dbg_decoder_in_shortcut_out", "dbg_decoder_stage{i}_out",
// "dbg_encoder_stage{i}_out" (off by default).
// decode: input "latents" [B, L, h, w] -> output "decoded" [B, in, r*h, r*w] (r = compression(); no scaling).
void build_dc_ae_decoder(Builder& b, const DcAeConfig& c, int B, int h, int w, bool debug_outputs = false);
// encode: input "image" [B, in, H, W] -> output "latent" [B, L, H/r, W/r] (H, W multiples of r).
void build_dc_ae_encoder(Builder& b, const DcAeConfig& c, int B, int H, int W, bool debug_outputs = false);

}  // namespace kiln::models
