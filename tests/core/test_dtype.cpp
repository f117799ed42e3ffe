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
    CHECK_THROWS_AS(parse_dtype("q7_k", "--dtype"), Error);  // q4_k etc. are quantized dtypes (test_quant.cpp)
}

namespace {
// The fp8 value of byte b from its fields, in double: (-1)^s (e == 0 ? m / 2^mb 2^(1 - bias)
// : (1 + m / 2^mb) 2^(e - bias)); e4m3fn: 4 exponent bits, 3 mantissa, bias 7, S.1111.111 NaN, no inf;
// e5m2: 5 / 2, bias 15, e = 31 is inf (m = 0) or NaN.
double fp8_value(uint8_t b, bool e4m3) {
    const int mb = e4m3 ? 3 : 2, eb = e4m3 ? 4 : 5, bias = e4m3 ? 7 : 15;
    const int s = b >> 7, e = (b >> mb) & ((1 << eb) - 1), m = b & ((1 << mb) - 1);
    const double sign = s ? -1.0 : 1.0;
    if (e4m3 && e == 15 && m == 7) return NAN;
    if (!e4m3 && e == 31) return m ? NAN : sign * INFINITY;
    const double frac = (double)m / (double)(1 << mb);
    return sign * (e == 0 ? frac * std::pow(2.0, 1 - bias) : (1 + frac) * std::pow(2.0, e - bias));
}
}  // namespace

TEST_CASE("fp8 e4m3fn and e5m2: all 256 bytes convert exactly to f32 and f16", "[core]") {
    for (DType t : {DType::f8_e4m3, DType::f8_e5m2}) {
        CAPTURE(dtype_name(t));
        const bool e4m3 = t == DType::f8_e4m3;
        CHECK(dtype_size(t) == 1);
        CHECK(parse_dtype(e4m3 ? "F8_E4M3" : "float8_e5m2") == t);
        std::vector<uint8_t> all(256);
        for (int b = 0; b < 256; ++b) all[(size_t)b] = (uint8_t)b;
        std::vector<float> f(256);
        std::vector<uint16_t> h(256);
        convert(all.data(), t, f.data(), DType::f32, 256);
        convert(all.data(), t, h.data(), DType::f16, 256);
        int nans = 0;
        for (int b = 0; b < 256; ++b) {
            CAPTURE(b);
            const double want = fp8_value((uint8_t)b, e4m3);
            if (std::isnan(want)) {
                ++nans;
                CHECK(std::isnan(f[(size_t)b]));
                CHECK(std::isnan(f16_to_f32(h[(size_t)b])));
            } else {
                CHECK((double)f[(size_t)b] == want);  // exact: every fp8 value is an f32 and an f16
                CHECK((double)f16_to_f32(h[(size_t)b]) == want);
                CHECK(std::signbit(f[(size_t)b]) == (b >= 128));  // -0 stays -0
            }
        }
        CHECK(nans == (e4m3 ? 2 : 6));  // e4m3fn: +-1111.111; e5m2: +-11111.{01,10,11}
    }
    CHECK(f8_e4m3_to_f32(0x7e) == 448.f);                // e4m3fn's largest finite
    CHECK(f8_e4m3_to_f32(0x01) == std::ldexp(1.f, -9));  // smallest subnormal
    CHECK(f8_e5m2_to_f32(0x7b) == 57344.f);              // e5m2's largest finite
    CHECK(std::isinf(f8_e5m2_to_f32(0xfc)));
    std::vector<float> x(4, 1.f);
    std::vector<uint8_t> q(4);
    CHECK_THROWS_WITH(convert(x.data(), DType::f32, q.data(), DType::f8_e4m3, 4), Catch::Contains("fp8"));
}
