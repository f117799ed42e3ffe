// ggml block formats: hand-built blocks decode to the values ggml's layout defines, and quantize ->
// dequantize stays within each format's step (bounds derived per block below). Scales are f16: rounded
// to nearest they move by fq(d) = max(2^-11 d, 2^-25) (the subnormal grid is 2^-24), which a code of
// magnitude qmax turns into qmax fq(d); k-quant super-scales round up, by at most up(d) - d. amax 2^-20
// covers f32 rounding.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/quant.h"
#include "runtime/core/tensor.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
const DType kQuant[] = {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                        DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k};

void put16(std::vector<uint8_t>& b, size_t at, float v) {
    uint16_t h = f32_to_f16(v);
    std::memcpy(&b[at], &h, 2);
}
std::vector<float> deq(const std::vector<uint8_t>& b, DType t) {
    std::vector<float> y((size_t)dtype_block(t));
    dequantize(b.data(), t, y.data(), y.size());
    return y;
}

double fq(double d) { return std::max(d * std::ldexp(1.0, -11), std::ldexp(1.0, -25)); }
double up(double d) { return d + std::max(d * std::ldexp(1.0, -10), std::ldexp(1.0, -24)); }

// Largest |x - y| allowed for block [x, x + n) of format t (see the header comment of quant.cpp).
double bound(const float* x, DType t) {
    auto amax_of = [](const float* p, int n) {
        double a = 0;
        for (int i = 0; i < n; ++i) a = std::max(a, (double)std::fabs(p[i]));
        return a;
    };
    auto range_of = [](const float* p, int n, bool with_zero, double* lo_out) {
        double lo = with_zero ? 0 : p[0], hi = p[0];
        for (int i = 0; i < n; ++i) lo = std::min(lo, (double)p[i]), hi = std::max(hi, (double)p[i]);
        if (lo_out) *lo_out = lo;
        return hi - lo;
    };
    const double a = amax_of(x, 32), eps = a * std::ldexp(1.0, -20);
    switch (t) {
        case DType::q8_0:  // d = amax / 127, codes round to nearest
            return 0.5 * a / 127 + 127 * fq(a / 127) + eps;
        case DType::q4_0:  // d = amax / 8; the far extreme may clamp from +8 to +7: one step
        case DType::q5_0: {
            const double h = t == DType::q4_0 ? 8 : 16;
            return a / h + h * fq(a / h) + eps;
        }
        case DType::q4_1:  // d = range / (2^b - 1), m = min
        case DType::q5_1: {
            double lo, r = range_of(x, 32, false, &lo);
            const double qm = t == DType::q4_1 ? 15 : 31;
            return 0.5 * r / qm + qm * fq(r / qm) + fq(std::fabs(lo)) + eps;
        }
        default:
            return 0;
    }
}
}  // namespace

TEST_CASE("quantized dtypes: names, block sizes, GGUF-compatible byte counts", "[core][quant]") {
    const int64_t blocks[] = {32, 32, 32, 32, 32, 256, 256, 256, 256, 256};
    const size_t bytes[] = {34, 18, 20, 22, 24, 84, 110, 144, 176, 210};  // ggml's sizeof(block_*)
    for (size_t i = 0; i < 10; ++i) {
        DType t = kQuant[i];
        CHECK(dtype_is_quant(t));
        CHECK(parse_dtype(dtype_name(t)) == t);
        CHECK(dtype_block(t) == blocks[i]);
        CHECK(dtype_block_bytes(t) == bytes[i]);
        CHECK(dtype_nbytes(t, 4 * blocks[i]) == 4 * bytes[i]);
        CHECK_THROWS_WITH(dtype_nbytes(t, blocks[i] + 1), Catch::Contains("whole number"));
        CHECK_THROWS_WITH(dtype_size(t), Catch::Contains("block-quantized"));
    }
    CHECK(!dtype_is_quant(DType::f16));
    CHECK(!dtype_is_quant(DType::f8_e4m3));
    CHECK(!dtype_is_quant(DType::f8_e5m2));
    CHECK(parse_dtype("Q4_K") == DType::q4_k);
    CHECK(parse_dtype("Q3_K") == DType::q3_k);
    CHECK_THROWS_WITH(parse_dtype("q7_k"), Catch::Contains("q6_k"));
}

