#include "runtime/core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/error.h"

namespace kiln {
namespace {

float h2f(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}
void put_h(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }
uint32_t get_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
// The smallest f16 >= v (v >= 0), so that scales derived from it never fall short of the range.
uint16_t f16_at_least(float v) {
    uint16_t h = f32_to_f16(v);
    if (f16_to_f32(h) < v) h++;  // positive: the next f16 up
    return h;
}
int clampi(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

// --------------------------------------------------------------------------- 32-value blocks
// Symmetric (q8_0, q4_0, q5_0): the value of largest magnitude maps to the most negative code
// (-2^(b-1), as ggml does), so d = that value / -2^(b-1); codes are round(x / d) clamped.
// Affine (q4_1, q5_1): d = (max - min) / (2^b - 1), m = min, codes round((x - m) / d).
void quant_block32(const float* x, DType t, uint8_t* b) {
    const bool affine = t == DType::q4_1 || t == DType::q5_1;
    const int bits = t == DType::q8_0 ? 8 : (t == DType::q4_0 || t == DType::q4_1) ? 4 : 5;
    int q[32];
    float d;
    if (affine) {
        float lo = x[0], hi = x[0];
        for (int i = 1; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
        const int qmax = (1 << bits) - 1;
        const uint16_t dh = f32_to_f16((hi - lo) / (float)qmax), mh = f32_to_f16(lo);
        d = f16_to_f32(dh);
        const float m = f16_to_f32(mh), id = d != 0 ? 1.f / d : 0.f;
        for (int i = 0; i < 32; ++i) q[i] = clampi((int)std::lround((x[i] - m) * id), 0, qmax);
        put_h(b, dh);
        put_h(b + 2, mh);
    } else {
        float amax = 0, vmax = 0;
        for (int i = 0; i < 32; ++i)
            if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), vmax = x[i];
        const int half = 1 << (bits - 1);
        // q8_0 uses the symmetric range [-127, 127] (ggml's d = amax / 127).
        const float dd = bits == 8 ? amax / 127.f : vmax / (float)-half;
        const uint16_t dh = f32_to_f16(dd);
        d = f16_to_f32(dh);
        const float id = d != 0 ? 1.f / d : 0.f;
        const int lo = bits == 8 ? -127 : -half, hi = bits == 8 ? 127 : half - 1;
        for (int i = 0; i < 32; ++i) q[i] = clampi((int)std::lround(x[i] * id), lo, hi) + (bits == 8 ? 0 : half);
        put_h(b, dh);
    }
    if (bits == 8) {
        for (int i = 0; i < 32; ++i) b[2 + i] = (uint8_t)(int8_t)q[i];
        return;
    }
    uint8_t* qs = b + (affine ? 4 : 2) + (bits == 5 ? 4 : 0);
    for (int i = 0; i < 16; ++i) qs[i] = (uint8_t)((q[i] & 15) | ((q[i + 16] & 15) << 4));
    if (bits == 5) {
        uint32_t qh = 0;
        for (int i = 0; i < 32; ++i) qh |= (uint32_t)((q[i] >> 4) & 1) << i;
        std::memcpy(b + (affine ? 4 : 2), &qh, 4);
    }
}

void dequant_block32(const uint8_t* b, DType t, float* y) {
    const float d = h2f(b);
    switch (t) {
        case DType::q8_0:
            for (int i = 0; i < 32; ++i) y[i] = (float)(int8_t)b[2 + i] * d;
            break;
        case DType::q4_0:
            for (int i = 0; i < 32; ++i) y[i] = (float)((i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4) - 8) * d;
            break;
        case DType::q4_1: {
            const float m = h2f(b + 2);
            for (int i = 0; i < 32; ++i) y[i] = (float)(i < 16 ? b[4 + i] & 15 : b[4 + i - 16] >> 4) * d + m;
            break;
        }
        case DType::q5_0: {
            const uint32_t qh = get_u32(b + 2);
            for (int i = 0; i < 32; ++i) {
                int q = (i < 16 ? b[6 + i] & 15 : b[6 + i - 16] >> 4) | (int)(((qh >> i) & 1) << 4);
                y[i] = (float)(q - 16) * d;
            }
            break;
        }
        case DType::q5_1: {
            const float m = h2f(b + 2);
            const uint32_t qh = get_u32(b + 4);
            for (int i = 0; i < 32; ++i) {
                int q = (i < 16 ? b[8 + i] & 15 : b[8 + i - 16] >> 4) | (int)(((qh >> i) & 1) << 4);
                y[i] = (float)q * d + m;
            }
            break;
        }
        default:
            KILN_FAIL("internal: dequant_block32 of ", dtype_name(t));
    }
}

// --------------------------------------------------------------------------- q4_k, q5_k
// scales[12] packs 8 (scale, min) pairs of 6 bits: pairs 0-3 in the low 6 bits of bytes 0-3 / 4-7,
// pairs 4-7 as nibbles of bytes 8-11 with their top 2 bits in the top bits of bytes 0-3 / 4-7.
void q4k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Affine k-quant scales, shared by q2_k (nsub 16 sub-blocks of 16, 4-bit scale/min, 3 code levels above 0)
// and q4_k / q5_k (8 sub-blocks of 32, 6-bit, 15 / 31 levels): sub-block s spans [lo_s, hi_s] with
// lo_s = min(0, min x); step_s = (hi_s - lo_s) / levels and offset -lo_s are coded as multiples ls_s, lm_s
// of d = max step / smax and dmin = max offset / smax (both f16 rounded up, so no code overflows). Steps
// are rounded up (never short of the range), offsets to nearest. Writes d, dmin at b[dh_at], b[dh_at + 2]
// and returns the per-sub-block scales d ls_s and mins dmin lm_s, as the dequantizer computes them.
void affine_scales(const float* x, int nsub, int levels, int smax_code, uint8_t* b, size_t dh_at, int* ls, int* lm,
                   float* d1, float* m1) {
    const int n = 256 / nsub;
    float step[16], off[16], smax = 0, omax = 0;
    for (int s = 0; s < nsub; ++s) {
        float lo = 0, hi = x[n * s];
        for (int i = 0; i < n; ++i) lo = std::min(lo, x[n * s + i]), hi = std::max(hi, x[n * s + i]);
        step[s] = (hi - lo) / (float)levels;
        off[s] = -lo;
        smax = std::max(smax, step[s]);
        omax = std::max(omax, off[s]);
    }
    const uint16_t dh = f16_at_least(smax / (float)smax_code), mh = f16_at_least(omax / (float)smax_code);
    const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
    put_h(b + dh_at, dh);
    put_h(b + dh_at + 2, mh);
    for (int s = 0; s < nsub; ++s) {
        ls[s] = d > 0 ? clampi((int)std::ceil(step[s] / d), 0, smax_code) : 0;
        lm[s] = dmin > 0 ? clampi((int)std::lround(off[s] / dmin), 0, smax_code) : 0;
        d1[s] = d * (float)ls[s];
        m1[s] = dmin * (float)lm[s];
    }
}

int affine_code(float x, float d1, float m1, int qmax) {
    return d1 > 0 ? clampi((int)std::lround((x + m1) * (1.f / d1)), 0, qmax) : 0;
}

// q4_k (bits 4): qs[128] at 16, value 32 s + l in qs[32 (s / 2) + l], low nibble for even s.
// q5_k (bits 5): the same nibbles in qs[128] at 48, and the fifth bit at bit s of qh[l] (qh[32] at 16).
void quant_q45k(const float* x, int bits, uint8_t* b) {
    int ls[8], lm[8];
    float d1[8], m1[8];
    affine_scales(x, 8, (1 << bits) - 1, 63, b, 0, ls, lm, d1, m1);
    uint8_t* sc = b + 4;
    std::memset(sc, 0, 12);
    for (int s = 0; s < 8; ++s) {
        if (s < 4) {
            sc[s] = (uint8_t)ls[s];
            sc[s + 4] = (uint8_t)lm[s];
        } else {
            sc[s + 4] = (uint8_t)((ls[s] & 15) | ((lm[s] & 15) << 4));
            sc[s - 4] |= (uint8_t)((ls[s] >> 4) << 6);
            sc[s] |= (uint8_t)((lm[s] >> 4) << 6);
        }
    }
    uint8_t *qs = b + (bits == 4 ? 16 : 48), *qh = b + 16;
    std::memset(b + 16, 0, bits == 4 ? 128 : 160);
    for (int s = 0; s < 8; ++s)
        for (int l = 0; l < 32; ++l) {
            const int q = affine_code(x[32 * s + l], d1[s], m1[s], (1 << bits) - 1);
            qs[32 * (s / 2) + l] |= (uint8_t)(s % 2 ? (q & 15) << 4 : q & 15);
            if (bits == 5) qh[l] |= (uint8_t)((q >> 4) << s);
        }
}

void dequant_q45k(const uint8_t* b, int bits, float* y) {
    const float d = h2f(b), dmin = h2f(b + 2);
    for (int s = 0; s < 8; ++s) {
        int sc, m;
        q4k_scale_min(b + 4, s, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        const uint8_t* q = b + (bits == 4 ? 16 : 48) + 32 * (s / 2);
        for (int l = 0; l < 32; ++l) {
            const int hi = bits == 5 ? ((b[16 + l] >> s) & 1) << 4 : 0;
            y[32 * s + l] = d1 * (float)((s % 2 ? q[l] >> 4 : q[l] & 15) | hi) - m1;
        }
    }
}

// --------------------------------------------------------------------------- q2_k
// scales[16] at 0 (low nibble: scale, high: min, per 16 values), qs[64] at 16, f16 d at 80, dmin at 82.
// Value i = 128 h + 32 c + l (half h, quarter c, lane l < 32): 2 bits at bit 2c of qs[32 h + l];
// sub-block i / 16. x = (d sc) q - (dmin m).
void quant_q2k(const float* x, uint8_t* b) {
    int ls[16], lm[16];
    float d1[16], m1[16];
    affine_scales(x, 16, 3, 15, b, 80, ls, lm, d1, m1);
    for (int s = 0; s < 16; ++s) b[s] = (uint8_t)(ls[s] | (lm[s] << 4));
    std::memset(b + 16, 0, 64);
    for (int i = 0; i < 256; ++i) {
        const int q = affine_code(x[i], d1[i / 16], m1[i / 16], 3);
        b[16 + 32 * (i / 128) + i % 32] |= (uint8_t)(q << (2 * ((i / 32) % 4)));
    }
}

void dequant_q2k(const uint8_t* b, float* y) {
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    for (int i = 0; i < 256; ++i) {
        const int sc = b[i / 16];
        const float d1 = d * (float)(sc & 15), m1 = dmin * (float)(sc >> 4);
        y[i] = d1 * (float)((b[16 + 32 * (i / 128) + i % 32] >> (2 * ((i / 32) % 4))) & 3) - m1;
    }
}

// --------------------------------------------------------------------------- q3_k
// hmask[32] at 0, qs[64] at 32, scales[12] at 96, f16 d at 108. Value i = 128 h + 32 c + l: low 2 bits at
// bit 2c of qs[32 h + l], high bit at bit 4h + c of hmask[l]; q = low + 4 high - 4 in [-4, 3].
// Scale of sub-block s = i / 16 is 6 bits less 32: low nibble (s / 8) of scales[s % 8], top 2 bits at bit
// 2 (s / 4) of scales[8 + s % 4]. x = (d (sc - 32)) q.
int q3k_scale(const uint8_t* sc, int s) {
    return (((sc[s % 8] >> (4 * (s / 8))) & 15) | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
}

// Symmetric, as q6_k: sub-block scales s = (value of largest magnitude) / -4, as 6-bit signed multiples
// (-31 .. 31) of d = max |s| / 31 rounded away from zero; codes round(x / d1) in [-4, 3].
void quant_q3k(const float* x, uint8_t* b) {
    float s[16], amax_s = 0;
    for (int j = 0; j < 16; ++j) {
        float amax = 0, vmax = 0;
        for (int i = 0; i < 16; ++i)
            if (std::fabs(x[16 * j + i]) > amax) amax = std::fabs(x[16 * j + i]), vmax = x[16 * j + i];
        s[j] = vmax / -4.f;
        amax_s = std::max(amax_s, std::fabs(s[j]));
    }
    const uint16_t dh = f16_at_least(amax_s / 31.f);
    const float d = f16_to_f32(dh);
    std::memset(b, 0, 108);
    int sc[16];
    for (int j = 0; j < 16; ++j) {
        const int a = d > 0 ? clampi((int)std::ceil(std::fabs(s[j]) / d), 0, 31) : 0;
        sc[j] = s[j] < 0 ? -a : a;
        const int u = sc[j] + 32;
        b[96 + j % 8] |= (uint8_t)((u & 15) << (4 * (j / 8)));
        b[104 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
    }
    for (int i = 0; i < 256; ++i) {
        const float d1 = d * (float)sc[i / 16];
        const int u = (d1 != 0 ? clampi((int)std::lround(x[i] / d1), -4, 3) : 0) + 4;
        const int h = i / 128, c = (i / 32) % 4, l = i % 32;
        b[32 + 32 * h + l] |= (uint8_t)((u & 3) << (2 * c));
        b[l] |= (uint8_t)((u >> 2) << (4 * h + c));
    }
    put_h(b + 108, dh);
}

void dequant_q3k(const uint8_t* b, float* y) {
    const float d = h2f(b + 108);
    for (int i = 0; i < 256; ++i) {
        const int h = i / 128, c = (i / 32) % 4, l = i % 32;
        const int q = ((b[32 + 32 * h + l] >> (2 * c)) & 3) + 4 * ((b[l] >> (4 * h + c)) & 1) - 4;
        const float d1 = d * (float)q3k_scale(b + 96, i / 16);
        y[i] = d1 * (float)q;
    }
}

// --------------------------------------------------------------------------- q6_k
// Value i = 128 h + 32 c + l (half h, quarter c, lane l): low nibble in ql[64 h + l + 32 (c & 1)]
// (high half when c >= 2), top 2 bits at bit 2c of qh[32 h + l]; sub-block scale sc[i / 16].
// Sub-block scales s = (value of largest magnitude) / -32, as int8 multiples of d = max |s| / 127
// rounded away from zero (never short of the range).
void quant_q6k(const float* x, uint8_t* b) {
    float s[16], amax_s = 0;
    for (int j = 0; j < 16; ++j) {
        float amax = 0, vmax = 0;
        for (int i = 0; i < 16; ++i)
            if (std::fabs(x[16 * j + i]) > amax) amax = std::fabs(x[16 * j + i]), vmax = x[16 * j + i];
        s[j] = vmax / -32.f;
        amax_s = std::max(amax_s, std::fabs(s[j]));
    }
    const uint16_t dh = f16_at_least(amax_s / 127.f);
    const float d = f16_to_f32(dh);
    uint8_t *ql = b, *qh = b + 128;
    int8_t* sc = (int8_t*)(b + 192);
    std::memset(b, 0, 192);
    for (int j = 0; j < 16; ++j) {
        int a = d > 0 ? clampi((int)std::ceil(std::fabs(s[j]) / d), 0, 127) : 0;
        sc[j] = (int8_t)(s[j] < 0 ? -a : a);
    }
    for (int i = 0; i < 256; ++i) {
        const float d1 = d * (float)sc[i / 16];
        const int q = (d1 != 0 ? clampi((int)std::lround(x[i] / d1), -32, 31) : 0) + 32;
        const int h = i / 128, c = (i % 128) / 32, l = i % 32;
        ql[64 * h + l + 32 * (c & 1)] |= (uint8_t)(c >= 2 ? (q & 15) << 4 : q & 15);
        qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * c));
    }
    put_h(b + 208, dh);
}

void dequant_q6k(const uint8_t* b, float* y) {
    const float d = h2f(b + 208);
    const int8_t* sc = (const int8_t*)(b + 192);
    for (int i = 0; i < 256; ++i) {
        const int h = i / 128, c = (i % 128) / 32, l = i % 32;
        const uint8_t lo = b[64 * h + l + 32 * (c & 1)];
        const int q = ((c >= 2 ? lo >> 4 : lo & 15) | (((b[128 + 32 * h + l] >> (2 * c)) & 3) << 4)) - 32;
        y[i] = d * (float)sc[i / 16] * (float)q;
    }
}

}  // namespace

DType quant_storage(DType want, const std::string& name, const Shape& shape) {
    KILN_CHECK(dtype_is_quant(want), "quant_storage: ", dtype_name(want), " is not a quantized dtype");
    const std::string suffix = ".weight";
    if (shape.size() != 2 || name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return DType::f16;
    const std::string mod = name.substr(0, name.size() - suffix.size());
    const size_t dot = mod.rfind('.');
    const std::string leaf = dot == std::string::npos ? mod : mod.substr(dot + 1);
    if (leaf.find("embedding") != std::string::npos || leaf == "embed_tokens" || leaf == "shared" ||
        leaf == "relative_attention_bias")
        return DType::f16;
    if (shape[1] % dtype_block(want) != 0 && dtype_block(want) == 256)
        want = want == DType::q6_k   ? DType::q8_0
               : want == DType::q5_k ? DType::q5_1
               : want == DType::q4_k ? DType::q5_0
                                     : DType::q4_0;
    return shape[1] % dtype_block(want) == 0 ? want : DType::f16;
}

void quantize(const float* src, DType t, void* dst, size_t n) {
    KILN_CHECK(dtype_is_quant(t), "quantize: ", dtype_name(t), " is not a quantized dtype");
    const size_t bs = (size_t)dtype_block(t), bb = dtype_block_bytes(t);
    KILN_CHECK(n % bs == 0, "quantize ", dtype_name(t), ": ", n, " values are not whole ", bs, "-value blocks");
    auto* out = (uint8_t*)dst;
    for (size_t k = 0; k < n / bs; ++k) {
        const float* x = src + k * bs;
        for (size_t i = 0; i < bs; ++i)
            KILN_CHECK(std::isfinite(x[i]), "quantize ", dtype_name(t), ": non-finite value at ", k * bs + i);
        uint8_t* b = out + k * bb;
        switch (t) {
            case DType::q2_k:
                quant_q2k(x, b);
                break;
            case DType::q3_k:
                quant_q3k(x, b);
                break;
            case DType::q4_k:
            case DType::q5_k:
                quant_q45k(x, t == DType::q4_k ? 4 : 5, b);
                break;
            case DType::q6_k:
                quant_q6k(x, b);
                break;
            default:
                quant_block32(x, t, b);
        }
    }
}

void dequantize(const void* src, DType t, float* dst, size_t n) {
    KILN_CHECK(dtype_is_quant(t), "dequantize: ", dtype_name(t), " is not a quantized dtype");
    const size_t bs = (size_t)dtype_block(t), bb = dtype_block_bytes(t);
    KILN_CHECK(n % bs == 0, "dequantize ", dtype_name(t), ": ", n, " values are not whole ", bs, "-value blocks");
    const auto* in = (const uint8_t*)src;
    for (size_t k = 0; k < n / bs; ++k) {
        const uint8_t* b = in + k * bb;
        float* y = dst + k * bs;
        switch (t) {
            case DType::q2_k:
                dequant_q2k(b, y);
                break;
            case DType::q3_k:
                dequant_q3k(b, y);
                break;
            case DType::q4_k:
            case DType::q5_k:
                dequant_q45k(b, t == DType::q4_k ? 4 : 5, y);
                break;
            case DType::q6_k:
                dequant_q6k(b, y);
                break;
            default:
                dequant_block32(b, t, y);
        }
    }
}

}  // namespace kiln
