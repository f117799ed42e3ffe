// variants: f16
// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_NV_cooperative_matrix : require
// linear on cooperative matrices (VK_NV_cooperative_matrix, 16 x 16 x 16, f16 A/B, f32 C): y[M, N] = x[M, K] @
// W[N, K]^T + b[N], K % 4 == 0, W f16 only (x is rounded to f16 on the way into shared memory; W f16 is exact).
// NEVER RUN: no device this was written on has the extension; it compiles at build time and passes spirv-val
// (shaders/CMakeLists.txt), and is chosen only on a device reporting the 16x16x16 f16/f16/f32/f32 subgroup shape,
// subgroups of 32 and vulkanMemoryModel (which this SPIR-V declares), whose probe then matches the CPU.
// A workgroup of 4 subgroups of 32 (local size 128; the NV extension's subgroup size) owns a 64 x 64 output
// tile, each subgroup a 32 x 32 quarter as 2 x 2 accumulators. K advances in slices of 32 staged as f16 in shared
// memory, double-buffered as in linear_smem.comp (one barrier per slice): xs[m][k] is A row-major, ws[n][k] is
// B = W^T column-major; row stride 40 halves (80 bytes: 16-byte aligned, staggers banks). Each subgroup's 16 x 16
// results go through a small f32 stage so the store can mask rows >= M, cols >= N and add the bias.
#include "common.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
#define BK 32u
#define LDS 40u
layout(local_size_x = 128) in;
SELECT_BUF(4)
layout(binding = 0) readonly buffer X { vec4 x[]; };
WEIGHT_BUF(1, Wt, f16vec4, w)
WEIGHT_BUF(2, Bs, float, bias)
#ifdef KILN_PTR
#define w Wt_p.data
#define bias Bs_p.data
#endif
layout(binding = 3) writeonly buffer Y { float y[]; };

shared float16_t xs[2][64u * LDS];
shared float16_t ws[2][64u * LDS];
shared float stage[4][256];

void main() {
    const uint tid = gl_LocalInvocationID.x, sg = tid / 32u, lane = tid % 32u;
    const uint m0 = gl_WorkGroupID.y * 64u, n0 = gl_WorkGroupID.x * 64u, kq = p.K / 4u;
    const uint w0 = WBASE(Wt);
    // Staging: a slice is 64 rows x 8 quads of x and of W; invocation tid stages quads tid and tid + 128.
    uint row[4], quad[4];
    [[unroll]] for (uint r = 0; r < 4u; ++r) row[r] = (tid + 128u * r) >> 3, quad[r] = (tid + 128u * r) & 7u;
    vec4 xv[4];
    f16vec4 wv[4];
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][2];
    [[unroll]] for (uint i = 0; i < 2u; ++i)
        [[unroll]] for (uint j = 0; j < 2u; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    const uint slices = (kq + 7u) / 8u;
    [[unroll]] for (uint r = 0; r < 4u; ++r) {
        uint k4 = quad[r];
        xv[r] = k4 < kq ? x[min(m0 + row[r], p.M - 1u) * kq + k4] : vec4(0.0);
        wv[r] = k4 < kq ? w[w0 + min(n0 + row[r], p.N - 1u) * kq + k4] : f16vec4(0.0);
    }
    [[unroll]] for (uint r = 0; r < 4u; ++r)
        [[unroll]] for (uint c = 0; c < 4u; ++c) {
            xs[0][row[r] * LDS + 4u * quad[r] + c] = float16_t(xv[r][c]);
            ws[0][row[r] * LDS + 4u * quad[r] + c] = wv[r][c];
        }
    barrier();
    const uint sm = (sg >> 1) * 32u, sn = (sg & 1u) * 32u;  // this subgroup's quarter
    for (uint t = 0; t < slices; ++t) {
        const uint cur = t & 1u;
        const bool more = t + 1u < slices;
        if (more)
            [[unroll]] for (uint r = 0; r < 4u; ++r) {
                uint k4 = 8u * (t + 1u) + quad[r];
                xv[r] = k4 < kq ? x[min(m0 + row[r], p.M - 1u) * kq + k4] : vec4(0.0);
                wv[r] = k4 < kq ? w[w0 + min(n0 + row[r], p.N - 1u) * kq + k4] : f16vec4(0.0);
            }
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16u) {
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2], b[2];
            [[unroll]] for (uint i = 0; i < 2u; ++i)
                coopMatLoadNV(a[i], xs[cur], (sm + 16u * i) * LDS + kk, LDS, false);
            [[unroll]] for (uint j = 0; j < 2u; ++j)
                coopMatLoadNV(b[j], ws[cur], (sn + 16u * j) * LDS + kk, LDS, true);
            [[unroll]] for (uint i = 0; i < 2u; ++i)
                [[unroll]] for (uint j = 0; j < 2u; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
        }
        if (more) {
            const uint nxt = cur ^ 1u;
            [[unroll]] for (uint r = 0; r < 4u; ++r)
                [[unroll]] for (uint c = 0; c < 4u; ++c) {
                    xs[nxt][row[r] * LDS + 4u * quad[r] + c] = float16_t(xv[r][c]);
                    ws[nxt][row[r] * LDS + 4u * quad[r] + c] = wv[r][c];
                }
        }
        barrier();
    }
    [[unroll]] for (uint i = 0; i < 2u; ++i)
        [[unroll]] for (uint j = 0; j < 2u; ++j) {
            coopMatStoreNV(acc[i][j], stage[sg], 0, 16, false);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            [[unroll]] for (uint e = lane; e < 256u; e += 32u) {
                uint m = m0 + sm + 16u * i + e / 16u, n = n0 + sn + 16u * j + e % 16u;
                if (m < p.M && n < p.N)
                    y[m * p.N + n] = stage[sg][e] + (p.has_bias != 0 ? bias[WBASE(Bs) + n] : 0.0);
            }
            subgroupBarrier();
        }
}
