// variants: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k
// ptr variant
// gated variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// linear for few rows (the adaLN / modulation and timestep linears, M = batch): y[M, N] = x[M, K] @ W[N, K]^T + b[N]
// (K % 4 == 0; W as linear.glsl takes it, the same bindings and "_ptr" / "_off" / "_gated" forms). At M = 2 the tiled
// kernels read W once but give each workgroup a 64- or 128-column tile: DiT-XL/2's 1152 x 1152 linears ran in 9
// to 18 workgroups on the H200's 132 multiprocessors (73-87 GFLOP/s, 61 us for 2.6 MB of W; 2026-11-28). Here a
// workgroup of NT invocations owns C output columns of R rows: L = NT / C lanes per column, lane j summing the
// 4-vectors j, j + L, j + 2L, ... of its W row (consecutive lanes read consecutive 16 or 8 bytes: coalesced) against
// the same 4-vectors of each of the R x rows. So N / C workgroups per R rows (DiT-XL/2: 288 at N = 1152), and W is
// read once per R rows (the lowering takes R = M up to 8).
// Order: each lane adds its products with one fma each, k ascending within its 4-vectors; then one invocation per
// output adds the L lanes' partial sums in lane order through shared memory. No subgroup operation, so the bits do
// not depend on the subgroup size. Another order than linear.glsl's (one chain over k): results match it within the
// f32 summation bound, K 2^-24 sum |x w|, not bitwise (as linear_gemm.glsl's).
#include "common.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
layout(constant_id = 0) const uint R = 2;    // x rows per workgroup (1..8)
layout(constant_id = 1) const uint C = 4;    // output columns per workgroup (divides NT)
layout(constant_id = 6) const uint NT = 128;  // invocations
layout(local_size_x_id = 6) in;
const uint L = NT / C;  // lanes per column
#include "linear_gate.glsl"
SELECT_BUF(LINEAR_SEL_BINDING)
#include "linear_weights.glsl"  // W (WLOAD, W0) and the bias
#include "linear_io.glsl"  // x, y (f32 or f16) and the epilogue: ACT, XF16, YF16 (constants 2, 4, 5)

shared float part[R * NT];  // partial sums: row r, column c, lane j at r NT + c L + j

void main() {
    const uint tid = gl_LocalInvocationID.x, c = tid / L, lane = tid % L;
    const uvec2 tile = tile_xy(p.tile_group);
    const uint n0 = tile.x * C, m0 = tile.y * R, kq = p.K / 4u;
    const uint wrow = W0 + min(n0 + c, p.N - 1u) * kq;  // columns past N repeat the last one, not stored
    uint xrow[R];
    float acc[R];
    [[unroll]] for (uint r = 0; r < R; ++r) xrow[r] = min(m0 + r, p.M - 1u) * kq, acc[r] = 0.0;
    for (uint k4 = lane; k4 < kq; k4 += L) {
        const vec4 wv = WLOAD(wrow + k4);
        [[unroll]] for (uint r = 0; r < R; ++r) {
            const vec4 xv = x_load4(xrow[r] + k4);
            [[unroll]] for (uint e = 0; e < 4u; ++e) acc[r] = fma(xv[e], wv[e], acc[r]);  // not .w: KILN_PTR's macro
        }
    }
    [[unroll]] for (uint r = 0; r < R; ++r) part[r * NT + tid] = acc[r];
    barrier();
    for (uint o = tid; o < R * C; o += NT) {
        const uint r = o / C, cc = o % C, m = m0 + r, n = n0 + cc;
        float s = 0.0;
        for (uint j = 0; j < L; ++j) s += part[r * NT + cc * L + j];
        if (m < p.M && n < p.N) y_store(m, n, s);
    }
}
