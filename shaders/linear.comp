// variants: f32 f16 bf16
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// linear: y[M, N] = x[M, K] @ W[N, K]^T + b[N]   (W in PyTorch layout, stored f32/f16/bf16).
// Register tiling, no shared memory: a 16x16 workgroup owns a 64x64 output tile; invocation (tx, ty)
// owns rows ty + 16i and cols tx + 16j (i, j < 4), so stores are contiguous across tx. Each k step
// loads 4 x values and 4 W values for 16 FMAs. Out-of-range rows/cols are clamped for the loads
// (branch-free K loop) and masked at the store. K is unrolled by 4 with a scalar tail.
#include "common.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
layout(local_size_x = 16, local_size_y = 16) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Wt { WTYPE w[]; };
layout(binding = 2) readonly buffer Bs { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint n0 = gl_WorkGroupID.x * 64 + gl_LocalInvocationID.x;
    uint m0 = gl_WorkGroupID.y * 64 + gl_LocalInvocationID.y;
    uint K = p.K;
    uint xr[4], wr[4];
    [[unroll]] for (uint i = 0; i < 4; ++i) {
        xr[i] = min(m0 + 16 * i, p.M - 1) * K;
        wr[i] = min(n0 + 16 * i, p.N - 1) * K;
    }
    float acc[4][4];
    [[unroll]] for (uint i = 0; i < 4; ++i)
        [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
    uint k = 0;
    for (; k + 4 <= K; k += 4) {
        vec4 a[4], b[4];
        [[unroll]] for (uint i = 0; i < 4; ++i) {
            a[i] = vec4(x[xr[i] + k], x[xr[i] + k + 1], x[xr[i] + k + 2], x[xr[i] + k + 3]);
            b[i] = vec4(W2F(w[wr[i] + k]), W2F(w[wr[i] + k + 1]), W2F(w[wr[i] + k + 2]), W2F(w[wr[i] + k + 3]));
        }
        [[unroll]] for (uint i = 0; i < 4; ++i)
            [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] += dot(a[i], b[j]);
    }
    for (; k < K; ++k) {
        float a[4], b[4];
        [[unroll]] for (uint i = 0; i < 4; ++i) {
            a[i] = x[xr[i] + k];
            b[i] = W2F(w[wr[i] + k]);
        }
        [[unroll]] for (uint i = 0; i < 4; ++i)
            [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    [[unroll]] for (uint i = 0; i < 4; ++i) {
        uint m = m0 + 16 * i;
        if (m >= p.M) break;
        [[unroll]] for (uint j = 0; j < 4; ++j) {
            uint n = n0 + 16 * j;
            if (n < p.N) y[m * p.N + n] = acc[i][j] + (p.has_bias != 0 ? bias[n] : 0.0);
        }
    }
}
