#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

using namespace kiln;

TEST_CASE("f16 conversion is exact on representable values and rounds to nearest even", "[core]") {
    for (float f : {0.f, -0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.960464477539063e-08f})
        CHECK(f16_to_f32(f32_to_f16(f)) == f);
    CHECK(f32_to_f16(1.0f + 1.0f / 2048) == f32_to_f16(1.0f));                // tie -> even
    CHECK(f32_to_f16(1.0f + 3.0f / 2048) == f32_to_f16(1.0f + 2.0f / 1024));  // tie -> even (up)
    CHECK(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
    CHECK(std::isnan(f16_to_f32(f32_to_f16(NAN))));
    // every f16 bit pattern round-trips through f32
    for (uint32_t h = 0; h < 65536; ++h) {
        uint16_t b = (uint16_t)h;
        float f = f16_to_f32(b);
        if (!std::isnan(f)) REQUIRE(f32_to_f16(f) == b);
    }
}

TEST_CASE("bf16 conversion keeps the top bits and rounds to nearest even", "[core]") {
    CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
    CHECK(bf16_to_f32(f32_to_bf16(3.140625f)) == 3.140625f);
    CHECK(f32_to_bf16(1.0f + 1.0f / 256) == f32_to_bf16(1.0f));  // tie -> even
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST_CASE("parse_dtype names the bad dtype", "[core]") {
    CHECK(parse_dtype("F16") == DType::f16);
    CHECK(parse_dtype("bfloat16") == DType::bf16);
    CHECK_THROWS_AS(parse_dtype("q3_k", "--dtype"), Error);  // q4_k etc. are quantized dtypes (test_quant.cpp)
}
