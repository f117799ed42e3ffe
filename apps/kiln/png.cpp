#include "apps/kiln/png.h"

#include <algorithm>
#include <cctype>
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
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC  // the tests define their own copy
#include <stb_image.h>
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

namespace {
std::string lower_case(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return (char)std::tolower(ch); });
    return s;
}
}  // namespace

std::string image_extension(const std::string& path) {
    const std::string ext = std::filesystem::path(path).extension().string(), lower = lower_case(ext);
    return lower == ".png" || lower == ".jpg" || lower == ".jpeg" ? ext : "";
}

ImageFormat image_format(const std::string& path) {
    const std::string ext = lower_case(image_extension(path));
    return ext == ".jpg" || ext == ".jpeg" ? ImageFormat::jpeg : ImageFormat::png;
}

namespace {
// PNG bytes with one tEXt chunk per pair, right after IHDR (8-byte signature + 25-byte IHDR chunk).
std::vector<uint8_t> encode_png(const std::string& path, const std::vector<uint8_t>& px, int W, int H, int c,
                                const std::vector<std::pair<std::string, std::string>>& text) {
    int len = 0;
    unsigned char* png = stbi_write_png_to_mem(px.data(), W * c, W, H, c, &len);
    KILN_CHECK(png && len > 33, path, ": PNG encoding failed");
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
    return out;
}

// JPEG bytes with one COM segment ("key: value", cut at the segment's 65533 bytes) per pair, after the JFIF APP0
// segment that stb writes right after SOI.
std::vector<uint8_t> encode_jpeg(const std::string& path, const std::vector<uint8_t>& px, int W, int H, int c,
                                 const std::vector<std::pair<std::string, std::string>>& text, int quality) {
    KILN_CHECK(quality >= 1 && quality <= 100, path, ": JPEG quality ", quality, " (1..100)");
    std::vector<uint8_t> jpg;
    auto sink = [](void* ctx, void* data, int size) {
        auto* v = static_cast<std::vector<uint8_t>*>(ctx);
        v->insert(v->end(), (const uint8_t*)data, (const uint8_t*)data + size);
    };
    KILN_CHECK(stbi_write_jpg_to_func(sink, &jpg, W, H, c, px.data(), quality) && jpg.size() > 6, path,
               ": JPEG encoding failed");
    KILN_CHECK(jpg[0] == 0xFF && jpg[1] == 0xD8 && jpg[2] == 0xFF && jpg[3] == 0xE0, path,
               ": JPEG encoder wrote no JFIF header");
    const size_t at = 4 + ((size_t)jpg[4] << 8 | jpg[5]);
    std::vector<uint8_t> out(jpg.begin(), jpg.begin() + (std::ptrdiff_t)at);
    for (auto& [k, v] : text) {
        std::string body = k + ": " + v;
        body.resize(std::min<size_t>(body.size(), 65533));
        const size_t n = body.size() + 2;
        out.insert(out.end(), {0xFF, 0xFE, (uint8_t)(n >> 8), (uint8_t)n});
        out.insert(out.end(), body.begin(), body.end());
    }
    out.insert(out.end(), jpg.begin() + (std::ptrdiff_t)at, jpg.end());
    return out;
}
}  // namespace

void write_image(const std::string& path, const float* image, int h, int w, int c, int upscale,
                 const std::vector<std::pair<std::string, std::string>>& text, int jpeg_quality) {
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
    const std::vector<uint8_t> out = image_format(path) == ImageFormat::jpeg
                                         ? encode_jpeg(path, px, W, H, c, text, jpeg_quality)
                                         : encode_png(path, px, W, H, c, text);
    if (path == "-") {  // standard output: one PNG, for a pipe
        KILN_CHECK(std::fwrite(out.data(), 1, out.size(), stdout) == out.size() && std::fflush(stdout) == 0,
                   "-o -: writing to standard output failed");
        return;
    }
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

models::Pixels read_image(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    KILN_CHECK(f.good(), path, ": cannot open the image");
    const std::string bytes((std::istreambuf_iterator<char>(f)), {});
    KILN_CHECK(!bytes.empty(), path, ": the image file is empty");
    int w = 0, h = 0, c = 0;
    // 4 channels out: grayscale repeated to R, G, B; alpha kept (and ignored later); 16-bit PNG samples >> 8.
    stbi_uc* px =
        stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), (int)bytes.size(), &w, &h, &c, 4);
    KILN_CHECK(px, path, ": not a readable PNG or JPEG image (", stbi_failure_reason(), ")");
    models::Pixels out;
    out.width = w, out.height = h;
    out.rgba.assign(px, px + (size_t)w * h * 4);
    stbi_image_free(px);
    return out;
}

}  // namespace kiln::app
