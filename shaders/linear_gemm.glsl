// The tiled GEMM body of linear_coopmat.comp (GEMM_COOPMAT: the inner products on cooperative matrices) and
// linear_gemm.comp (scalar f32 FMAs on the same f16 tiles, any device): the tiling, loads, dequantization, per-slice
// scaling and hi / lo split, double buffering, barriers and epilogue are this one text, so lavapipe 22.3 (no
// cooperative matrices) runs everything the GPU path runs but the innermost instructions, and checks its accuracy
// at the f32-like bound below (so does lavapipe 26 with cooperative matrices: tests/ops/test_linear_smem.cpp).
// y[M, N] = act(x[M, K] @ W[N, K]^T + b[N]), K % 4 == 0, W f16, bf16 or a ggml block format (linear_weights.glsl,
// as linear_smem.comp reads it). The matrix shape CM x CN x CK (f16 A, B; f32 C) is one the device lists
// (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR: 16 x 16 x 16 on NVIDIA, 8 x 8 x 8 on lavapipe 26), SG its
// subgroup size: both specialization constants, nothing assumes 32 lanes. The scalar form takes 16 x 16 x 16 or
// 8 x 8 x 8 (what fits the device's shared memory) with "subgroups" of SG = CM CN / 8 invocations (not the
// device's: only the per-slice maxima use real subgroup operations, and they are per subgroup whatever its size);
// it stores its results from registers, the cooperative form through a per-subgroup f32 stage.
// Tiling (specialization constants 7-12, so one SPIR-V serves every tile): a workgroup of WM x WN subgroups owns a
// BM x BN = (WM FM CM) x (WN FN CN) output tile, each subgroup FM x FN accumulators (kernel "coopmat" / "gemm": 2 x 2
// subgroups of 2 x 2, 64 x 64 at 16 x 16 x 16; "coopmat128" / "gemm128": 4 x 2 subgroups of 2 x 4, 128 x 128). K
// advances in slices of BK = 32 or 16, staged in shared memory as f16 (xs[m][k]: A row-major; ws[n][k]: B = W^T
// column-major; row stride BK + 8 halves, 16-byte rows), in NBUF = 2 buffers (loads of slice t + 1 stored while
// slice t multiplies) or 1; the lowering (runtime/vulkan/linear_kernels.cpp, gemm_config) takes, per shape, the
// first of (32, 2), (16, 2), (32, 1), (16, 1) whose shared memory fits the device (docs/jit.md has the sizes). Either way the global loads of slice t + 1
// are in flight (in registers) while slice t multiplies. One barrier per slice (two with one buffer): it publishes
// the stored slice t and the maxima of slice t + 1 (three rotating slots, each cleared two slices before its reuse).
// Weights that are not f16 are dequantized to f32 on the way (WLOAD) and enter the shared tile as f16, as ggml's
// mul_mm does, but scaled and split as x is (below).
// Accuracy: x is not rounded to f16. Each slice is scaled by a power of two 2^s (from the slice's max |x|, one
// per workgroup and slice) so |x 2^s| < 2^14, then split x 2^s = hi + lo with hi = f16(x 2^s), lo = f16(x 2^s - hi)
// (the subtraction is exact). hi W and lo W are exact products accumulated in f32, and the slice's sum is scaled
// back by 2^-s (exact). Per product: |x - (hi + lo) 2^-s| <= 2^-22 |x| + 2^-25 2^-s (f16 subnormals), i.e. f32-like
// (2^-24) accuracy at twice the matrix operations, for any finite x (no f16 overflow), where the device's MulAdd
// keeps f32 precision (the spec leaves that to the device; the probe checks it, lavapipe 26 does). split16 rounds
// hi through the float's bits: f16(v - f32(f16(v))) under `precise` was folded to 0 by lavapipe 26's compiler.
// W: f16 enters as stored (exact). Other dtypes get their own per-slice power of two 2^u (max |W| of the slice's
// BN rows) so |W 2^u| < 2^14: bf16 (8 significant bits) is then exact in f16 wherever W 2^u is a normal f16 (|W| >
// 2^-28 max |W|; below, 2^-25 2^-u absolute), so bf16 costs what f16 does. Dequantized ggml values (a block scale
// times a small integer: up to 19 significant bits) are split like x (W_SPLIT: hi + lo, 2^-22 relative) and the
// slice runs three products, lo x hi W, hi x lo W, hi x hi W (lo x lo W, <= 2^-22 |x W|, is left out): <= 3 2^-22
// |x W| per product, still f32-like. The slice's sum is scaled back by 2^-s 2^-u (two exact multiplications).
// x stored f16 (XF16) is exact in f16: it enters unscaled, lo = 0 and its products are skipped (half the work);
// with f16 W too nothing is scaled, and each product adds straight into its running f32 sum (no slice sums).
// The scalar form adds each f16 x f16 product (exact in f32) with one fma, k ascending within a CK block: exactly
// what the bound above assumes of the MulAdd, so there it holds as stated on every device.
// The summation order differs from linear.glsl's, so results match it within that bound, not bitwise. The epilogue
// (bias, activation, f16 storage) is linear_io.glsl's, shared with linear_smem.comp. GEMM_SPLITK: linear_splitk.glsl.
#include "common.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
layout(constant_id = 0) const uint CM = 16;  // the matrix shape
layout(constant_id = 1) const uint CN = 16;
layout(constant_id = 3) const uint CK = 16;
layout(constant_id = 6) const uint NT = 128;  // invocations: WM WN subgroups (coopmat: of the device's size)
layout(constant_id = 7) const uint WM = 2;    // the subgroup grid
layout(constant_id = 8) const uint WN = 2;
layout(constant_id = 9) const uint FM = 2;  // accumulators per subgroup
layout(constant_id = 10) const uint FN = 2;
layout(constant_id = 11) const uint BK = 32;   // K slice (16 or 32; CK divides it)
layout(constant_id = 12) const uint NBUF = 2;  // slice buffers (1 or 2)
// KILN_PRECISION=fast: x and ggml W enter as hi alone (no lo tiles read, one product per term; docs/precision.md):
// per product (2^-10 + 2^-22) |x W| + 2^-25 2^-s |W| (f16 subnormals of the scaled x) instead of the split's bound.
layout(constant_id = 13) const uint FAST = 0;
layout(local_size_x_id = 6) in;
const uint NSG = WM * WN, SG = NT / NSG, BM = WM * FM * CM, BN = WN * FN * CN;
const uint LDS = BK + 8u;  // shared row stride (halves)
const uint QR = BK / 4u;   // 4-vectors per row and slice (not QK: quant.glsl's block size)
const uint LX = QR * BM / NT, LW = QR * BN / NT;  // 4-vectors each invocation stages per slice (whole: the lowering)
#include "linear_gate.glsl"
SELECT_BUF(LINEAR_SEL_BINDING)
#include "linear_weights.glsl"  // W (WLOAD, W0) and the bias
#ifndef W_F16
#define W_SCALED  // W has its own per-slice power of two
#endif
#ifdef W_QUANT
#define W_SPLIT  // and is split into hi + lo
#endif
#include "linear_io.glsl"  // x, y (f32 or f16) and the epilogue: ACT, XF16, YF16 (constants 2, 4, 5)
#include "split16.glsl"    // slice_scale, split16, hi16: the per-slice power of two and the hi / lo split
// x stored f32 is scaled and split per slice; x stored f16 enters the tile as stored (exact: lo would be 0), and
// its lo products are skipped.
// FAST: x stored f32 is still scaled (f16's range), but rounded to hi alone.
const bool XSCALE = XF16 == 0u, XSPLIT = XSCALE && FAST == 0u;
#ifdef W_SCALED
const bool WSCALE = true;
#else
const bool WSCALE = false;
#endif
// Where neither is scaled per slice (x stored f16, W f16: every slice's sum is in the same units) the products add
// straight into the accumulators: no per-slice partial sums (half the accumulator registers), no slice maxima.
const bool SLICED = XSCALE || WSCALE;
#ifdef GEMM_SPLITK
#include "linear_splitk.glsl"  // K ranges, partial sums to scratch (GEMM_STORE) and the reduce
#else
#define GEMM_STORE y_store
#endif

