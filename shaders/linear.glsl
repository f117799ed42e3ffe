// linear body: y[M, N] = x[M, K] @ W[N, K]^T + b[N]   (W in PyTorch layout, stored f32/f16/bf16/quantized).
// Register tiling, no shared memory, no barriers: a 16 x LY workgroup owns an (LY RM) x 128 output
// tile; invocation (tx, ty) owns rows ty + LY i (i < RM) and cols tx + 16j (j < 8), so stores are
// contiguous across tx. Every k step loads RM x and 8 W values for 8 RM FMAs. Out-of-range rows/cols
// are clamped for the loads (branch-free K loop) and masked at the store. LY and RM are
// specialization constants: 16 x 4 (64-row tiles) in general, 1 x 1 for small M (the adaLN / timestep
// MLPs with M = batch), where a 64-row tile would be mostly clamped duplicates.
// LINEAR_VEC4 (linear_vec4.comp, K % 4 == 0): x and W are read as 4-vectors along K, a quarter of the
// load instructions (lavapipe issues one load per lane per instruction; on GPUs: 16-byte loads).
// W_Q8_0 .. W_Q6_K (vec4 only; quantized rows are whole 32/256-value blocks): W is ggml blocks, read as
// 16-bit words and dequantized 4 values at a time in registers (quant.glsl); no full-precision copy.
#include "common.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
#define RN 8
layout(local_size_x = 16, local_size_y_id = 1) in;
layout(constant_id = 0) const uint RM = 4;
layout(constant_id = 1) const uint LY = 16;
SELECT_BUF(4)
#ifdef LINEAR_VEC4
#define VT vec4
layout(binding = 0) readonly buffer X { vec4 x[]; };
#if defined(W_F16)
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
#define KSTEPS (p.K / 4)
#else
#define VT float
layout(binding = 0) readonly buffer X { float x[]; };
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
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint n0 = gl_WorkGroupID.x * (16 * RN) + gl_LocalInvocationID.x;
    uint m0 = gl_WorkGroupID.y * (LY * RM) + gl_LocalInvocationID.y;
    uint ks = KSTEPS;
    uint xr[RM], wr[RN];  // row starts in units of VT
    [[unroll]] for (uint i = 0; i < RM; ++i) xr[i] = min(m0 + LY * i, p.M - 1) * ks;
#ifdef W_QUANT
    const uint w0 = 0u;  // quant.glsl adds WBASE(Wt) to its 16-bit word indices
#else
    const uint w0 = WBASE(Wt);
#endif
    [[unroll]] for (uint j = 0; j < RN; ++j) wr[j] = w0 + min(n0 + 16 * j, p.N - 1) * ks;
    float acc[RM][RN];
    [[unroll]] for (uint i = 0; i < RM; ++i)
        [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
    for (uint k = 0; k < ks; ++k) {
        VT a[RM], b[RN];
        [[unroll]] for (uint i = 0; i < RM; ++i) a[i] = x[xr[i] + k];
        [[unroll]] for (uint j = 0; j < RN; ++j) b[j] = WLOAD(wr[j] + k);
        [[unroll]] for (uint i = 0; i < RM; ++i)
            [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] += dot(a[i], b[j]);
    }
    [[unroll]] for (uint i = 0; i < RM; ++i) {
        uint m = m0 + LY * i;
        if (m >= p.M) break;
        [[unroll]] for (uint j = 0; j < RN; ++j) {
            uint n = n0 + 16 * j;
            if (n < p.N) y[m * p.N + n] = acc[i][j] + (p.has_bias != 0 ? bias[WBASE(Bs) + n] : 0.0);
        }
    }
}
