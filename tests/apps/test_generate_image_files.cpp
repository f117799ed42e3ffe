// `kiln generate -o`: the extension picks the format. NAME.jpg / NAME.jpeg writes JPEG with the settings in COM
// segments; the pixels are the PNG's exactly: its bytes, COM segments removed, are stb's JPEG encoding of the PNG's
// decoded pixels at the same quality. Several images keep the extension (NAME-0.jpg). An unknown extension writes
// PNG with a warning; a bad --quality or --upscale stops before any work.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;

namespace {
using Tmp = kiln::test::TempDir;

// `kiln generate ARGS` (the built-in digits model); the exit status, stderr in *err.
int generate(const Tmp& tmp, const std::string& args, std::string* err) {
    const std::string ef = tmp / "stderr.txt";
    const std::string cmd = kiln::test::cli_binary("kiln") + " generate " + args + " 2>" + ef;
    const int st = std::system(cmd.c_str());
    std::ifstream f(ef);
    err->assign(std::istreambuf_iterator<char>(f), {});
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<uint8_t> bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Splits a JPEG into its COM segments' texts and the rest of its bytes.
std::vector<uint8_t> strip_comments(const std::vector<uint8_t>& jpg, std::vector<std::string>* comments) {
    std::vector<uint8_t> out(jpg.begin(), jpg.begin() + 2);  // SOI
    size_t i = 2;
    while (i + 4 <= jpg.size() && jpg[i] == 0xFF && jpg[i + 1] != 0xDA) {  // segments up to start-of-scan
        const size_t len = (size_t)jpg[i + 2] << 8 | jpg[i + 3];
        REQUIRE(i + 2 + len <= jpg.size());
        if (jpg[i + 1] == 0xFE)
            comments->emplace_back(jpg.begin() + (std::ptrdiff_t)(i + 4), jpg.begin() + (std::ptrdiff_t)(i + 2 + len));
        else
            out.insert(out.end(), jpg.begin() + (std::ptrdiff_t)i, jpg.begin() + (std::ptrdiff_t)(i + 2 + len));
        i += 2 + len;
    }
    out.insert(out.end(), jpg.begin() + (std::ptrdiff_t)i, jpg.end());
    return out;
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& px, int w, int h, int quality) {
    std::vector<uint8_t> out;
    auto sink = [](void* ctx, void* data, int size) {
        auto* v = static_cast<std::vector<uint8_t>*>(ctx);
        v->insert(v->end(), (const uint8_t*)data, (const uint8_t*)data + size);
    };
    REQUIRE(stbi_write_jpg_to_func(sink, &out, w, h, 3, px.data(), quality));
    return out;
}

bool is_png(const std::vector<uint8_t>& b) { return b.size() > 8 && b[0] == 0x89 && b[1] == 'P' && b[2] == 'N'; }
bool is_jpeg(const std::vector<uint8_t>& b) {
    return b.size() > 4 && b[0] == 0xFF && b[1] == 0xD8 && b[b.size() - 2] == 0xFF && b[b.size() - 1] == 0xD9;
}
}  // namespace

TEST_CASE("kiln generate -o NAME.jpg writes JPEG: the PNG's pixels, the settings as comments",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_img");
    const std::string base = "--class-labels 3 --steps 2 --upscale 2 ";
    std::string err;
    REQUIRE(generate(tmp, base + "-o " + (tmp / "a.png"), &err) == 0);
    for (auto [name, quality] : {std::pair<std::string, int>{"a.jpg", 95}, {"a.JPEG", 60}}) {
        INFO(name << "\n" << err);
        REQUIRE(generate(tmp, base + "--quality " + std::to_string(quality) + " -o " + (tmp / name), &err) == 0);
        const std::vector<uint8_t> jpg = bytes(tmp / name);
        REQUIRE(is_jpeg(jpg));
        std::vector<std::string> comments;
        const std::vector<uint8_t> body = strip_comments(jpg, &comments);
        CHECK(std::find(comments.begin(), comments.end(), "Software: kiln") != comments.end());
        bool settings = false;
        for (auto& c : comments)
            settings |= c.rfind("kiln:settings: ", 0) == 0 && c.find("seed=0") != std::string::npos;
        CHECK(settings);
        // The same 8-bit pixels as the PNG, through the same encoder at the same quality.
        int w = 0, h = 0, c = 0;
        stbi_uc* px = stbi_load((tmp / "a.png").c_str(), &w, &h, &c, 3);
        REQUIRE(px);
        CHECK(w == 64);
        CHECK(h == 64);
        const std::vector<uint8_t> pixels(px, px + (size_t)w * h * 3);
        stbi_image_free(px);
        CHECK(body == encode_jpeg(pixels, w, h, quality));
        // And a decoder reads it at the image's size.
        CHECK(stbi_info_from_memory(jpg.data(), (int)jpg.size(), &w, &h, &c));
        CHECK(w == 64);
        CHECK(h == 64);
    }
    // Several images keep the extension as written; the grid is one JPEG.
    REQUIRE(generate(tmp, "--class-labels 1,7 --steps 1 -o " + (tmp / "m.JPG"), &err) == 0);
    CHECK(is_jpeg(bytes(tmp / "m-0.JPG")));
    CHECK(is_jpeg(bytes(tmp / "m-1.JPG")));
    CHECK(!fs::exists(tmp / "m.JPG"));
    REQUIRE(generate(tmp, "--class-labels 1,7 --steps 1 --grid -o " + (tmp / "g.jpeg"), &err) == 0);
    CHECK(is_jpeg(bytes(tmp / "g.jpeg")));
    // Any other extension: PNG, with a warning that names it.
    REQUIRE(generate(tmp, "--steps 1 -o " + (tmp / "b.webp"), &err) == 0);
    CHECK(err.find("kiln: warning: -o " + (tmp / "b.webp") + ": '.webp' is not .png, .jpg or .jpeg; writing PNG") !=
          std::string::npos);
    CHECK(is_png(bytes(tmp / "b.webp")));
    // No extension: PNG, as before, without a warning.
    REQUIRE(generate(tmp, "--steps 1 -o " + (tmp / "plain"), &err) == 0);
    CHECK(err.find("warning") == std::string::npos);
    CHECK(is_png(bytes(tmp / "plain")));
}

TEST_CASE("kiln generate -o - writes the PNG to standard output, byte for byte the file's",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_img");
    std::string err;
    REQUIRE(generate(tmp, "--class-labels 3 --steps 2 -o " + (tmp / "a.png"), &err) == 0);
    REQUIRE(generate(tmp, "--class-labels 3 --steps 2 -o - > " + (tmp / "stdout.png"), &err) == 0);
    INFO(err);
    CHECK(err.find("wrote the PNG to standard output") != std::string::npos);
    CHECK(bytes(tmp / "stdout.png") == bytes(tmp / "a.png"));  // the settings name no output path
    // Several images need --grid; stopped before generating, with nothing on standard output.
    CHECK(generate(tmp, "--class-labels 1,7 --steps 2 -o - > " + (tmp / "two.png"), &err) == 1);
    CHECK(err.find("kiln: error: -o -: 2 images do not fit one standard output (add --grid)") != std::string::npos);
    CHECK(err.find("denoise") == std::string::npos);
    CHECK(bytes(tmp / "two.png").empty());
    REQUIRE(generate(tmp, "--class-labels 1 --images 2 --grid --steps 2 -o - > " + (tmp / "grid.png"), &err) == 0);
    CHECK(is_png(bytes(tmp / "grid.png")));
}

TEST_CASE("kiln generate --quality and --upscale out of range stop before the model is read", "[apps][generate]") {
    Tmp tmp("kiln_img");
    for (auto [args, needle] : {std::pair<std::string, std::string>{"--quality 0", "--quality 0 (1..100)"},
                                {"--quality 101", "--quality 101 (1..100)"},
                                {"--upscale 0", "--upscale 0 (1..64)"},
                                {"--upscale 65", "--upscale 65 (1..64)"}}) {
        std::string err;
        INFO(args << "\n" << err);
        CHECK(generate(tmp, args + " --model " + (tmp / "absent.kiln") + " -o " + (tmp / "x.jpg"), &err) == 1);
        CHECK(err.find("kiln: error: " + needle) != std::string::npos);
        CHECK(err.find("absent.kiln") == std::string::npos);  // the model was not looked at
        CHECK(!fs::exists(tmp / "x.jpg"));
    }
}
