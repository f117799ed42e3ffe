#pragma once
// The text-to-image pipelines' VAE, whichever class the model's vae/ folder holds: AutoencoderKL (VaeRunner) or
// AutoencoderDC (DcAeRunner, Sana). Its latent space (channels, spatial factor, scaling) and its decoder.
#include <memory>

#include "models/core/source.h"
#include "models/vae/dc_ae_runner.h"
#include "models/vae/vae_runner.h"

namespace kiln::models {

struct LatentSpace {
    int scale_factor = 8;  // vae_scale_factor: 2^(len(block_out_channels) - 1) (KL) or the DC-AE's compression
    int channels = 4;
    double scaling_factor = 1, shift_factor = 0;  // the pipelines decode latents / scaling_factor (+ shift_factor)
    bool dc_ae = false;
};
// From the vae component's config (its class from the registry); kiln::Error for a class that is neither.
LatentSpace latent_space(const ModelSource& src);

class LatentDecoder {
public:
    // ctx == nullptr: the CPU reference executors.
    LatentDecoder(vk::Context* ctx, const ModelSource& src, const VaeOptions& opt);
    // The KL VAE for images in (img2img, inpainting, Kontext); kiln::Error for a DC-AE (no such Sana pipeline).
    VaeRunner& kl();
    void prepare_decode(const Shape& latents);
    Tensor decode(const Tensor& latents);  // latents already / scaling_factor -> [B, 3, H, W], unclamped

private:
    std::unique_ptr<VaeRunner> kl_;
    std::unique_ptr<DcAeRunner> dc_;
};

}  // namespace kiln::models
