#pragma once
// PyTorch's CPU random number generator, reproduced so that a seed gives the initial noise diffusers draws with
// generator=torch.manual_seed(seed) (or torch.Generator("cpu").manual_seed(seed)): the same MT19937 stream, the same
// uniform and normal transforms, the same order of draws.
#include <cstdint>
#include <optional>
#include <random>

#include "runtime/core/dtype.h"

namespace kiln {

class TorchCpuGenerator {
public:
    // torch.manual_seed(seed): the engine is seeded with the low 32 bits, as at::mt19937 does.
    explicit TorchCpuGenerator(uint64_t seed);

    uint32_t random();    // CPUGeneratorImpl::random: one engine draw
    uint64_t random64();  // CPUGeneratorImpl::random64: two draws, the first in the high half

    // torch.rand(n) in float32: each value (draw & (2^24 - 1)) / 2^24.
    void rand(float* out, int64_t n);
    // torch.randn(n) in float32, contiguous. n >= 16: every value drawn as a float uniform first, then Box-Muller
    // over blocks of 16 (value j with value j + 8), the last block redrawn when n is not a multiple of 16
    // (normal_fill). n < 16: one double Box-Muller pair per two values, the second cached in the generator
    // (normal_distribution<double>).
    //
    // PyTorch on x86 with AVX2 computes the n >= 16 case with vectorised log/sin/cos (avx_mathfun): those differ
    // from the scalar libm functions used here (PyTorch's path on every other CPU) in the last bits of some
    // values, a few ulps at most.
    void randn(float* out, int64_t n);
    // torch.randn(n, dtype=float16 / bfloat16): `dt` f32, f16 or bf16; the values are written as f32 (exact). In
    // half precision PyTorch draws uniforms of 11 (f16) or 8 (bf16) bits and rounds every operation of the
    // Box-Muller transform to the dtype (c10::Half / c10::BFloat16 arithmetic, std::log/sqrt/sin/cos of them
    // returning the dtype); n < 16 rounds the double pair's values to the dtype.
    void randn(float* out, int64_t n, DType dt);

private:
    std::mt19937 engine_;
    std::optional<double> next_double_normal_;
};

}  // namespace kiln
