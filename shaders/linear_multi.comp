// variants: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k
// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// linear_multi (K % 4 == 0): up to 4 linears of one x in one dispatch, y_i = act_i(x @ W_i^T + b_i). Each
// weight, bias and output is its own binding (block weights stay separate tensors, selected per replay).
// Workgroup column tiles [tile0[i], tile0[i+1]) compute part i with linear_tile.glsl, the code of
// linear_vec4.comp, so every output equals the unfused linear's bitwise.
// Bindings: 0 x; 1 + 2i W_i; 2 + 2i b_i; 9 + i y_i (i < 4; absent parts bound to a dummy and never read).
#define LINEAR_VEC4
#define KILN_SEL_VECS 3  // 9 inputs
#include "common.glsl"
#include "activation.glsl"
#define USE_LINEAR_MULTI
#include "runtime/ir/params.h"
#define RN 8
layout(local_size_x = 16, local_size_y_id = 1) in;
layout(constant_id = 0) const uint RM = 4;
layout(constant_id = 1) const uint LY = 16;
layout(constant_id = 2) const uint ACT0 = 0;
layout(constant_id = 3) const uint ACT1 = 0;
layout(constant_id = 4) const uint ACT2 = 0;
layout(constant_id = 5) const uint ACT3 = 0;
layout(constant_id = 6) const uint PARTS = 4;  // parts present: the others compile away (pipeline creation time)
SELECT_BUF(13)
#define VT vec4
#define KSTEPS (p.K / 4)
layout(binding = 0) readonly buffer X { vec4 x[]; };
#if defined(W_F16)
#define WT f16vec4
#define WCONV(v) vec4(v)
#elif defined(W_BF16)
#define WT u16vec4
#define WCONV(v) uintBitsToFloat(uvec4(v) << 16)
#elif defined(W_QUANT)
#define WT uint16_t
#else
#define WT vec4
#define WCONV(v) (v)
#endif
WEIGHT_BUF(1, W0, WT, w0)
WEIGHT_BUF(2, B0, float, b0)
WEIGHT_BUF(3, W1, WT, w1)
WEIGHT_BUF(4, B1, float, b1)
WEIGHT_BUF(5, W2, WT, w2)
WEIGHT_BUF(6, B2, float, b2)
WEIGHT_BUF(7, W3, WT, w3)
WEIGHT_BUF(8, B3, float, b3)
#ifdef KILN_PTR
#define w0 W0_p.data
#define w1 W1_p.data
#define w2 W2_p.data
#define w3 W3_p.data
#define b0 B0_p.data
#define b1 B1_p.data
#define b2 B2_p.data
#define b3 B3_p.data
#endif
layout(binding = 9) writeonly buffer Y0 { float y0[]; };
layout(binding = 10) writeonly buffer Y1 { float y1[]; };
layout(binding = 11) writeonly buffer Y2 { float y2[]; };
layout(binding = 12) writeonly buffer Y3 { float y3[]; };

// Part i: weight wi (block Wi), bias bi, output yi, activation ACTi; the same text four times.
#define LT_FN part0
#define LT_N p.N[0]
#define LT_HAS_BIAS ((p.has_bias & 1u) != 0)
#define LT_BIAS(n) b0[WBASE(B0) + n]
#define LT_Y y0
#define LT_ACT ACT0
#ifdef W_QUANT
#define QN(f) f##0
#define QW w0
#define QWBASE WBASE(W0)
#include "quant.glsl"
#define LT_W0 0u
#define LT_WLOAD(i) dq40(i)
#undef QN
#undef QW
#undef QWBASE
#else
#define LT_W0 WBASE(W0)
#define LT_WLOAD(i) WCONV(w0[i])
#endif
#include "linear_tile.glsl"
#undef LT_FN
#undef LT_N
#undef LT_HAS_BIAS
#undef LT_BIAS
#undef LT_Y
#undef LT_ACT
#undef LT_W0
#undef LT_WLOAD

#define LT_FN part1
#define LT_N p.N[1]
#define LT_HAS_BIAS ((p.has_bias & 2u) != 0)
#define LT_BIAS(n) b1[WBASE(B1) + n]
#define LT_Y y1
#define LT_ACT ACT1
#ifdef W_QUANT
#define QN(f) f##1
#define QW w1
#define QWBASE WBASE(W1)
#include "quant.glsl"
#define LT_W0 0u
#define LT_WLOAD(i) dq41(i)
#undef QN
#undef QW
#undef QWBASE
#else
#define LT_W0 WBASE(W1)
#define LT_WLOAD(i) WCONV(w1[i])
#endif
#include "linear_tile.glsl"
#undef LT_FN
#undef LT_N
#undef LT_HAS_BIAS
#undef LT_BIAS
#undef LT_Y
#undef LT_ACT
#undef LT_W0
#undef LT_WLOAD

#define LT_FN part2
#define LT_N p.N[2]
#define LT_HAS_BIAS ((p.has_bias & 4u) != 0)
#define LT_BIAS(n) b2[WBASE(B2) + n]
#define LT_Y y2
#define LT_ACT ACT2
#ifdef W_QUANT
#define QN(f) f##2
#define QW w2
#define QWBASE WBASE(W2)
#include "quant.glsl"
#define LT_W0 0u
#define LT_WLOAD(i) dq42(i)
#undef QN
#undef QW
#undef QWBASE
#else
#define LT_W0 WBASE(W2)
#define LT_WLOAD(i) WCONV(w2[i])
#endif
#include "linear_tile.glsl"
#undef LT_FN
#undef LT_N
#undef LT_HAS_BIAS
#undef LT_BIAS
#undef LT_Y
#undef LT_ACT
#undef LT_W0
#undef LT_WLOAD

#define LT_FN part3
#define LT_N p.N[3]
#define LT_HAS_BIAS ((p.has_bias & 8u) != 0)
#define LT_BIAS(n) b3[WBASE(B3) + n]
#define LT_Y y3
#define LT_ACT ACT3
#ifdef W_QUANT
#define QN(f) f##3
#define QW w3
#define QWBASE WBASE(W3)
#include "quant.glsl"
#define LT_W0 0u
#define LT_WLOAD(i) dq43(i)
#undef QN
#undef QW
#undef QWBASE
#else
#define LT_W0 WBASE(W3)
#define LT_WLOAD(i) WCONV(w3[i])
#endif
#include "linear_tile.glsl"
#undef LT_FN
#undef LT_N
#undef LT_HAS_BIAS
#undef LT_BIAS
#undef LT_Y
#undef LT_ACT
#undef LT_W0
#undef LT_WLOAD

void main() {
    const uvec2 tt = tile_xy(p.tile_group);  // the column tiles of all parts side by side
    const uint t = tt.x;
    if (PARTS == 1 || t < p.tile0[1])
        part0(t, tt.y);
    else if (PARTS == 2 || t < p.tile0[2])
        part1(t - p.tile0[1], tt.y);
    else if (PARTS == 3 || t < p.tile0[3])
        part2(t - p.tile0[2], tt.y);
    else
        part3(t - p.tile0[3], tt.y);
}
