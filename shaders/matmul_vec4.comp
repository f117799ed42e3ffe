// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// matmul for K % 4 == 0 and N % 4 == 0: y[B, M, N] = a[B, M, K] @ b[B|1, K, N] with 4-vector loads
// (a along K, b and y along N). A 16x16 workgroup owns a 64 x 128 output tile; invocation (tx, ty)
// owns rows ty + 16i (i < 4) and the column quads tx + 16j (j < 2). Per 4 k: 4 a loads and 8 b loads
// for 128 FMAs. Rows and quads past the edge are clamped for the loads and masked at the store.
#include "common.glsl"
#define USE_MATMUL
#include "runtime/ir/params.h"
layout(local_size_x = 16, local_size_y = 16) in;
SELECT_BUF(3)
layout(binding = 0) readonly buffer A { vec4 a[]; };
WEIGHT_BUF(1, Bm, vec4, b)
#ifdef KILN_PTR
#define b Bm_p.data
#endif
layout(binding = 2) writeonly buffer Y { vec4 y[]; };

void main() {
    uint q0 = gl_WorkGroupID.x * 32 + gl_LocalInvocationID.x;  // column quad
    uint m0 = gl_WorkGroupID.y * 64 + gl_LocalInvocationID.y;
    uint bi = gl_WorkGroupID.z;
    uint K4 = p.K / 4, N4 = p.N / 4;
    uint ar[4], bq[2];
    [[unroll]] for (uint i = 0; i < 4; ++i) ar[i] = (bi * p.M + min(m0 + 16 * i, p.M - 1)) * K4;
    [[unroll]] for (uint j = 0; j < 2; ++j) bq[j] = WBASE(Bm) + bi * (p.b_batch_stride / 4) + min(q0 + 16 * j, N4 - 1);
    vec4 acc[4][2];
    [[unroll]] for (uint i = 0; i < 4; ++i)
        [[unroll]] for (uint j = 0; j < 2; ++j) acc[i][j] = vec4(0.0);
    for (uint k = 0; k < K4; ++k) {
        vec4 av[4], bv[4][2];
        [[unroll]] for (uint i = 0; i < 4; ++i) av[i] = a[ar[i] + k];
        [[unroll]] for (uint kk = 0; kk < 4; ++kk)
            [[unroll]] for (uint j = 0; j < 2; ++j) bv[kk][j] = b[bq[j] + (4 * k + kk) * N4];
        [[unroll]] for (uint i = 0; i < 4; ++i)
            [[unroll]] for (uint j = 0; j < 2; ++j)
                acc[i][j] += av[i].x * bv[0][j] + av[i].y * bv[1][j] + av[i].z * bv[2][j] + av[i].w * bv[3][j];
    }
    [[unroll]] for (uint i = 0; i < 4; ++i) {
        uint m = m0 + 16 * i;
        if (m >= p.M) break;
        [[unroll]] for (uint j = 0; j < 2; ++j) {
            uint q = q0 + 16 * j;
            if (q < N4) y[(bi * p.M + m) * N4 + q] = acc[i][j];
        }
    }
}
