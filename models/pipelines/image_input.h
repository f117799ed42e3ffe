#pragma once
// Images in: diffusers' VaeImageProcessor preprocessing (image and mask), the strength's cut of the schedule and
// the latents of the image-to-image and inpainting pipelines (StableDiffusion3Img2Img/Inpaint, FluxImg2Img/
// Inpaint), prepared on the host around the text-to-image loop (models/pipelines/t2i_pipeline.cpp).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"

namespace kiln::models {

// 8-bit RGBA pixels, row-major from the top-left (alpha is ignored, as PIL's convert("RGB") drops it).
struct Pixels {
    std::vector<uint8_t> rgba;
    int width = 0, height = 0;
    bool empty() const { return rgba.empty(); }
};

// What a call takes beyond the text: the image (and mask) as pixels or as diffusers' preprocessed tensors, the
// strength, and random draws by name instead of the seed's generator.
struct ImageInputs {
    Pixels image, mask;
    Tensor image_tensor;             // image_processor.preprocess output [1, 3, H, W] in [-1, 1]; replaces image
    Tensor mask_tensor;              // mask_processor.preprocess output [1, 1, H, W] in {0, 1}; replaces mask
    std::optional<double> strength;  // (0, 1]; default: the pipeline's (0.6)
    // diffusers' draws by call site: noise, image_vae_sample_noise, masked_image_vae_sample_noise. Each one given
    // replaces that draw; the others come from the seed's generator in diffusers' order.
    std::map<std::string, Tensor> noise;
    // Flux Kontext: diffusers' max_area (default 1024^2: the output's area, its aspect from width / height) and
    // _auto_resize (the reference image resized to the preferred resolution nearest its aspect).
    std::optional<int64_t> max_area;
    bool auto_resize = true;

    bool has_image() const { return !image.empty() || !image_tensor.bytes.empty(); }
    bool has_mask() const { return !mask.empty() || !mask_tensor.bytes.empty(); }
};

// Resizes 8-bit channels with a Lanczos-3 filter widened by the scale when reducing (the antialiasing of PIL's
// Image.resize(LANCZOS)), separably, rows then columns, each pass rounded to 8 bits. Same size: a copy.
std::vector<uint8_t> resize_lanczos(const std::vector<uint8_t>& src, int w, int h, int channels, int W, int H);

// VaeImageProcessor.preprocess of an RGB image: resized to W x H when its size differs, /255, 2x - 1 ->
// [1, 3, H, W]. A tensor (image_tensor) is resized with nearest neighbours, as diffusers resizes tensors.
Tensor preprocess_image(const ImageInputs& in, int W, int H);
// The mask processor (do_convert_grayscale, do_binarize, no normalize): PIL's convert("L"), resized as the
// image, /255, then v < 0.5 -> 0, else 1 -> [1, 1, H, W].
Tensor preprocess_mask(const ImageInputs& in, int W, int H);

// diffusers' get_timesteps: t_start = int(max(N - min(N * strength, N), 0)) with Python floats.
int strength_t_start(int steps, double strength);

// F.interpolate(mask, (h, w), mode="nearest") of [1, 1, H, W]: latent (i, j) <- pixel (i * H / h, j * W / w),
// broadcast to [B, C, h, w] (1 = repaint).
std::vector<float> mask_latents(const Tensor& mask, int B, int C, int h, int w);

}  // namespace kiln::models
