#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

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

namespace {
// The f16 nearest to f by its definition, independent of f32_to_f16's bit tricks: f16 values grow with their bit
// patterns (0 .. 0x7bff), so binary-search the largest value <= |f| and pick the nearer neighbour in double (f,
// both neighbours and their midpoint are exact there), ties to the even pattern; from 65520 (the midpoint of
// 65504 and 2^16, whose tie goes to the even 0x7c00) on: inf. NaN: the quiet NaN 0x7e00.
uint16_t nearest_f16(float f) {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isnan(f)) return sign | 0x7e00;
    const double a = std::fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff;  // v(lo) <= a; find the largest
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) / 2;
        if ((double)f16_to_f32((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7bff) return sign | (uint16_t)(a - 65504.0 < 65536.0 - a ? 0x7bff : 0x7c00);
    const double d0 = a - f16_to_f32((uint16_t)lo), d1 = (double)f16_to_f32((uint16_t)(lo + 1)) - a;
    return sign | (uint16_t)(d0 < d1 || (d0 == d1 && lo % 2 == 0) ? lo : lo + 1);
}
float bits_f32(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
}  // namespace

// Every float whose 13 dropped bits (f16 normals) are a tie or a neighbour of one, for every exponent, sign and kept
// mantissa; every float in f16's subnormal range at a stride (their ties fall on other bits); and a stride over all
// 2^32 patterns. [.exhaustive] checks all 2^32 (about a minute; run by hand when f32_to_f16 changes).
TEST_CASE("f32 to f16 rounds as the nearest f16 by definition", "[core]") {
    uint64_t n = 0;
    const auto check = [&n](uint32_t b) {
        const float f = bits_f32(b);
        const uint16_t got = f32_to_f16(f), want = nearest_f16(f);
        if (got != want) FAIL_CHECK("f32 bits 0x" << std::hex << b << ": f16 0x" << got << ", nearest 0x" << want);
        ++n;
    };
    for (uint32_t s = 0; s < 2; ++s)
        for (uint32_t e = 0; e < 256; ++e)
            for (uint32_t m = 0; m < 1024; ++m)
                for (uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu})
                    check(s << 31 | e << 23 | m << 13 | low);
    for (uint32_t b = 0x33000000u; b < 0x38800000u; b += 61) check(b), check(b | 0x80000000u);  // 2^-25 .. 2^-14
    for (uint64_t b = 0; b < (1ull << 32); b += 4099) check((uint32_t)b);
    CHECK(n > 4000000);
}

TEST_CASE("f32 to f16 on every float", "[core][.exhaustive]") {
    uint64_t bad = 0;
    for (uint64_t b = 0; b < (1ull << 32); ++b) {
        const float f = bits_f32((uint32_t)b);
        if (f32_to_f16(f) != nearest_f16(f)) ++bad;
    }
    CHECK(bad == 0);
}

TEST_CASE("convert's fast pairs give convert's element-wise bits", "[core]") {
    std::vector<float> x;
    for (uint64_t b = 0; b < (1ull << 32); b += 65537) x.push_back(bits_f32((uint32_t)b));
    std::vector<uint16_t> h(x.size()), bf(x.size()), h2(x.size()), bf2(x.size());
    std::vector<float> back(x.size());
    convert(x.data(), DType::f32, h.data(), DType::f16, x.size());
    convert(x.data(), DType::f32, bf.data(), DType::bf16, x.size());
    convert(bf.data(), DType::bf16, h2.data(), DType::f16, x.size());
    convert(h.data(), DType::f16, bf2.data(), DType::bf16, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        REQUIRE(h[i] == f32_to_f16(x[i]));
        REQUIRE(bf[i] == f32_to_bf16(x[i]));
        REQUIRE(h2[i] == f32_to_f16(bf16_to_f32(bf[i])));
        REQUIRE(bf2[i] == f32_to_bf16(f16_to_f32(h[i])));
    }
    convert(h.data(), DType::f16, back.data(), DType::f32, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const float want = f16_to_f32(h[i]);
        REQUIRE(std::memcmp(&back[i], &want, 4) == 0);
    }
    convert(bf.data(), DType::bf16, back.data(), DType::f32, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const float want = bf16_to_f32(bf[i]);
        REQUIRE(std::memcmp(&back[i], &want, 4) == 0);
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
