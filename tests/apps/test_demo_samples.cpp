// The README's first command draws diffusers' own samples: `kiln generate --seed S` on the built-in dit-digits
// model gives the images DiTPipeline gives with generator=torch.manual_seed(S) (class labels 0..9, 25 steps,
// guidance 4, the saved DPM-Solver++ scheduler). The reference is the model's samples.png, made by diffusers
// (models/default/README.md), kept at its native scale in tests/data/demo/dit_digits_samples.png: 4 rows (seeds
// 0..3) of 10 images of 32x32, 2-pixel grey borders.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/core/safetensors.h"
#include "runtime/core/torch_rng.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;

TEST_CASE("kiln generate --seed S on the built-in model draws diffusers' samples for torch.manual_seed(S)",
          "[apps][generate][vulkan]") {
    int w = 0, h = 0, c = 0;
    const std::string ref_path = test::data_path("demo/dit_digits_samples.png");
    unsigned char* ref = stbi_load(ref_path.c_str(), &w, &h, &c, 3);
    INFO(ref_path);
    REQUIRE(ref);
    std::vector<uint8_t> grid(ref, ref + (size_t)w * h * 3);
    stbi_image_free(ref);
    REQUIRE((w == 10 * 34 + 2 && h == 4 * 34 + 2));
    test::TempDir tmp("kiln_demo");
    for (int seed = 0; seed < 4; ++seed) {
        const std::string dump = tmp / ("seed" + std::to_string(seed) + ".safetensors");
        const std::string cmd = kiln::test::cli_binary("kiln") +
                                " generate --class-labels 0,1,2,3,4,5,6,7,8,9 --seed " + std::to_string(seed) +
                                " --dump " + dump + " -o " + (tmp / "out.png") + " 2>/dev/null";
        REQUIRE(std::system(cmd.c_str()) == 0);
        const Tensor img = SafeTensors::open(dump).read("image");  // NHWC in [0, 1], as output_type="np"
        REQUIRE(img.shape == Shape{10, 32, 32, 3});
        const float* p = img.data<float>();
        // diffusers' row: (images * 255 + 0.5).astype(uint8). Both sides compute in f32 (the fp16 weights
        // upcast), in different summation orders, and PyTorch's AVX2 noise differs from the scalar one in the
        // last bits: values a few f32 ulps apart, which can fall on either side of a rounding boundary. So one
        // level, no more; another noise would differ by tens to hundreds of levels.
        int worst = 0, off = 0;
        for (int n = 0; n < 10; ++n)
            for (int y = 0; y < 32; ++y)
                for (int x = 0; x < 32; ++x)
                    for (int ch = 0; ch < 3; ++ch) {
                        const int mine = (int)(p[((n * 32 + y) * 32 + x) * 3 + ch] * 255.0f + 0.5f);
                        const size_t at = ((size_t)(2 + seed * 34 + y) * w + (size_t)(2 + n * 34 + x)) * 3 + ch;
                        const int d = std::abs(mine - (int)grid[at]);
                        worst = std::max(worst, d);
                        off += d != 0;
                    }
        INFO("seed " << seed << ": " << off << " of 30720 values differ");
        CHECK(worst <= 1);
    }
}

TEST_CASE("kiln generate --noise-dtype: the seed's noise as torch.randn draws it in that dtype",
          "[apps][generate][vulkan]") {
    test::TempDir tmp("kiln_demo");
    auto run = [&](const std::string& args, const std::string& name) {
        const std::string dump = tmp / (name + ".safetensors");
        const std::string cmd = kiln::test::cli_binary("kiln") + " generate --class-labels 3,7 --steps 2 --grid " +
                                args + " --dump " + dump + " -o " + (tmp / (name + ".png")) + " 2>" + (tmp / "err.txt");
        return std::system(cmd.c_str()) == 0 ? SafeTensors::open(dump).read("latents_init") : Tensor();
    };
    const Tensor f32 = run("--seed 5", "f32"), f16 = run("--seed 5 --noise-dtype f16", "f16"),
                 bf16 = run("--seed 5 --noise-dtype bf16", "bf16");
    REQUIRE(f32.shape == Shape{2, 4, 8, 8});
    REQUIRE((f16.shape == f32.shape && bf16.shape == f32.shape));
    // The dumped noise is the generator's, in NCHW order over the whole batch.
    std::vector<float> want(f32.numel());
    TorchCpuGenerator(5).randn(want.data(), (int64_t)want.size(), DType::f32);
    CHECK(std::equal(want.begin(), want.end(), f32.data<float>()));
    TorchCpuGenerator(5).randn(want.data(), (int64_t)want.size(), DType::f16);
    CHECK(std::equal(want.begin(), want.end(), f16.data<float>()));
    TorchCpuGenerator(5).randn(want.data(), (int64_t)want.size(), DType::bf16);
    CHECK(std::equal(want.begin(), want.end(), bf16.data<float>()));
    CHECK(f16.bytes != f32.bytes);
    CHECK(bf16.bytes != f16.bytes);
    std::ifstream png(tmp / "f16.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("noise_dtype=f16") != std::string::npos);
    CHECK(run("--noise-dtype f64", "bad").bytes.empty());
    std::ifstream err(tmp / "err.txt");
    CHECK(std::string(std::istreambuf_iterator<char>(err), {}).find("--noise-dtype") != std::string::npos);
}
