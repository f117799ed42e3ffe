// The activation storage and the epilogue of the tiled linear kernels (linear_smem.comp, linear_coopmat.comp,
// linear_cm2.comp), so every variant implements the same set: x and y stored as f32 or f16 (ir::store_f16; XF16 /
// YF16, specialization constants 4 and 5 as in linear.glsl), and y = act(acc + b) at the store with ACT (constant 2,
// ir::Act, activation.glsl), then in the "_gated" shaders the gated residual (linear_gate.glsl). The includer includes
// linear_gate.glsl before SELECT_BUF(LINEAR_SEL_BINDING), and declares the weight bindings 1 and 2 (`bias`,
// WBASE(Bs)) and `p`.
#ifndef KILN_LINEAR_IO_GLSL
#define KILN_LINEAR_IO_GLSL
#include "activation.glsl"
layout(constant_id = 2) const uint ACT = 0;
layout(constant_id = 4) const uint XF16 = 0;
layout(constant_id = 5) const uint YF16 = 0;
layout(binding = 0) readonly buffer X { vec4 x[]; };
layout(binding = 0) readonly buffer X16 { f16vec4 x16[]; };
layout(binding = LINEAR_Y_BINDING) writeonly buffer Y { float y[]; };
layout(binding = LINEAR_Y_BINDING) writeonly buffer Y16 { float16_t y16[]; };

// 4-vector i of x (row-major [M, K / 4]).
vec4 x_load4(uint i) { return XF16 != 0u ? vec4(x16[i]) : x[i]; }

// Output element (m, n) from its f32 sum, before storage: bias, activation, the gated residual ("_gated").
// linear_cm2.comp applies it to its accumulator element-wise (coopMatPerElementNV) and stores the matrix itself.
float y_value(uint m, uint n, float acc) {
    return LINEAR_EPILOGUE(m, n, act_apply(ACT, acc + (p.has_bias != 0 ? bias[WBASE(Bs) + n] : 0.0)));
}

// Output element (m, n) from its f32 sum: y_value, then the store (rounded once where y is f16).
void y_store(uint m, uint n, float acc) {
    const float v = y_value(m, n, acc);
    if (YF16 != 0u)
        y16[m * p.N + n] = float16_t(v);
    else
        y[m * p.N + n] = v;
}
#endif
