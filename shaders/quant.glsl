// Dequantization of ggml's block formats (layouts in runtime/core/quant.h), from the weight buffer
// `w` (uint16_t[], declared by the includer as WEIGHT_BUF Wt, read from word WBASE(Wt) on; every block
// field starts at an even byte).
// dq4(f) returns values 4f .. 4f+3 of the weight in row-major order: rows are whole blocks, so the
// flat value index e gives block e / QK and position e % QK without knowing the row length. Every field
// read as 4 bytes starts at an even offset (blocks and their fields are even-sized, 4 divides i).
// Each value is computed by the same f32 expression, in the same order, as kiln::dequantize() on the
// CPU; `precise` forbids fusing into FMAs, so both agree bitwise.
// Included once per weight buffer: QN(f) names this copy's functions, QW is the buffer array and QWBASE its first
// element (defaults: the plain names, w and WBASE(Wt), as linear.glsl includes it).
#ifndef QN
#define QN(f) f
#define QW w
#define QWBASE WBASE(Wt)
#endif
#ifndef QWORD
#define QWORD(k) uint(QW[QWBASE + (k)])  // 16-bit word k of the weight (linear_tex: a texel fetch)
#endif
#ifndef QK
#if defined(W_Q2_K) || defined(W_Q3_K) || defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
#define QK 256u
#else
#define QK 32u
#endif
#if defined(W_Q8_0)
#define QBB 34u
#elif defined(W_Q4_0)
#define QBB 18u
#elif defined(W_Q4_1)
#define QBB 20u
#elif defined(W_Q5_0)
#define QBB 22u
#elif defined(W_Q5_1)
#define QBB 24u
#elif defined(W_Q2_K)
#define QBB 84u
#elif defined(W_Q3_K)
#define QBB 110u
#elif defined(W_Q4_K)
#define QBB 144u
#elif defined(W_Q5_K)
#define QBB 176u
#else
#define QBB 210u
#endif
#endif  // QK

uint QN(qbyte)(uint b) { return (QWORD(b >> 1) >> ((b & 1u) * 8u)) & 0xffu; }
// f16 bits (at an even byte) -> f32, exact including subnormals (m 2^-24 is a normal f32).
float QN(qhalf)(uint b) {
    uint h = QWORD(b >> 1), e = (h >> 10) & 31u, m = h & 1023u;
    float v = e == 0u    ? float(m) * 5.9604644775390625e-8
              : e == 31u ? uintBitsToFloat(0x7f800000u | (m << 13))
                         : uintBitsToFloat(((e + 112u) << 23) | (m << 13));
    return (h & 0x8000u) != 0u ? -v : v;
}
int QN(qi8)(uint v) { return bitfieldExtract(int(v), 0, 8); }  // sign-extend a byte
// The 4 bytes at even byte offset b (two 16-bit words).
uvec4 QN(qbytes4)(uint b) {
    uint lo = QWORD(b >> 1), hi = QWORD((b >> 1) + 1u);
    return uvec4(lo & 0xffu, lo >> 8, hi & 0xffu, hi >> 8);
}

