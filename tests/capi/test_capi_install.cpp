// The installed package: `cmake --install` into a temporary prefix, apps/examples built against it as a separate
// project (find_package(Kiln) shared and static, and pkg-config), run on dit-digits; their PPMs must equal the
// images this process generates through the same API.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/capi/capi_test.h"

using namespace kiln::capi_test;
namespace fs = std::filesystem;

namespace {
struct Ppm {
    int w = 0, h = 0;
    std::vector<uint8_t> rgb;
};
Ppm read_ppm(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    REQUIRE(f);
    std::string magic;
    Ppm im;
    int maxv = 0;
    f >> magic >> im.w >> im.h >> maxv;
    REQUIRE(magic == "P6");
    REQUIRE(maxv == 255);
    f.get();  // the one whitespace byte before the pixels
    im.rgb.resize((size_t)im.w * im.h * 3);
    f.read(reinterpret_cast<char*>(im.rgb.data()), (std::streamsize)im.rgb.size());
    REQUIRE(f.gcount() == (std::streamsize)im.rgb.size());
    f.get();
    CHECK(f.eof());  // nothing after the pixels
    return im;
}
}  // namespace

TEST_CASE("C API: the installed package builds and runs apps/examples/digits.c", "[capi][install][vulkan]") {
    struct Tmp {
        fs::path path = fs::temp_directory_path() / ("kiln_install_" + std::to_string(::getpid()));
        Tmp() { fs::create_directories(path); }
        ~Tmp() {
            std::error_code ec;
            fs::remove_all(path, ec);
        }
    } t;
    const fs::path& tmp = t.path;
    const std::string cmd = std::string("sh ") + KILN_SOURCE_DIR + "/tests/capi/install_check.sh " + KILN_BUILD_DIR +
                            " " + KILN_SOURCE_DIR + " " + digits_model() + " " + tmp.string() + " 2>&1";
    INFO(cmd);
    REQUIRE(std::system(cmd.c_str()) == 0);

    // What digits.c draws: labels 0..9, seed 7, the pipeline's defaults, RGBA8 -> RGB side by side.
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    std::vector<uint8_t> px;
    REQUIRE(generate_digits(m.get(), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 7, &px, 0) == KILN_OK);
    for (const char* kind : {"shared", "static", "pc"}) {
        INFO(kind);
        Ppm im = read_ppm(tmp / ("digits-" + std::string(kind) + ".ppm"));
        REQUIRE(im.w == 320);
        REQUIRE(im.h == 32);
        long diff = 0;
        for (int y = 0; y < 32; ++y)
            for (int x = 0; x < 320; ++x)
                for (int c = 0; c < 3; ++c)
                    diff += std::abs((int)im.rgb[((size_t)y * 320 + x) * 3 + c] -
                                     (int)px[(((size_t)(x / 32) * 32 + y) * 32 + x % 32) * 4 + c]);
        CHECK(diff == 0);
    }
}
