// variants: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k
// ptr variant
// gated variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// linear through shared memory, for GPUs: y[M, N] = x[M, K] @ W[N, K]^T + b[N]   (K % 4 == 0; W as linear.glsl
// takes it: f32/f16/bf16/ggml blocks, the same WEIGHT_BUF bindings, so the "_ptr"/"_off" block-weight variants
// exist too). A 16 x 16 workgroup owns a BM x BN output tile (BM = 16 TM, BN = 16 TN; TM, TN in {4, 8} are
// specialization constants): invocation (tx, ty) owns rows ty + 16 i (i < TM) and cols tx + 16 j (j < TN), so
// stores are contiguous across tx. K advances in slices of BK = 16: the workgroup stages x[BM, BK] and
// W[BN, BK] (W dequantized to f32 on the way) into shared memory with 4-vector loads, transposed to k-major
// (xs[k][m], ws[k][n]: the compute loop reads ws across tx contiguously and xs as a broadcast). Double
// buffering: slice t + 1 is loaded into registers before slice t is computed from buffer t % 2, then stored to
// buffer (t + 1) % 2, whose readers (slice t - 1) the previous barrier has waited for: one barrier per slice.
// Rows past M and columns past N are clamped for the loads and masked at the store; K-quads past K read 0.
// f32 accumulation in k order, one fma per product: the sum order of linear_tile.glsl (reg, tex, linear_multi), so
// every variant gives the same bits (test_linear_smem.cpp checks it).
#include "common.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
#define BK 16u
layout(local_size_x = 16, local_size_y = 16) in;
layout(constant_id = 0) const uint TM = 4;
layout(constant_id = 1) const uint TN = 4;
const uint BM = 16u * TM, BN = 16u * TN;
const uint LX = BM / 64u, LW = BN / 64u;  // 4-vectors each invocation stages per slice (BM BK / 4 / 256)
#include "linear_gate.glsl"
SELECT_BUF(LINEAR_SEL_BINDING)
#include "linear_weights.glsl"  // W (WLOAD, W0) and the bias
#include "linear_io.glsl"  // x, y (f32 or f16) and the epilogue: ACT, XF16, YF16 (constants 2, 4, 5)

shared float xs[2][BK][BM];
shared float ws[2][BK][BN];

void main() {
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
    const uvec2 tile = tile_xy(p.tile_group);
    const uint m0 = tile.y * BM, n0 = tile.x * BN, kq = p.K / 4u;  // kq: 4-vectors per row
    const uint w0 = W0;
    // Staging map: 4-vector l = tid + 256 r of a slice is row l / 4, quad l % 4 (4 quads = BK values per row).
    const uint q = tid & 3u, r0 = tid >> 2;
    uint xrow[LX], wrow[LW];
    [[unroll]] for (uint r = 0; r < LX; ++r) xrow[r] = min(m0 + r0 + 64u * r, p.M - 1u) * kq;
    [[unroll]] for (uint r = 0; r < LW; ++r) wrow[r] = w0 + min(n0 + r0 + 64u * r, p.N - 1u) * kq;
    vec4 xv[LX], wv[LW];
    float acc[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; ++i)
        [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;

    const uint slices = (kq + 3u) / 4u;
    // Slice 0 into buffer 0.
    [[unroll]] for (uint r = 0; r < LX; ++r) xv[r] = q < kq ? x_load4(xrow[r] + q) : vec4(0.0);
    [[unroll]] for (uint r = 0; r < LW; ++r) wv[r] = q < kq ? WLOAD(wrow[r] + q) : vec4(0.0);
    [[unroll]] for (uint r = 0; r < LX; ++r)
        [[unroll]] for (uint c = 0; c < 4u; ++c) xs[0][4u * q + c][r0 + 64u * r] = xv[r][c];
    [[unroll]] for (uint r = 0; r < LW; ++r)
        [[unroll]] for (uint c = 0; c < 4u; ++c) ws[0][4u * q + c][r0 + 64u * r] = wv[r][c];
    barrier();
    for (uint t = 0; t < slices; ++t) {
        const uint cur = t & 1u;
        const bool more = t + 1u < slices;
        if (more) {  // slice t + 1 into registers: the loads overlap the FMAs below
            uint k4 = 4u * (t + 1u) + q;
            [[unroll]] for (uint r = 0; r < LX; ++r) xv[r] = k4 < kq ? x_load4(xrow[r] + k4) : vec4(0.0);
            [[unroll]] for (uint r = 0; r < LW; ++r) wv[r] = k4 < kq ? WLOAD(wrow[r] + k4) : vec4(0.0);
        }
        [[unroll]] for (uint k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            [[unroll]] for (uint i = 0; i < TM; ++i) a[i] = xs[cur][k][ty + 16u * i];
            [[unroll]] for (uint j = 0; j < TN; ++j) b[j] = ws[cur][k][tx + 16u * j];
            [[unroll]] for (uint i = 0; i < TM; ++i)
                [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        if (more) {
            const uint nxt = cur ^ 1u;
            [[unroll]] for (uint r = 0; r < LX; ++r)
                [[unroll]] for (uint c = 0; c < 4u; ++c) xs[nxt][4u * q + c][r0 + 64u * r] = xv[r][c];
            [[unroll]] for (uint r = 0; r < LW; ++r)
                [[unroll]] for (uint c = 0; c < 4u; ++c) ws[nxt][4u * q + c][r0 + 64u * r] = wv[r][c];
        }
        barrier();
    }
    [[unroll]] for (uint i = 0; i < TM; ++i) {
        uint m = m0 + ty + 16u * i;
        if (m >= p.M) break;
        [[unroll]] for (uint j = 0; j < TN; ++j) {
            uint n = n0 + tx + 16u * j;
            if (n < p.N) y_store(m, n, acc[i][j]);
        }
    }
}
