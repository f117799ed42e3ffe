#include "runtime/core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/quant.h"

namespace kiln {

bool dtype_is_quant(DType t) { return t >= DType::q8_0 && t <= DType::q5_k; }

int64_t dtype_block(DType t) {
    if (!dtype_is_quant(t)) return 1;
    return t == DType::q8_0 || t == DType::q4_0 || t == DType::q4_1 || t == DType::q5_0 || t == DType::q5_1 ? 32 : 256;
}

size_t dtype_block_bytes(DType t) {
    switch (t) {
        case DType::q8_0:
            return 34;
        case DType::q4_0:
            return 18;
        case DType::q4_1:
            return 20;
        case DType::q5_0:
            return 22;
        case DType::q5_1:
            return 24;
        case DType::q4_k:
            return 144;
        case DType::q6_k:
            return 210;
        case DType::q2_k:
            return 84;
        case DType::q3_k:
            return 110;
        case DType::q5_k:
            return 176;
        default:
            return dtype_size(t);
    }
}

size_t dtype_nbytes(DType t, int64_t n) {
    const int64_t b = dtype_block(t);
    KILN_CHECK(n >= 0 && n % b == 0, dtype_name(t), ": ", n, " values are not a whole number of ", b, "-value blocks");
    return (size_t)(n / b) * dtype_block_bytes(t);
}

size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32:
            return 4;
        case DType::f16:
            return 2;
        case DType::bf16:
            return 2;
        case DType::i32:
            return 4;
        case DType::i64:
            return 8;
        case DType::u8:
        case DType::f8_e4m3:
        case DType::f8_e5m2:
            return 1;
        default:
            KILN_FAIL("dtype_size: ", dtype_name(t), " is block-quantized (use dtype_nbytes)");
    }
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::f32:
            return "f32";
        case DType::f16:
            return "f16";
        case DType::bf16:
            return "bf16";
        case DType::i32:
            return "i32";
        case DType::i64:
            return "i64";
        case DType::u8:
            return "u8";
        case DType::q8_0:
            return "q8_0";
        case DType::q4_0:
            return "q4_0";
        case DType::q4_1:
            return "q4_1";
        case DType::q5_0:
            return "q5_0";
        case DType::q5_1:
            return "q5_1";
        case DType::q4_k:
            return "q4_k";
        case DType::q6_k:
            return "q6_k";
        case DType::q2_k:
            return "q2_k";
        case DType::q3_k:
            return "q3_k";
        case DType::q5_k:
            return "q5_k";
        case DType::f8_e4m3:
            return "f8_e4m3";
        case DType::f8_e5m2:
            return "f8_e5m2";
    }
    return "?";
}

DType parse_dtype(std::string_view s, std::string_view what) {
    std::string l(s);
    for (char& c : l) c = (char)std::tolower((unsigned char)c);
    if (l == "f32" || l == "float32" || l == "float") return DType::f32;
    if (l == "f16" || l == "float16" || l == "half") return DType::f16;
    if (l == "bf16" || l == "bfloat16") return DType::bf16;
    if (l == "i32" || l == "int32") return DType::i32;
    if (l == "i64" || l == "int64") return DType::i64;
    if (l == "u8" || l == "uint8") return DType::u8;
    if (l == "f8_e4m3" || l == "float8_e4m3fn") return DType::f8_e4m3;
    if (l == "f8_e5m2" || l == "float8_e5m2") return DType::f8_e5m2;
    for (DType q : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k,
                    DType::q4_k, DType::q5_k, DType::q6_k})
        if (l == dtype_name(q)) return q;
    KILN_FAIL(what, ": unsupported dtype '", s,
              "' (supported: f32, f16, bf16, i32, i64, u8, f8_e4m3, f8_e5m2, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, "
              "q4_k, q5_k, q6_k)");
}