// Values 4f .. 4f+3: one block, one sub-block (4 divides 16), so the scales are decoded once.
vec4 QN(dq4)(uint f) {
    uint e = 4u * f, blk = (e / QK) * QBB, i = e % QK;
    precise vec4 y;
#if defined(W_Q8_0)
    y = vec4(ivec4(QN(qbytes4)(blk + 2u + i) << 24) >> 24) * QN(qhalf)(blk);
#elif defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1)
#if defined(W_Q4_0)
    const uint qs = 2u, qh = 0u;
#elif defined(W_Q4_1)
    const uint qs = 4u, qh = 0u;
#elif defined(W_Q5_0)
    const uint qs = 6u, qh = 2u;
#else
    const uint qs = 8u, qh = 4u;
#endif
    uvec4 b = QN(qbytes4)(blk + qs + (i & 15u));
    uvec4 q = i < 16u ? b & 15u : b >> 4;
    if (qh != 0u) q |= ((uvec4(QN(qbyte)(blk + qh + (i >> 3)) >> (i & 7u)) >> uvec4(0u, 1u, 2u, 3u)) & 1u) << 4;
    float d = QN(qhalf)(blk);
#if defined(W_Q4_0)
    y = vec4(ivec4(q) - 8) * d;
#elif defined(W_Q5_0)
    y = vec4(ivec4(q) - 16) * d;
#else
    y = vec4(q) * d + QN(qhalf)(blk + 2u);
#endif
#elif defined(W_Q4_K) || defined(W_Q5_K)
    uint s = i >> 5, S = blk + 4u, sc, mn;
    if (s < 4u) {
        sc = QN(qbyte)(S + s) & 63u;
        mn = QN(qbyte)(S + s + 4u) & 63u;
    } else {
        sc = (QN(qbyte)(S + s + 4u) & 15u) | ((QN(qbyte)(S + s - 4u) >> 6) << 4);
        mn = (QN(qbyte)(S + s + 4u) >> 4) | ((QN(qbyte)(S + s) >> 6) << 4);
    }
    precise float d1 = QN(qhalf)(blk) * float(sc);
    precise float m1 = QN(qhalf)(blk + 2u) * float(mn);
#if defined(W_Q4_K)
    uvec4 b = QN(qbytes4)(blk + 16u + 32u * (s >> 1) + (i & 31u));
    uvec4 q = (s & 1u) != 0u ? b >> 4 : b & 15u;
#else  // the fifth bit: bit s of qh[l] (qh at 16, qs at 48)
    uvec4 b = QN(qbytes4)(blk + 48u + 32u * (s >> 1) + (i & 31u));
    uvec4 q = ((s & 1u) != 0u ? b >> 4 : b & 15u) | (((QN(qbytes4)(blk + 16u + (i & 31u)) >> s) & 1u) << 4);
#endif
    y = d1 * vec4(q) - m1;
#elif defined(W_Q2_K)  // 4 values: one 16-value sub-block, bits 2c of qs[32 h + l .. + 3]
    uint sc = QN(qbyte)(blk + (i >> 4));
    precise float d1 = QN(qhalf)(blk + 80u) * float(sc & 15u);
    precise float m1 = QN(qhalf)(blk + 82u) * float(sc >> 4);
    uvec4 q = (QN(qbytes4)(blk + 16u + 32u * (i >> 7) + (i & 31u)) >> (2u * ((i >> 5) & 3u))) & 3u;
    y = d1 * vec4(q) - m1;
#elif defined(W_Q3_K)  // low 2 bits as q2_k (qs at 32), high bit 4h + c of hmask[l]; 6-bit scales less 32
    uint s = i >> 4, h = i >> 7, c = (i >> 5) & 3u;
    int sc = int(((QN(qbyte)(blk + 96u + (s & 7u)) >> (4u * (s >> 3))) & 15u) |
                 (((QN(qbyte)(blk + 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u) << 4)) -
             32;
    precise float d1 = QN(qhalf)(blk + 108u) * float(sc);
    uvec4 lo = (QN(qbytes4)(blk + 32u + 32u * h + (i & 31u)) >> (2u * c)) & 3u;
    uvec4 hb = (QN(qbytes4)(blk + (i & 31u)) >> (4u * h + c)) & 1u;
    y = d1 * vec4(ivec4(lo + 4u * hb) - 4);
#else  // W_Q6_K
    uint h = i >> 7, c = (i >> 5) & 3u, l = i & 31u;
    uvec4 lo = QN(qbytes4)(blk + 64u * h + l + 32u * (c & 1u));
    uvec4 q = (c >= 2u ? lo >> 4 : lo & 15u) | (((QN(qbytes4)(blk + 128u + 32u * h + l) >> (2u * c)) & 3u) << 4);
    y = QN(qhalf)(blk + 208u) * float(QN(qi8)(QN(qbyte)(blk + 192u + (i >> 4)))) * vec4(ivec4(q) - 32);
#endif
    return y;
}
