#include "apps/kiln/png.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/core/error.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // the static writers Kiln does not call
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace kiln::app {

namespace {
uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0xffffffffu) {
    for (size_t i = 0; i < n; ++i) {
        crc ^= p[i];
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return crc;
}
void put_be32(std::vector<uint8_t>& v, uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back((uint8_t)(x >> s));
}
}  // namespace

void write_png(const std::string& path, const float* image, int h, int w, int c, int upscale,
               const std::vector<std::pair<std::string, std::string>>& text) {
    KILN_CHECK(upscale >= 1 && upscale <= 64, "--upscale must be in 1..64");
    int H = h * upscale, W = w * upscale;
    std::vector<uint8_t> px((size_t)H * W * c);
    for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x)
            for (int k = 0; k < c; ++k) {
                float v = image[((size_t)(y / upscale) * w + (x / upscale)) * c + k];
                v = v < 0 ? 0 : (v > 1 ? 1 : v);
                px[((size_t)y * W + x) * c + k] = (uint8_t)std::nearbyint(v * 255.f);  // numpy_to_pil: round(x * 255)
            }
    int len = 0;
    unsigned char* png = stbi_write_png_to_mem(px.data(), W * c, W, H, c, &len);
    KILN_CHECK(png && len > 33, path, ": PNG encoding failed");
    // Insert tEXt chunks right after IHDR (8-byte signature + 25-byte IHDR chunk).
    std::vector<uint8_t> out(png, png + 33);
    for (auto& [k, v] : text) {
        std::vector<uint8_t> chunk = {'t', 'E', 'X', 't'};
        chunk.insert(chunk.end(), k.begin(), k.end());
        chunk.push_back(0);
        chunk.insert(chunk.end(), v.begin(), v.end());
        put_be32(out, (uint32_t)(chunk.size() - 4));
        out.insert(out.end(), chunk.begin(), chunk.end());
        put_be32(out, crc32(chunk.data(), chunk.size()) ^ 0xffffffffu);
    }
    out.insert(out.end(), png + 33, png + len);
    STBIW_FREE(png);
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        KILN_CHECK(f.good(), tmp, ": cannot open for writing");
        f.write((const char*)out.data(), (std::streamsize)out.size());
        KILN_CHECK(f.good(), tmp, ": write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp);
        KILN_FAIL(path, ": cannot write: ", ec.message());
    }
}

Tensor make_grid(const Tensor& images, int cols) {
    const int B = (int)images.shape[0], h = (int)images.shape[1], w = (int)images.shape[2], c = (int)images.shape[3];
    cols = std::max(1, std::min(cols, B));
    const int rows = (B + cols - 1) / cols, H = rows * h + rows - 1, W = cols * w + cols - 1;
    Tensor g(DType::f32, {1, H, W, c});
    float* o = g.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) o[i] = 0.5f;
    for (int b = 0; b < B; ++b) {
        int r = b / cols, q = b % cols;
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x)
                for (int k = 0; k < c; ++k)
                    o[(((size_t)(r * (h + 1) + y)) * W + (q * (w + 1) + x)) * c + k] =
                        images.data<float>()[(((size_t)b * h + y) * w + x) * c + k];
    }
    return g;
}

}  // namespace kiln::app