TEST_CASE("hand-built ggml blocks decode as ggml's layout defines", "[core][quant]") {
    {  // q8_0: f16 d, i8 q[32]
        std::vector<uint8_t> b(34, 0);
        put16(b, 0, 0.5f);
        b[2 + 3] = (uint8_t)(int8_t)-3;
        auto y = deq(b, DType::q8_0);
        CHECK(y[3] == -1.5f);
        CHECK(y[0] == 0.f);
    }
    {  // q4_0: qs[j] holds values j (low nibble) and j + 16 (high nibble), offset 8
        std::vector<uint8_t> b(18, 0x88);
        put16(b, 0, 2.f);
        b[2 + 0] = 0x9f;
        auto y = deq(b, DType::q4_0);
        CHECK(y[0] == 14.f);  // (15 - 8) * 2
        CHECK(y[16] == 2.f);  // (9 - 8) * 2
        CHECK(y[5] == 0.f);
    }
    {  // q4_1: d, m, qs
        std::vector<uint8_t> b(20, 0);
        put16(b, 0, 0.25f);
        put16(b, 2, -1.f);
        b[4 + 1] = 0x4c;
        auto y = deq(b, DType::q4_1);
        CHECK(y[1] == 12 * 0.25f - 1.f);
        CHECK(y[17] == 4 * 0.25f - 1.f);
    }
    {  // q5_0: d, qh (bit i = fifth bit of value i), qs; offset 16
        std::vector<uint8_t> b(22, 0);
        put16(b, 0, 1.f);
        b[2 + 2] = 0x01;  // qh bit 16
        b[6 + 0] = 0x3f;  // value 0: 15, value 16: 3
        auto y = deq(b, DType::q5_0);
        CHECK(y[0] == -1.f);   // 15 - 16
        CHECK(y[16] == 3.f);   // (3 | 16) - 16
        CHECK(y[1] == -16.f);  // 0 - 16
    }
    {  // q5_1: d, m, qh, qs
        std::vector<uint8_t> b(24, 0);
        put16(b, 0, 1.f);
        put16(b, 2, 0.5f);
        b[4 + 0] = 0x02;  // qh bit 1
        b[8 + 1] = 0x07;
        auto y = deq(b, DType::q5_1);
        CHECK(y[1] == 23.5f);  // (7 | 16) + 0.5
    }
    {  // q4_k: sub-block 5 takes its 6-bit scale/min from the nibbles of scales[9] and top bits of [1]/[5]
        std::vector<uint8_t> b(144, 0);
        put16(b, 0, 1.f);
        put16(b, 2, 1.f);
        b[4 + 9] = 0x21;  // scale low 1, min low 2
        b[4 + 1] = 0x40;  // scale high bits 01 -> 17
        b[4 + 5] = 0xc0;  // min high bits 11 -> 50
        b[4 + 0] = 3;     // sub-block 0: scale 3
        b[4 + 4] = 1;     // sub-block 0: min 1
        b[16 + 64] = 0x3a;
        auto y = deq(b, DType::q4_k);
        CHECK(y[160] == 17 * 3 - 50.f);  // sub-block 5, high nibbles of qs[64..95]
        CHECK(y[128] == 0.f);            // sub-block 4: scale 0, min 0; low nibble 10
        b[16 + 0] = 0x05;
        y = deq(b, DType::q4_k);
        CHECK(y[0] == 3 * 5 - 1.f);
    }
    {  // q6_k: ql[128], qh[64], i8 scales[16], f16 d
        std::vector<uint8_t> b(210, 0);
        put16(b, 208, 1.f);
        b[192 + 0] = (uint8_t)(int8_t)-2;
        b[192 + 6] = 3;
        b[0] = 0x75;                  // value 0 low nibble 5; value 64 low nibble 7
        b[32] = 0x90;                 // value 96 low nibble 9 (high half of ql[32])
        b[128] = 0x02 | (0x03 << 6);  // value 0 high bits 2; value 96 high bits 3
        auto y = deq(b, DType::q6_k);
        CHECK(y[0] == -2.f * 5);              // (5 | 32) - 32 = 5, scale -2
        CHECK(y[96] == 3.f * (9 + 48 - 32));  // scale[6]
        CHECK(y[1] == -2.f * -32);
    }
    {  // q2_k: scales[16] (scale | min << 4), qs[64] at 16, d at 80, dmin at 82
        std::vector<uint8_t> b(84, 0);
        put16(b, 80, 0.5f);
        put16(b, 82, 0.25f);
        b[5] = 0x73;        // sub-block 5 (values 80..95): scale 3, min 7
        b[16 + 16] = 0x30;  // value 80 = 128*0 + 32*2 + 16: bits 4-5 of qs[16] = 3
        b[12] = 0x02;       // sub-block 12 (values 192..207): scale 2, min 0
        b[16 + 40] = 0x10;  // value 200 = 128*1 + 32*2 + 8: bits 4-5 of qs[32 + 8] = 1
        auto y = deq(b, DType::q2_k);
        CHECK(y[80] == 0.5f * 3 * 3 - 0.25f * 7);
        CHECK(y[81] == -0.25f * 7);
        CHECK(y[200] == 0.5f * 2 * 1);
        CHECK(y[0] == 0.f);
    }
    {  // q3_k: hmask[32], qs[64] at 32, scales[12] at 96, d at 108; all-zero scale bytes mean scale -32
        std::vector<uint8_t> b(110, 0);
        put16(b, 108, 1.f);
        b[96 + 5] = 0x50;        // sub-block 13: low 4 bits 5 from the high nibble of scales[5]
        b[96 + 9] = 0x80;        // ... top 2 bits 2 from bits 6-7 of scales[9]: 37 - 32 = 5
        b[32 + 32 + 18] = 0x20;  // value 210 = 128*1 + 32*2 + 18: low bits 2 at bits 4-5 of qs[32 + 18]
        b[18] = 0x40;            // ... high bit at bit 4*1 + 2 of hmask[18]: q = 2 + 4 - 4
        b[96 + 6] = 0x0a;        // sub-block 6: low 4 bits 10 from the low nibble of scales[6]
        b[96 + 10] = 0x0c;       // ... top 2 bits 3 from bits 2-3 of scales[10]: 58 - 32 = 26
        auto y = deq(b, DType::q3_k);
        CHECK(y[210] == 5.f * 2);
        CHECK(y[211] == 5.f * -4);   // low 0, high 0
        CHECK(y[100] == 26.f * -4);  // sub-block 6
        CHECK(y[0] == -32.f * -4);   // sub-block 0: scale 0 - 32
    }
    {  // q5_k: d, dmin, scales[12] (as q4_k), qh[32] at 16, qs[128] at 48
        std::vector<uint8_t> b(176, 0);
        put16(b, 0, 1.f);
        put16(b, 2, 1.f);
        b[4 + 9] = 0x21;  // sub-block 5: scale 17, min 50 (as the q4_k case)
        b[4 + 1] = 0x40;
        b[4 + 5] = 0xc0;
        b[4 + 0] = 3;  // sub-block 0: scale 3, min 1
        b[4 + 4] = 1;
        b[48 + 64] = 0x3a;  // value 160 (sub-block 5): high nibble of qs[64] = 3
        b[16 + 0] = 0x21;   // qh[0]: bit 5 (value 160's fifth bit) and bit 0 (value 0's)
        b[48 + 0] = 0x05;   // value 0: low nibble 5
        auto y = deq(b, DType::q5_k);
        CHECK(y[160] == 17 * (3 + 16) - 50.f);
        CHECK(y[128] == 0.f);  // sub-block 4: scale 0, min 0
        CHECK(y[0] == 3 * (5 + 16) - 1.f);
        CHECK(y[32] == 0.f);  // sub-block 1: scale 0x40 & 63 = 0, min 0xc0 & 63 = 0
    }
}

