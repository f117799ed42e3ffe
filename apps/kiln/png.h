#pragma once
// Image output via stb_image_write: PNG with tEXt chunks (settings, seed), or JPEG with COM segments; written
// atomically.
#include <string>
#include <utility>
#include <vector>

#include "models/pipelines/image_input.h"
#include "runtime/core/tensor.h"

namespace kiln::app {
// The format a path names: JPEG for .jpg / .jpeg (any case), otherwise PNG.
enum class ImageFormat { png, jpeg };
ImageFormat image_format(const std::string& path);
// The path's image extension as written (".png", ".JPG", ...), or "" when it has none Kiln writes.
std::string image_extension(const std::string& path);
// image: [H, W, C] floats in [0, 1]; written as 8-bit with round(v * 255) like diffusers' numpy_to_pil, in the
// format the path names (image_format); "-" writes PNG to standard output. jpeg_quality: 1..100, JPEG only.
void write_image(const std::string& path, const float* image, int h, int w, int c, int upscale,
                 const std::vector<std::pair<std::string, std::string>>& text, int jpeg_quality = 95);
// Lays out B images [B, H, W, C] side by side (cols per row) with a 1-px grey separator.
Tensor make_grid(const Tensor& images, int cols);
// Reads a PNG or JPEG (stb_image; alpha, grayscale and 16-bit PNGs included) as 8-bit RGBA. A missing, empty,
// unreadable or truncated file: kiln::Error naming it.
models::Pixels read_image(const std::string& path);
}  // namespace kiln::app
