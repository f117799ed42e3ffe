#include "runtime/core/torch_rng.h"

#include <cmath>

#include "runtime/core/error.h"

namespace kiln {

namespace {
constexpr double kPi = 3.14159265358979323846;

// transformation::uniform_real: the low `digits` bits of a draw, scaled to [0, 1).
float uniform_float(uint32_t v) { return (float)(v & ((1u << 24) - 1)) * (1.0f / (float)(1u << 24)); }
double uniform_double(uint64_t v) {
    return (double)(v & ((uint64_t{1} << 53) - 1)) * (1.0 / (double)(uint64_t{1} << 53));
}
}  // namespace

TorchCpuGenerator::TorchCpuGenerator(uint64_t seed) : engine_((uint32_t)(seed & 0xffffffffu)) {}

uint32_t TorchCpuGenerator::random() { return (uint32_t)engine_(); }

uint64_t TorchCpuGenerator::random64() {
    const uint64_t hi = random(), lo = random();
    return (hi << 32) | lo;
}

void TorchCpuGenerator::rand(float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = uniform_float(random());
}

void TorchCpuGenerator::randn(float* out, int64_t n) { randn(out, n, DType::f32); }

void TorchCpuGenerator::randn(float* out, int64_t n, DType dt) {
    KILN_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16, "torch.randn: dtype ", dtype_name(dt),
               " (f32, f16 or bf16)");
    // R: a float stored as the dtype (c10::Half / c10::BFloat16 round to nearest even). digits: the uniform's bits.
    auto R = [dt](float v) {
        if (dt == DType::f16) return f16_to_f32(f32_to_f16(v));
        if (dt == DType::bf16) return bf16_to_f32(f32_to_bf16(v));
        return v;
    };
    const int digits = dt == DType::f32 ? 24 : dt == DType::f16 ? 11 : 8;
    auto uniform = [&] { return (float)(random() & ((1u << digits) - 1)) * (1.0f / (float)(1u << digits)); };
    if (n < 16) {  // normal_distribution<double>, one value per element, the pair's second value cached
        for (int64_t i = 0; i < n; ++i) {
            double v;
            if (next_double_normal_) {
                v = *next_double_normal_ * 1.0 + 0.0;
                next_double_normal_.reset();
            } else {
                const double u1 = uniform_double(random64());
                const double u2 = uniform_double(random64());
                const double r = std::sqrt(-2.0 * std::log1p(-u2));
                const double theta = 2.0 * kPi * u1;
                next_double_normal_ = r * std::sin(theta);
                v = r * std::cos(theta) * 1.0 + 0.0;
            }
            out[i] = R((float)v);  // static_cast<scalar_t>(double): through float
        }
        return;
    }
    // normal_fill: all uniforms first, then blocks of 16 in place (value j with value j + 8).
    auto fill_16 = [&](float* d) {
        for (int j = 0; j < 8; ++j) {
            if (dt == DType::f32) {
                const float u1 = 1 - d[j];  // [0, 1) -> (0, 1] for the log
                const float u2 = d[j + 8];
                const float radius = std::sqrt(-2 * std::log(u1));
                const float theta = (float)(2.0f * kPi * u2);   // computed in double, stored as float
                d[j] = radius * std::cos(theta) * 1.0f + 0.0f;  // * std + mean, as torch.randn's (1, 0)
                d[j + 8] = radius * std::sin(theta) * 1.0f + 0.0f;
                continue;
            }
            // The same expressions in c10::Half / c10::BFloat16: each operation's result rounded to the dtype.
            const float u1 = R(1.0f - d[j]);
            const float u2 = d[j + 8];
            const float radius = R(std::sqrt(R(-2.0f * R(std::log(u1)))));
            const float theta = R((float)(2.0f * kPi * (double)u2));  // double, then float, then the dtype
            d[j] = R(R(R(radius * R(std::cos(theta))) * 1.0f) + 0.0f);
            d[j + 8] = R(R(R(radius * R(std::sin(theta))) * 1.0f) + 0.0f);
        }
    };
    for (int64_t i = 0; i < n; ++i) out[i] = uniform();
    for (int64_t i = 0; i + 16 <= n; i += 16) fill_16(out + i);
    if (n % 16 != 0) {  // the last 16 values drawn again and transformed again
        for (int64_t i = n - 16; i < n; ++i) out[i] = uniform();
        fill_16(out + n - 16);
    }
}

}  // namespace kiln