TEST_CASE("quantize -> dequantize stays within the format's step", "[core][quant]") {
    DType t = GENERATE(from_range(std::begin(kQuant), std::end(kQuant)));
    CAPTURE(dtype_name(t));
    const int64_t B = dtype_block(t);
    // 64 super-blocks of mixed character: random at several scales, zeros, constants, one spike, tiny.
    std::vector<float> x = test::random_vec((size_t)(256 * 64), 7);
    for (int64_t k = 0; k < 64; ++k) {
        float* p = x.data() + k * 256;
        const float sc[] = {1.f, 1e-3f, 30.f, 1e-6f};
        for (int i = 0; i < 256; ++i) p[i] *= sc[k % 4];
        if (k == 5) std::fill(p, p + 256, 0.f);
        if (k == 6) std::fill(p, p + 256, -0.75f);
        if (k == 7) std::fill(p, p + 256, 0.f), p[100] = 2.f;
        if (k == 8)
            for (int i = 0; i < 256; ++i) p[i] = i < 128 ? p[i] * 1e-4f : p[i];  // two sub-block scales
    }
    std::vector<uint8_t> q(dtype_nbytes(t, (int64_t)x.size()));
    quantize(x.data(), t, q.data(), x.size());
    std::vector<float> y(x.size());
    dequantize(q.data(), t, y.data(), y.size());
    for (size_t i = 0; i < 256; ++i) REQUIRE(y[5 * 256 + i] == 0.f);  // zeros are exact
    double worst = 0;
    for (int64_t k = 0; k < (int64_t)x.size() / B; ++k) {
        const float *xb = x.data() + k * B, *yb = y.data() + k * B;
        double amax = 0;
        for (int64_t i = 0; i < B; ++i) amax = std::max(amax, (double)std::fabs(xb[i]));
        for (int64_t i = 0; i < B; ++i) {
            double lim;
            if (t == DType::q2_k || t == DType::q4_k || t == DType::q5_k) {
                // Sub-block s of n: step_s = range_s / L with 0 in the range (L = 3, 15, 31); codes of
                // d = max step / S and dmin = max offset / S (S = 15 for q2_k's 4-bit, 63 for 6-bit scales;
                // d rounded up, dmin nearest): |err| <= (step_s + d) / 2 + dmin / 2.
                const int n = t == DType::q2_k ? 16 : 32;
                const double L = t == DType::q2_k ? 3 : t == DType::q4_k ? 15 : 31, S = t == DType::q2_k ? 15 : 63;
                double smax = 0, omax = 0, step = 0;
                for (int s = 0; s < 256 / n; ++s) {
                    double lo = 0, hi = xb[n * s];
                    for (int l = 0; l < n; ++l)
                        lo = std::min(lo, (double)xb[n * s + l]), hi = std::max(hi, (double)xb[n * s + l]);
                    smax = std::max(smax, (hi - lo) / L), omax = std::max(omax, -lo);
                    if (s == i / n) step = (hi - lo) / L;
                }
                lim = 0.5 * (step + up(smax / S)) + 0.5 * up(omax / S) + amax * std::ldexp(1.0, -20);
            } else if (t == DType::q6_k || t == DType::q3_k) {
                // Sub-block of 16: s = amax_s / H as signed multiples of d = max s / S (rounded away from
                // 0), codes in [-H, H - 1] (q6_k: H 32, int8 S 127; q3_k: H 4, 6-bit S 31):
                // |err| <= s + d (the far extreme may clamp from +H to +H - 1).
                const double H = t == DType::q6_k ? 32 : 4, S = t == DType::q6_k ? 127 : 31;
                double smax = 0, s16 = 0;
                for (int j = 0; j < 16; ++j) {
                    double a = 0;
                    for (int l = 0; l < 16; ++l) a = std::max(a, (double)std::fabs(xb[16 * j + l]));
                    smax = std::max(smax, a / H);
                    if (j == i / 16) s16 = a / H;
                }
                lim = s16 + up(smax / S) + amax * std::ldexp(1.0, -20);
            } else {
                lim = bound(xb, t);
            }
            double e = std::fabs((double)xb[i] - (double)yb[i]);
            INFO("block " << k << " index " << i << " x " << xb[i] << " y " << yb[i] << " limit " << lim);
            REQUIRE(e <= lim);
            worst = std::max(worst, lim > 0 ? e / lim : 0);
        }
    }
    // The bounds are tight: the worst element uses a sizeable part of its allowance.
    CHECK(worst > 0.3);
    // Typical error on U(-1, 1) (first super-block): about step / sqrt(12), i.e. relative L2 of a few %.
    std::vector<float> x0(x.begin(), x.begin() + 256), y0(y.begin(), y.begin() + 256);
    const double r = rel_l2(y0, x0);
    // Per 16-value sub-block of U(-1, 1) the range is about 2 * 15/17, rms(x) = 0.577: q2_k (3 steps) about
    // 0.29, q3_k (amax / 4 steps) 0.125, q5_k (31 steps) 0.032.
    INFO("relative L2 " << r);
    const double rmax = t == DType::q8_0   ? 0.01
                        : t == DType::q6_k ? 0.03
                        : t == DType::q5_k ? 0.05
                        : t == DType::q3_k ? 0.2
                        : t == DType::q2_k ? 0.4
                                           : 0.12;
    CHECK(r < rmax);
}

TEST_CASE("convert() quantizes and dequantizes; bad sizes are refused", "[core][quant]") {
    std::vector<float> x = test::random_vec(64, 3);
    std::vector<uint8_t> q(dtype_nbytes(DType::q8_0, 64));
    convert(x.data(), DType::f32, q.data(), DType::q8_0, 64);
    std::vector<uint16_t> h(64);
    convert(q.data(), DType::q8_0, h.data(), DType::f16, 64);
    CHECK(std::fabs(f16_to_f32(h[10]) - x[10]) < 0.01f);
    CHECK_THROWS_WITH(convert(x.data(), DType::f32, q.data(), DType::q8_0, 40), Catch::Contains("blocks"));
    CHECK_THROWS_WITH(Tensor(DType::q4_0, {3, 33}), Catch::Contains("whole number"));
    x[3] = NAN;
    CHECK_THROWS_WITH(convert(x.data(), DType::f32, q.data(), DType::q8_0, 64), Catch::Contains("non-finite"));
}