// Slice buffer b of x starts at b BM LDS, of W at b BN LDS.
shared float16_t xh[NBUF * BM * LDS];
shared float16_t xl[NBUF * BM * LDS];
shared float16_t ws[NBUF * BN * LDS];
#ifdef W_SPLIT
shared float16_t wl[NBUF * BN * LDS];
#endif
shared uint smax[3];               // per slice (mod 3): max |x| as f32 bits (monotonic for x >= 0)
#ifdef W_SCALED
shared uint smaxw[3];              // the same for W
#endif
#ifdef GEMM_COOPMAT
shared float stage[NSG][CM * CN];  // one accumulator per subgroup on its way to the epilogue (its layout is opaque)
#endif

#ifdef GEMM_COOPMAT
#define ACC coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>
#define ACC_ZERO ACC(0.0)
#define ACC_SCALE(a, f) ((a) * (f))
#define ACC_ADD(a, b) a = (a) + (b)
#else
// The scalar form: subgroup sg's accumulator is spread over its SG invocations, element e = lane + SG u (u < EPT)
// at row e / CN, column e % CN of the CM x CN tile (the lowering makes CM CN = 8 SG).
#define EPT 8u
struct Acc {
    float e[EPT];
};
#define ACC Acc
#define ACC_ZERO Acc(float[EPT](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
Acc ACC_SCALE(Acc a, float f) {
    [[unroll]] for (uint u = 0; u < EPT; ++u) a.e[u] *= f;
    return a;
}
#define ACC_ADD(a, b)                                      \
    {                                                      \
        const Acc b_ = (b);                                \
        [[unroll]] for (uint u = 0; u < EPT; ++u) a.e[u] += b_.e[u]; \
    }
