#pragma once
// PNG output via stb_image_write, with tEXt chunks (settings, seed) and an atomic write.
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/tensor.h"

namespace kiln::app {
// image: [H, W, C] floats in [0, 1]; written as 8-bit with (v * 255 + 0.5) like diffusers' numpy_to_pil.
void write_png(const std::string& path, const float* image, int h, int w, int c, int upscale,
               const std::vector<std::pair<std::string, std::string>>& text);
// Lays out B images [B, H, W, C] side by side (cols per row) with a 1-px grey separator.
Tensor make_grid(const Tensor& images, int cols);
}  // namespace kiln::app
