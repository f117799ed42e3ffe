// variants: f16
// ptr variant
// gated variant
// requires: GL_NV_cooperative_matrix2
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
// linear on VK_NV_cooperative_matrix2 (kernel "coopmat2"): y[M, N] = act(x[M, K] @ W[N, K]^T + b[N]) with x stored f16
// (XF16: ir::store_f16) and W f16, any M, N, K (the lowering asks K % 8 == 0: 16-byte rows).
// One workgroup owns a BM x BN block of y as one workgroup-scope accumulator (the driver spreads it over the
// workgroup's subgroups and stages it as it likes: nothing here assumes a subgroup size or a fragment shape). K
// advances in BK slices: x's BM x BK and W's BN x BK slices load straight from their buffers through tensor layouts
// ([M, K] and [N, K], row-major; W read transposed through a tensor view, B = W^T) with clamping: elements past M, N
// or K read as 0, so partial tiles need no branches and add nothing to the sums. BM, BN, BK and the workgroup size
// are specialization constants the lowering takes from the device's flexible dimensions
// (vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV; runtime/vulkan/linear_kernels.cpp).
// Epilogue: linear_io.glsl's y_value (bias, activation, the gated residual) on each accumulator element
// (coopMatPerElementNV), then one clamped tensor store of the block (elements past M or N are not written), converted
// to f16 first where y is stored f16 (one rounding of the f32 value, as y_store rounds it).
// Accuracy: f16 x f16 products are exact in f32 and summed in f32 by the device's MulAdd (the spec leaves its
// internal precision to the device; the table's probe checks it against the CPU): per output |err| <= K 2^-24
// sum|x W| as any f32 dot product, with no split (x is already f16). x stored f32 is not admitted (the split of
// linear_gemm.glsl would need per-slice scaling and two products per term: docs/jit.md).
#include "common.glsl"
#define USE_LINEAR
#include "runtime/ir/params.h"
layout(constant_id = 0) const uint BM = 128;  // the block tile
layout(constant_id = 1) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;   // K slice
layout(constant_id = 6) const uint NT = 256;  // invocations: the workgroup size the device lists for the scope
layout(local_size_x_id = 6) in;
#include "linear_gate.glsl"
SELECT_BUF(LINEAR_SEL_BINDING)
#include "linear_weights.glsl"  // the bias (and W as 4-vectors, unused here)
#include "linear_io.glsl"       // y, the epilogue: ACT, XF16 (1 here), YF16 (constants 2, 4, 5)
// x and W as f16 scalars: the tensor loads index elements.
layout(binding = 0) readonly buffer XH { float16_t xh[]; };
WEIGHT_BUF(1, Wh, float16_t, wh)
#ifdef KILN_PTR
#define wh Wh_p.data
#endif

// The epilogue of block element (r, c) at (m0 + r, n0 + c); elements past M or N (clamped, never stored) read row
// M - 1 / column N - 1 so that bias, gate and residual reads stay inside their buffers.
float epilogue(const in uint r, const in uint c, const in float v, const in uint m0, const in uint n0) {
    return y_value(min(m0 + r, p.M - 1u), min(n0 + c, p.N - 1u), v);
}

void main() {
    const uvec2 tile = tile_xy(p.tile_group);
    const uint m0 = tile.y * BM, n0 = tile.x * BN;
#define CLAMPED tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>
    CLAMPED lx = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    CLAMPED lw = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    CLAMPED ly = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lx = setTensorLayoutDimensionNV(lx, p.M, p.K);  // x [M, K]
    lw = setTensorLayoutDimensionNV(lw, p.N, p.K);  // W [N, K]
    ly = setTensorLayoutDimensionNV(ly, p.M, p.N);  // y [M, N]
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    const uint w0 = WBASE(Wh);
    for (uint k0 = 0; k0 < p.K; k0 += BK) {
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;
        coopMatLoadTensorNV(a, xh, 0, sliceTensorLayoutNV(lx, m0, BM, k0, BK));
        coopMatLoadTensorNV(b, wh, w0, sliceTensorLayoutNV(lw, n0, BN, k0, BK), transposed);
        acc = coopMatMulAdd(a, b, acc);
    }
    coopMatPerElementNV(acc, acc, epilogue, m0, n0);
    if (YF16 != 0u) {
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> h =
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
        coopMatStoreTensorNV(h, y16, 0, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
    } else {
        coopMatStoreTensorNV(acc, y, 0, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
    }
}
