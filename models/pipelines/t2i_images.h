#pragma once
// The image-to-image and inpainting part of the text-to-image pipelines (generate_t2i): the image's latents, the
// noise, scale_noise to the strength's first sigma, and the inpainting blend after each step.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/pipelines/t2i_pipeline.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/torch_rng.h"

namespace kiln::models {

// NCHW [B, C, h, w] (batch repeated), as prepare_latents and prepare_mask_latents leave them before packing.
struct ImageLatents {
    std::vector<float> image_latents;  // (sample - shift_factor) * scaling_factor
    std::vector<float> noise;          // the `noise` draw
    std::vector<float> init;           // scale_noise(image_latents, sigma, noise): the latents entering step 0
    std::vector<float> mask;           // inpainting: the mask at latent resolution (1 = repaint); else empty
    // Flux Fill: per token, cat(packed masked-image latents [4 C], packed mask [4 f^2]): [B, S, cond_channels],
    // the part of the transformer's input after the latents.
    std::vector<float> cond;
};

// prepare_latents of the img2img / inpaint pipelines: preprocess, VAE encode, latent_dist.sample() with the
// draw image_vae_sample_noise, then the draw noise ([B, C, h, w]), in that order from gen unless given by name
// (opt.inputs.noise; opt.latents_init is the noise too). sigma: the cut schedule's first sigma. keep: the fixtures'
// intermediates (image_preprocessed, image_latent_mean/std, image_latents, mask_preprocessed, ...).
ImageLatents prepare_image_latents(VaeRunner& vae, const T2IOptions& opt, const T2IPlan& p, TorchCpuGenerator& gen,
                                   int64_t B, float sigma, std::vector<std::pair<std::string, Tensor>>* keep);

// Flux Kontext's reference (pipeline_flux_kontext.py prepare_latents): the image preprocessed at ref_width x
// ref_height, VAE-encoded with the mean (sample_mode "argmax"), (mean - shift) * scale, packed [S_img, 64] and
// repeated for B rows: [B, S_img, 64]. ids: its rotary ids [S_img, 3], (1, row, col).
std::vector<float> kontext_reference(VaeRunner& vae, const T2IOptions& opt, const T2IPlan& p, int64_t B, Tensor& ids,
                                     std::vector<std::pair<std::string, Tensor>>* keep);

// The inpainting blend after step i, in the loop's layout (Flux: packed): init_latents_proper =
// sigma * noise + (1 - sigma) * image_latents with sigma the cut schedule's sigmas[i + 1] (0 after the last step:
// the image latents), then latents = (1 - mask) * init_latents_proper + mask * latents.
void blend_inpaint(std::vector<float>& latents, const std::vector<float>& image_latents,
                   const std::vector<float>& noise, const std::vector<float>& mask, float sigma,
                   std::vector<float>* init_proper = nullptr);

}  // namespace kiln::models
