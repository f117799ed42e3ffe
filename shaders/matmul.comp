// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// matmul: y[B, M, N] = a[B, M, K] @ b[B|1, K, N]. Same register tiling as linear.comp (64x64 tile
// per 16x16 workgroup, 4x4 per invocation at stride 16, clamped loads, masked stores); batch on z.
// b rows are read along N, so loads of b are contiguous across tx.
#include "common.glsl"
#define USE_MATMUL
#include "runtime/ir/params.h"
layout(local_size_x = 16, local_size_y = 16) in;
SELECT_BUF(3)
layout(binding = 0) readonly buffer A { float a[]; };
WEIGHT_BUF(1, Bm, float, b)
#ifdef KILN_PTR
#define b Bm_p.data
#endif
layout(binding = 2) writeonly buffer Y { float y[]; };

void main() {
    uint n0 = gl_WorkGroupID.x * 64 + gl_LocalInvocationID.x;
    uint m0 = gl_WorkGroupID.y * 64 + gl_LocalInvocationID.y;
    uint bi = gl_WorkGroupID.z;
    uint K = p.K, N = p.N;
    uint ar[4], bc[4];
    [[unroll]] for (uint i = 0; i < 4; ++i) {
        ar[i] = (bi * p.M + min(m0 + 16 * i, p.M - 1)) * K;
        bc[i] = WBASE(Bm) + bi * p.b_batch_stride + min(n0 + 16 * i, N - 1);
    }
    float acc[4][4];
    [[unroll]] for (uint i = 0; i < 4; ++i)
        [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
    for (uint k = 0; k < K; ++k) {
        float av[4], bv[4];
        [[unroll]] for (uint i = 0; i < 4; ++i) {
            av[i] = a[ar[i] + k];
            bv[i] = b[bc[i] + k * N];
        }
        [[unroll]] for (uint i = 0; i < 4; ++i)
            [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    [[unroll]] for (uint i = 0; i < 4; ++i) {
        uint m = m0 + 16 * i;
        if (m >= p.M) break;
        [[unroll]] for (uint j = 0; j < 4; ++j) {
            uint n = n0 + 16 * j;
            if (n < N) y[(bi * p.M + m) * N + n] = acc[i][j];
        }
    }
}
