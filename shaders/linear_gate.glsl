// The gated residual of a gated linear (ir::fuse folds mul_add(gate, h, res) into the linear making h; the "_gated"
// shaders, compiled with -DLINEAR_GATED): y = res + gate * h, h = act(x W^T + b) in f32 as the plain linear stores
// it. The product is rounded to f32 before the sum (precise: no fused multiply-add), as mul_add.comp computes it, so
// fused and unfused plans agree bitwise. gate (binding 3, f32) is broadcast over rows (LinearParams g_off, g_stride,
// g_rows; it may be a slice of a wider value), res (binding 4, f32) is [M, N]; y moves to binding 5 and the "_off"
// selection slot to 6. Plain shaders: y at 3, the slot at 4. Included after params.h (USE_LINEAR), before SELECT_BUF.
#ifndef KILN_LINEAR_GATE_GLSL
#define KILN_LINEAR_GATE_GLSL
#ifdef LINEAR_GATED
#define LINEAR_Y_BINDING 5
#ifdef GEMM_SPLITK  // linear_splitk.glsl's scratch after y, then the slot
#define LINEAR_SCRATCH_BINDING 6
#define LINEAR_SEL_BINDING 7
#else
#define LINEAR_SEL_BINDING 6
#endif
layout(binding = 3) readonly buffer Gate { float gate[]; };
layout(binding = 4) readonly buffer Res { float res[]; };
// h is a parameter: `precise` marks the product and the sum only, not the computation of h (as in the plain shader).
float gate_residual(uint m, uint n, float h) {
    precise float t = gate[p.g_off + (m / p.g_rows) * p.g_stride + n] * h;
    precise float r = t + res[m * p.N + n];
    return r;
}
#define LINEAR_EPILOGUE(m, n, h) gate_residual(m, n, h)
#else
#define LINEAR_Y_BINDING 3
#ifdef GEMM_SPLITK
#define LINEAR_SCRATCH_BINDING 4
#define LINEAR_SEL_BINDING 5
#else
#define LINEAR_SEL_BINDING 4
#endif
#define LINEAR_EPILOGUE(m, n, h) (h)
#endif
#endif
