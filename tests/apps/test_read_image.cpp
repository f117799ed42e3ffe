// read_image: the PNGs people have (grayscale, grayscale + alpha, RGB, RGBA, 16-bit), made here byte by byte with
// the PNG format's own chunks, come back as the 8-bit RGBA the preprocessing reads; a truncated file is one error.
#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "apps/kiln/png.h"
#include "runtime/core/error.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
uint32_t crc32(const std::string& s) {  // PNG's CRC (ISO 3309), bitwise
    uint32_t c = 0xffffffffu;
    for (unsigned char b : s) {
        c ^= b;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}
std::string be32(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }
std::string chunk(const std::string& type, const std::string& data) {
    return be32((uint32_t)data.size()) + type + data + be32(crc32(type + data));
}

// A PNG of w x h samples (bytes per row given, filter 0) in one stored (uncompressed) deflate block.
std::string png(int w, int h, int depth, int color_type, const std::string& rows) {
    std::string ihdr = be32(w) + be32(h) + char(depth) + char(color_type) + std::string(3, '\0');
    uint32_t a = 1, b = 0;  // Adler-32 of the raw data
    for (unsigned char x : rows) a = (a + x) % 65521, b = (b + a) % 65521;
    const uint16_t n = (uint16_t)rows.size();
    std::string z = std::string("\x78\x01", 2) + char(1) + char(n & 0xff) + char(n >> 8) + char(~n & 0xff) +
                    char((~n >> 8) & 0xff) + rows + be32((b << 16) | a);
    return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", z) + chunk("IEND", "");
}

models::Pixels load(const test::TempDir& tmp, const std::string& bytes) {
    std::ofstream(tmp / "x.png", std::ios::binary) << bytes;
    return app::read_image(tmp / "x.png");
}
}  // namespace

TEST_CASE("read_image: grayscale, gray + alpha, RGB, RGBA and 16-bit PNGs as 8-bit RGBA", "[apps][images]") {
    test::TempDir tmp("kiln_png");
    // 2 x 1 pixels each; every row starts with filter byte 0.
    auto gray = load(tmp, png(2, 1, 8, 0, std::string("\0\x10\xf0", 3)));
    CHECK(gray.width == 2);
    CHECK(gray.height == 1);
    CHECK(gray.rgba == std::vector<uint8_t>{0x10, 0x10, 0x10, 255, 0xf0, 0xf0, 0xf0, 255});
    auto gray_alpha = load(tmp, png(2, 1, 8, 4, std::string("\0\x10\x80\xf0\x00", 5)));
    CHECK(gray_alpha.rgba == std::vector<uint8_t>{0x10, 0x10, 0x10, 0x80, 0xf0, 0xf0, 0xf0, 0x00});
    auto rgb = load(tmp, png(2, 1, 8, 2, std::string("\0\x01\x02\x03\x04\x05\x06", 7)));
    CHECK(rgb.rgba == std::vector<uint8_t>{1, 2, 3, 255, 4, 5, 6, 255});
    auto rgba = load(tmp, png(2, 1, 8, 6, std::string("\0\x01\x02\x03\x09\x04\x05\x06\x07", 9)));
    CHECK(rgba.rgba == std::vector<uint8_t>{1, 2, 3, 9, 4, 5, 6, 7});
    // 16-bit grayscale, big-endian samples 0x12ff and 0xab01: the high byte is the 8-bit value (stb_image's
    // conversion is sample >> 8).
    auto deep = load(tmp, png(2, 1, 16, 0, std::string("\0\x12\xff\xab\x01", 5)));
    CHECK(deep.rgba == std::vector<uint8_t>{0x12, 0x12, 0x12, 255, 0xab, 0xab, 0xab, 255});
    // 16-bit RGB.
    auto deep_rgb = load(tmp, png(1, 1, 16, 2, std::string("\0\x01\x00\x02\x00\x03\x00", 7)));
    CHECK(deep_rgb.rgba == std::vector<uint8_t>{1, 2, 3, 255});
}

TEST_CASE("read_image: a truncated, empty or foreign file is one error naming it", "[apps][images]") {
    test::TempDir tmp("kiln_png");
    const std::string good = png(2, 1, 8, 0, std::string("\0\x10\xf0", 3));
    for (const std::string& bytes : {good.substr(0, good.size() / 2), std::string(), std::string("GIF89a....")}) {
        std::ofstream(tmp / "bad.png", std::ios::binary) << bytes;
        try {
            app::read_image(tmp / "bad.png");
            FAIL("read_image accepted a bad file");
        } catch (const Error& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find("bad.png") != std::string::npos);
            CHECK(std::string(e.what()).find('\n') == std::string::npos);
        }
    }
    CHECK_THROWS_AS(app::read_image(tmp / "missing.png"), Error);
}
