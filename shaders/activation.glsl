// The activations of gelu.comp / silu.comp, also applied in the store of a fused linear (linear_tile.glsl).
// One source for both, so linear + activation fused equals the two dispatches bitwise: the same f32 value
// goes through the same expression. act_apply's codes are ir::Act's: 0 none, 1 gelu, 2 gelu tanh, 3 silu.
#ifndef KILN_ACTIVATION_GLSL
#define KILN_ACTIVATION_GLSL
#include "mathf.glsl"

// gelu exact: 0.5 x (1 + erf(x / sqrt 2)) (erf to 1.5e-7 absolute, see mathf.glsl).
float act_gelu(float v) { return 0.5 * v * (1.0 + erf_as(v * 0.70710678118654752)); }

// gelu tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), tanh from exp(-2|u|).
float act_gelu_tanh(float v) {
    float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    float e = exp_accurate(-2.0 * abs(u));
    float t = (1.0 - e) / (1.0 + e);
    return 0.5 * v * (1.0 + (u < 0.0 ? -t : t));
}

// silu: x sigmoid(x), sigmoid from e = exp(-|x|) (~1 ulp, mathf.glsl: the driver's exp may be off by
// 3 + 2|x| ulp), so nothing overflows for any finite x.
float act_silu(float v) {
    float e = exp_accurate(-abs(v));
    float s = v >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    return v * s;
}

float act_apply(uint act, float v) {
    return act == 1u ? act_gelu(v) : act == 2u ? act_gelu_tanh(v) : act == 3u ? act_silu(v) : v;
}
#endif