uint16_t f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));  // inf / nan
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);  // overflow -> inf
    if (e <= 0) {                                    // subnormal or zero
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        h += (uint32_t)(rem + (h & 1u) > half);  // round to nearest, ties to even (see below)
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    // Round to nearest, ties to even, without a branch on the dropped bits (a random branch where weights are
    // converted: most of a model load's time was mispredicts): rem + odd > half is rem > half, or rem == half with
    // h odd (rem < half: rem + 1 <= half). May carry into the exponent: correct, up to inf.
    h += (uint32_t)(rem + (h & 1u) > 0x1000u);
    return (uint16_t)(sign | h);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (man << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

uint16_t f32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet nan
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return (uint16_t)(x >> 16);
}

float bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

// e4m3fn: s eeee mmm, bias 7. e = 0: subnormal m 2^-9; e = 15, m = 7: NaN (no infinities, so
// S.1111.110 = 448 is the largest finite). Otherwise (1 + m/8) 2^(e-7). ldexp of a small integer is exact.
float f8_e4m3_to_f32(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = std::numeric_limits<float>::quiet_NaN();
    else
        v = e == 0 ? std::ldexp((float)m, -9) : std::ldexp((float)(8 + m), e - 10);
    return b & 0x80 ? -v : v;
}

// e5m2 has f16's sign and exponent and its top 2 mantissa bits: it is the high byte of an f16.
float f8_e5m2_to_f32(uint8_t b) { return f16_to_f32((uint16_t)(b << 8)); }

namespace {
double load(const void* p, DType t, size_t i) {
    switch (t) {
        case DType::f32:
            return ((const float*)p)[i];
        case DType::f16:
            return f16_to_f32(((const uint16_t*)p)[i]);
        case DType::bf16:
            return bf16_to_f32(((const uint16_t*)p)[i]);
        case DType::i32:
            return ((const int32_t*)p)[i];
        case DType::i64:
            return (double)((const int64_t*)p)[i];
        case DType::u8:
            return ((const uint8_t*)p)[i];
        case DType::f8_e4m3:
            return f8_e4m3_to_f32(((const uint8_t*)p)[i]);
        case DType::f8_e5m2:
            return f8_e5m2_to_f32(((const uint8_t*)p)[i]);
        default:
            KILN_FAIL("internal: load of ", dtype_name(t));
    }
}
void store(void* p, DType t, size_t i, double v) {
    switch (t) {
        case DType::f32:
            ((float*)p)[i] = (float)v;
            break;
        case DType::f16:
            ((uint16_t*)p)[i] = f32_to_f16((float)v);
            break;
        case DType::bf16:
            ((uint16_t*)p)[i] = f32_to_bf16((float)v);
            break;
        case DType::i32:
            ((int32_t*)p)[i] = (int32_t)v;
            break;
        case DType::i64:
            ((int64_t*)p)[i] = (int64_t)v;
            break;
        case DType::u8:
            ((uint8_t*)p)[i] = (uint8_t)v;
            break;
        default:
            KILN_FAIL("internal: store of ", dtype_name(t));
    }
}
}  // namespace

void convert(const void* src, DType from, void* dst, DType to, size_t n) {
    if (from == to) {
        std::memcpy(dst, src, dtype_nbytes(from, (int64_t)n));
        return;
    }
    KILN_CHECK(to != DType::f8_e4m3 && to != DType::f8_e5m2, "convert: ", dtype_name(from), " -> ", dtype_name(to),
               " is not supported (fp8 is a source type only; store f16)");
    if (dtype_is_quant(from) || dtype_is_quant(to)) {  // through f32; quantized -> quantized re-quantizes
        std::vector<float> tmp;
        const float* f = (const float*)src;
        if (from != DType::f32) {
            tmp.resize(n);
            if (dtype_is_quant(from))
                dequantize(src, from, tmp.data(), n);
            else
                convert(src, from, tmp.data(), DType::f32, n);
            f = tmp.data();
        }
        if (dtype_is_quant(to))
            quantize(f, to, dst, n);
        else
            convert(f, DType::f32, dst, to, n);
        return;
    }
    if (from == DType::i64 && to == DType::i32) {  // exact, no double round trip
        for (size_t i = 0; i < n; ++i) {
            int64_t v = ((const int64_t*)src)[i];
            KILN_CHECK(v >= INT32_MIN && v <= INT32_MAX, "i64 value ", v, " does not fit in i32");
            ((int32_t*)dst)[i] = (int32_t)v;
        }
        return;
    }
    // Float conversions go through f32 (not double) so that f32->f16 rounds exactly once. The common pairs of
    // weight loading (f32 / bf16 / f16 to f16, f32 or bf16 and back) run without the per-element type switch: the
    // same functions, so the same bits.
    const auto each = [n](auto f) {
        for (size_t i = 0; i < n; ++i) f(i);
    };
    const auto* s16 = (const uint16_t*)src;
    const auto* s32 = (const float*)src;
    auto* d16 = (uint16_t*)dst;
    auto* d32 = (float*)dst;
    if (from == DType::f32 && to == DType::f16) return each([&](size_t i) { d16[i] = f32_to_f16(s32[i]); });
    if (from == DType::f32 && to == DType::bf16) return each([&](size_t i) { d16[i] = f32_to_bf16(s32[i]); });
    if (from == DType::f16 && to == DType::f32) return each([&](size_t i) { d32[i] = f16_to_f32(s16[i]); });
    if (from == DType::bf16 && to == DType::f32) return each([&](size_t i) { d32[i] = bf16_to_f32(s16[i]); });
    if (from == DType::bf16 && to == DType::f16)
        return each([&](size_t i) { d16[i] = f32_to_f16(bf16_to_f32(s16[i])); });
    if (from == DType::f16 && to == DType::bf16)
        return each([&](size_t i) { d16[i] = f32_to_bf16(f16_to_f32(s16[i])); });
    for (size_t i = 0; i < n; ++i) {
        if (to == DType::f16) {
            ((uint16_t*)dst)[i] = f32_to_f16((float)load(src, from, i));
        } else if (to == DType::bf16) {
            ((uint16_t*)dst)[i] = f32_to_bf16((float)load(src, from, i));
        } else {
            store(dst, to, i, load(src, from, i));
        }
    }
}

}  // namespace kiln
