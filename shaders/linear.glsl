// linear body: y[M, N] = act(x[M, K] @ W[N, K]^T + b[N])   (W in PyTorch layout, stored f32/f16/bf16/quantized;
// act: none, or the activation a fused linear applies, spec constant ACT). The tile code is linear_tile.glsl.
// Register tiling, no shared memory, no barriers: a 16 x LY workgroup owns an (LY RM) x (16 RN) output
// tile; invocation (tx, ty) owns rows ty + LY i (i < RM) and cols tx + 16j (j < RN), so stores are
// contiguous across tx. Every k step loads RM x and RN W values for RN RM FMAs. Out-of-range rows/cols
// are clamped for the loads (branch-free K loop) and masked at the store. LY, RM and RN are
// specialization constants chosen per shape by lower_linear (lower_matmul.cpp): 64/32/16 x 128 tiles
// in general, 64 columns for N <= 64, 1-row tiles for small M (the adaLN / timestep MLPs with M = batch).
// LINEAR_VEC4 (linear_vec4.comp, K % 4 == 0): x and W are read as 4-vectors along K, a quarter of the
// load instructions (lavapipe issues one load per lane per instruction; on GPUs: 16-byte loads).
// W_Q8_0 .. W_Q5_1 and the k-quants W_Q2_K .. W_Q6_K (vec4 only; quantized rows are whole 32/256-value blocks):
// W is ggml blocks, read as 16-bit words and dequantized 4 values at a time in registers (quant.glsl); no
// full-precision copy.
#include "common.glsl"
#include "activation.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
#include "linear_gate.glsl"  // the "_gated" shaders' residual: bindings 3, 4; y at LINEAR_Y_BINDING
layout(local_size_x = 16, local_size_y_id = 1) in;
layout(constant_id = 0) const uint RM = 4;
layout(constant_id = 1) const uint LY = 16;
layout(constant_id = 2) const uint ACT = 0;  // activation applied at the store (ir::Act; activation.glsl)
layout(constant_id = 3) const uint RN = 8;
// f16 activation storage (ir::store_f16, KILN_ACT_F16): x and/or y stored as f16, read and written through a
// second declaration of the same binding; accumulation stays f32, y is rounded to f16 once at the store.
layout(constant_id = 4) const uint XF16 = 0;
layout(constant_id = 5) const uint YF16 = 0;
SELECT_BUF(LINEAR_SEL_BINDING)
#if defined(LINEAR_TEX) || defined(LINEAR_VEC4)
#define VT vec4
#define KSTEPS (p.K / 4)
#if defined(LINEAR_TEX)
// LINEAR_TEX (linear_tex.comp): x and W are uniform texel buffers, read with texelFetch: llvmpipe loads a storage
// buffer lane by lane with a bounds check per component, a texel buffer with vector gathers (2.7x at DiT shapes).
// The host makes the views: x RGBA32F, or RGBA16F where x is stored as f16 (the fetch converts it exactly); W
// RGBA32F (f32), RGBA16F (f16), RGBA16_UINT (bf16) or R16_UINT (the 16-bit words of ggml blocks). The values and
// the K loop are those of the storage-buffer path, so the results are bitwise equal. In the "_ptr" variant W stays
// a buffer read through its address (below).
layout(binding = 0) uniform textureBuffer x_t;
#define XLOAD_VT(i) texelFetch(x_t, int(i))
#else
layout(binding = 0) readonly buffer X { vec4 x[]; };
layout(binding = 0) readonly buffer X16 { f16vec4 x16[]; };
#endif
#if defined(LINEAR_TEX) && !defined(KILN_PTR)
#if defined(W_F16)
WEIGHT_TEXEL(1, Wt, textureBuffer, f16vec4, w_t)
#define WLOAD(i) texelFetch(w_t, int(i))
#elif defined(W_BF16)
WEIGHT_TEXEL(1, Wt, utextureBuffer, u16vec4, w_t)
#define WLOAD(i) uintBitsToFloat(texelFetch(w_t, int(i)) << 16)
#elif defined(W_QUANT)
WEIGHT_TEXEL(1, Wt, utextureBuffer, uint16_t, w_t)
#define QWORD(k) texelFetch(w_t, int(WBASE(Wt) + (k))).x
#include "quant.glsl"
#define WLOAD(i) dq4(i)
#else
WEIGHT_TEXEL(1, Wt, textureBuffer, vec4, w_t)
#define WLOAD(i) texelFetch(w_t, int(i))
#endif
#elif defined(W_F16)
WEIGHT_BUF(1, Wt, f16vec4, w)
#define WLOAD(i) vec4(w[i])
#elif defined(W_BF16)
WEIGHT_BUF(1, Wt, u16vec4, w)
#define WLOAD(i) uintBitsToFloat(uvec4(w[i]) << 16)
#elif defined(W_QUANT)
WEIGHT_BUF(1, Wt, uint16_t, w)
#ifdef KILN_PTR
#define w Wt_p.data  // before quant.glsl, whose functions read w
#endif
#include "quant.glsl"
#define WLOAD(i) dq4(i)
#else
WEIGHT_BUF(1, Wt, vec4, w)
#define WLOAD(i) w[i]
#endif
#else
#define VT float
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 0) readonly buffer X16 { float16_t x16[]; };
WEIGHT_BUF(1, Wt, WTYPE, w)
#define WLOAD(i) W2F(w[i])
#define KSTEPS p.K
#endif
WEIGHT_BUF(2, Bs, float, bias)
#ifdef KILN_PTR
#ifndef w
#define w Wt_p.data
#endif
#define bias Bs_p.data
#endif
layout(binding = LINEAR_Y_BINDING) writeonly buffer Y { float y[]; };
layout(binding = LINEAR_Y_BINDING) writeonly buffer Y16 { float16_t y16[]; };
VT xload(uint i) {
#ifdef XLOAD_VT
    return XLOAD_VT(i);
#else
    if (XF16 != 0) return VT(x16[i]);
    return x[i];
#endif
}
// Output element i = m N + n, h = act(acc + b): the gated residual ("_gated"), then the store.
void ystore(uint i, float h) {
    const float v = LINEAR_EPILOGUE(i / p.N, i % p.N, h);
    if (YF16 != 0)
        y16[i] = float16_t(v);
    else
        y[i] = v;
}

#define LT_FN linear_tile
#define LT_N p.N
#define LT_WLOAD(i) WLOAD(i)
#ifdef W_QUANT
#define LT_W0 0u  // quant.glsl adds WBASE(Wt) to its 16-bit word indices
#else
#define LT_W0 WBASE(Wt)
#endif
#define LT_HAS_BIAS (p.has_bias != 0)
#define LT_BIAS(n) bias[WBASE(Bs) + n]
#define LT_STORE(i, v) ystore(i, v)
#define LT_XLOAD(i) xload(i)
#define LT_ACT ACT
#include "linear_tile.glsl"

void main() {
    const uvec2 t = tile_xy(p.tile_group);
    linear_tile(t.x, t.y);
}