// P += A B over k in [kk, kk + CK): A = X's rows a0 .., B = W's rows (columns of W^T) b0 .., offsets in the slice
// buffers xb, wb; f16 x f16 products (exact in f32) added in k order, one fma each.
#define SCALAR_MMA(P, X, W, xb, wb, a0, b0, kk)                                                                  \
    [[unroll]] for (uint u = 0; u < EPT; ++u) {                                                                \
        const uint e = lane + SG * u, xo = (xb) + ((a0) + e / CN) * LDS + (kk);                                \
        const uint wo = (wb) + ((b0) + e % CN) * LDS + (kk);                                                   \
        float s = P.e[u];                                                                                      \
        for (uint k = 0; k < CK; ++k) s = fma(float(X[xo + k]), float(W[wo + k]), s);                          \
        P.e[u] = s;                                                                                            \
    }
#endif

void main() {
#ifdef GEMM_COOPMAT
    const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#else
    const uint tid = gl_LocalInvocationID.x, sg = tid / SG, lane = tid % SG;
#endif
#ifdef GEMM_SPLITK
    if (PHASE != 0u) {
        splitk_reduce();
        return;
    }
    const uvec2 kr = splitk_range((p.K / 4u + QR - 1u) / QR);  // this workgroup's K slices (first, count)
#else
    const uvec2 kr = uvec2(0u, (p.K / 4u + QR - 1u) / QR);
#endif
    const uvec2 tile = tile_xy(p.tile_group);
    const uint m0 = tile.y * BM, n0 = tile.x * BN, kq = p.K / 4u;
    const uint w0 = W0;
    // Staging map: 4-vector l = tid + NT r of a slice is row l / QR, quad l % QR (QR quads = BK values per row).
    vec4 xv[LX];
#ifdef W_SCALED
    vec4 wv[LW];
#else
    f16vec4 wv[LW];
#endif
    if (tid < 3u) {
        smax[tid] = 0u;
#ifdef W_SCALED
        smaxw[tid] = 0u;
#endif
    }
    ACC acc[FM][FN];
    [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = ACC_ZERO;
    const uint kt0 = kr.x, slices = kr.y;
    barrier();
    #include "linear_gemm_stage.glsl"  // LOAD_SLICE, STORE_SLICE, W_SCALE
    LOAD_SLICE(0u)
    barrier();
    float sc = XSCALE ? slice_scale(smax[0]) : 1.0, scw = W_SCALE(0u);
    STORE_SLICE(0u, sc, scw)
    const uint sm = (sg / WN) * FM * CM, sn = (sg % WN) * FN * CN;  // this subgroup's part of the tile
    for (uint t = 0; t < slices; ++t) {
        const uint xb = (t % NBUF) * BM * LDS, wb = (t % NBUF) * BN * LDS;
        const bool more = t + 1u < slices;
        // Slot (t + 2) % 3 was last read by slice t - 1's store, before the previous barrier; slice t + 2 adds to it
        // after the next one.
        if (tid == 0u) {
            smax[(t + 2u) % 3u] = 0u;
#ifdef W_SCALED
            smaxw[(t + 2u) % 3u] = 0u;
#endif
        }
        if (more) LOAD_SLICE(t + 1u)  // in flight while slice t multiplies
        barrier();  // slice t is stored and slice t + 1's maxima are in; with two buffers, the other one is free
        ACC part[FM][FN];  // the slice's sums (SLICED), else the running sums themselves
        [[unroll]] for (uint i = 0; i < FM; ++i)
            [[unroll]] for (uint j = 0; j < FN; ++j) {
                if (SLICED) part[i][j] = ACC_ZERO;
                else part[i][j] = acc[i][j];
            }
        [[unroll]] for (uint kk = 0; kk < BK; kk += CK) {
#ifdef GEMM_COOPMAT
            coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> b[FN];
            [[unroll]] for (uint j = 0; j < FN; ++j)
                coopMatLoad(b[j], ws, wb + (sn + CN * j) * LDS + kk, LDS, gl_CooperativeMatrixLayoutColumnMajor);
#ifdef W_SPLIT
            coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> bl[FN];
            if (FAST == 0u)
                [[unroll]] for (uint j = 0; j < FN; ++j)
                    coopMatLoad(bl[j], wl, wb + (sn + CN * j) * LDS + kk, LDS, gl_CooperativeMatrixLayoutColumnMajor);
#endif
            [[unroll]] for (uint i = 0; i < FM; ++i) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> ah, al;
                coopMatLoad(ah, xh, xb + (sm + CM * i) * LDS + kk, LDS, gl_CooperativeMatrixLayoutRowMajor);
                if (XSPLIT)
                    coopMatLoad(al, xl, xb + (sm + CM * i) * LDS + kk, LDS, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint j = 0; j < FN; ++j) {
                    if (XSPLIT) part[i][j] = coopMatMulAdd(al, b[j], part[i][j]);
#ifdef W_SPLIT
                    if (FAST == 0u) part[i][j] = coopMatMulAdd(ah, bl[j], part[i][j]);
#endif
                    part[i][j] = coopMatMulAdd(ah, b[j], part[i][j]);
                }
            }
#else
            [[unroll]] for (uint i = 0; i < FM; ++i)
                [[unroll]] for (uint j = 0; j < FN; ++j) {
                    if (XSPLIT) SCALAR_MMA(part[i][j], xl, ws, xb, wb, sm + CM * i, sn + CN * j, kk)
#ifdef W_SPLIT
                    if (FAST == 0u) SCALAR_MMA(part[i][j], xh, wl, xb, wb, sm + CM * i, sn + CN * j, kk)
#endif
                    SCALAR_MMA(part[i][j], xh, ws, xb, wb, sm + CM * i, sn + CN * j, kk)
                }
#endif
        }
        const float inv = 1.0 / sc, invw = 1.0 / scw;  // powers of two (2^-100 .. 2^114): exact
        [[unroll]] for (uint i = 0; i < FM; ++i)
            [[unroll]] for (uint j = 0; j < FN; ++j) {
                if (!SLICED) {
                    acc[i][j] = part[i][j];
                } else if (WSCALE) {
                    ACC_ADD(acc[i][j], ACC_SCALE(ACC_SCALE(part[i][j], inv), invw));
                } else {
                    ACC_ADD(acc[i][j], ACC_SCALE(part[i][j], inv));
                }
            }
        if (more) {
            if (NBUF == 1u) barrier();  // the one buffer: every subgroup has multiplied slice t
            sc = XSCALE ? slice_scale(smax[(t + 1u) % 3u]) : 1.0;
            scw = W_SCALE(t + 1u);
            STORE_SLICE((t + 1u) % NBUF, sc, scw)
        }
    }
    // The epilogue, element e of accumulator (i, j) at row e / CN, column e % CN of its tile: the cooperative form
    // stages each accumulator through shared memory (one subgroup's own slot); the scalar form holds its elements.
    [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) {
#ifdef GEMM_COOPMAT
            coopMatStore(acc[i][j], stage[sg], 0, CN, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < CM * CN; e += SG) {
                const uint m = m0 + sm + CM * i + e / CN, n = n0 + sn + CN * j + e % CN;
                if (m < p.M && n < p.N) GEMM_STORE(m, n, stage[sg][e]);
            }
            subgroupBarrier();
#else
            [[unroll]] for (uint u = 0; u < EPT; ++u) {
                const uint e = lane + SG * u, m = m0 + sm + CM * i + e / CN, n = n0 + sn + CN * j + e % CN;
                if (m < p.M && n < p.N) GEMM_STORE(m, n, acc[i][j].e[u]);
            }
#endif
        }
}
