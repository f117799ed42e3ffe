#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/torch_rng.h"

using namespace kiln;

// Values PyTorch prints, to the 4 decimals it prints (torch.manual_seed(0), then torch.rand / torch.randn). The
// n >= 16 path (normal_fill, every latent tensor) is checked end to end against diffusers' own samples of the
// built-in model: tests/models/test_demo_samples.cpp.
TEST_CASE("TorchCpuGenerator draws what torch.manual_seed(0) draws", "[core]") {
    SECTION("torch.rand(2, 3)") {  // uniform floats: the engine stream and the 24-bit transform
        std::vector<float> u(6);
        TorchCpuGenerator(0).rand(u.data(), 6);
        const float want[6] = {0.4963f, 0.7682f, 0.0885f, 0.1320f, 0.3074f, 0.6341f};
        for (int i = 0; i < 6; ++i) CHECK(u[i] == Approx(want[i]).margin(5e-5));
    }
    SECTION("torch.randn(2, 3)") {  // n < 16: double Box-Muller pairs from 53-bit uniforms, the second cached
        std::vector<float> z(6);
        TorchCpuGenerator(0).randn(z.data(), 6);
        const float want[6] = {1.5410f, -0.2934f, -2.1788f, 0.5684f, -1.0845f, -1.3986f};
        for (int i = 0; i < 6; ++i) CHECK(z[i] == Approx(want[i]).margin(5e-5));
    }
    SECTION("the seed's high 32 bits are dropped, as at::mt19937 does") {
        CHECK(TorchCpuGenerator(0x100000000ull).random() == TorchCpuGenerator(0).random());
        CHECK(TorchCpuGenerator(1).random() != TorchCpuGenerator(0).random());
    }
}

TEST_CASE("TorchCpuGenerator::randn over 16 values: the last block drawn again when n is not a multiple of 16",
          "[core]") {
    std::vector<float> a(16), b(20);
    TorchCpuGenerator(7).randn(a.data(), 16);
    TorchCpuGenerator(7).randn(b.data(), 20);
    // Values 0..3 come from the first block of 16 draws in both; 4..19 of b from 16 fresh draws (20..35).
    for (int i = 0; i < 4; ++i) CHECK(b[i] == a[i]);
    for (int i = 4; i < 16; ++i) CHECK(b[i] != a[i]);
    double sum = 0, sq = 0;  // and it is a standard normal
    std::vector<float> big(1 << 16);
    TorchCpuGenerator(1).randn(big.data(), (int64_t)big.size());
    for (float v : big) sum += v, sq += (double)v * v;
    const double mean = sum / big.size(), var = sq / big.size() - mean * mean;
    CHECK(std::abs(mean) < 0.02);  // 5 sigma of the mean of 65536 draws is 0.0195
    CHECK(var == Approx(1.0).margin(0.03));
}

TEST_CASE("TorchCpuGenerator::randn in f16 and bf16: the dtype's uniforms and rounding, other noise than f32",
          "[core]") {
    // PyTorch draws half-precision noise from 11-bit (f16) or 8-bit (bf16) uniforms and rounds each operation of
    // the transform to the dtype. Not checked against PyTorch's output here (no PyTorch in this build); checked:
    // every value is one of the dtype, the first uniforms are the low bits of the same engine draws, and the
    // values are a standard normal.
    const int64_t n = 1 << 14;
    std::vector<float> f32(n), f16(n), bf16(n);
    TorchCpuGenerator(0).randn(f32.data(), n, DType::f32);
    TorchCpuGenerator(0).randn(f16.data(), n, DType::f16);
    TorchCpuGenerator(0).randn(bf16.data(), n, DType::bf16);
    int same16 = 0, sameb = 0;
    for (int64_t i = 0; i < n; ++i) {
        CHECK(f16_to_f32(f32_to_f16(f16[i])) == f16[i]);
        CHECK(bf16_to_f32(f32_to_bf16(bf16[i])) == bf16[i]);
        same16 += f16[i] == f32[i], sameb += bf16[i] == f32[i];
    }
    CHECK(same16 < n / 100);
    CHECK(sameb < n / 100);
    for (const auto* v : {&f16, &bf16}) {
        double sum = 0, sq = 0;
        for (float x : *v) sum += x, sq += (double)x * x;
        const double mean = sum / n;
        CHECK(std::abs(mean) < 0.04);  // 5 sigma of the mean of 16384 draws
        CHECK(sq / n - mean * mean == Approx(1.0).margin(0.06));
    }
    // Value 0 from the first and ninth draws (j = 0 pairs with j + 8), as f16: u1 = 1 - (d0 & 2047) / 2048.
    TorchCpuGenerator g(0);
    uint32_t d[9];
    for (auto& x : d) x = g.random();
    const float u1 = 1.0f - (float)(d[0] & 2047) / 2048.0f, u2 = (float)(d[8] & 2047) / 2048.0f;
    auto h = [](float x) { return f16_to_f32(f32_to_f16(x)); };
    const float radius = h(std::sqrt(h(-2.0f * h(std::log(u1)))));
    const float theta = h((float)(2.0f * 3.14159265358979323846 * (double)u2));
    CHECK(f16[0] == h(radius * h(std::cos(theta))));
    CHECK_THROWS_WITH(TorchCpuGenerator(0).randn(f16.data(), 16, DType::i32), Catch::Contains("f32, f16 or bf16"));
}
