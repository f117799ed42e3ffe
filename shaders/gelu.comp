#version 450
#extension GL_GOOGLE_include_directive : require
// gelu: mode 0 exact, 0.5 x (1 + erf(x / sqrt 2)) (erf to 1.5e-7 absolute, see mathf.glsl);
// mode 1 tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), tanh from exp(-2|u|).
#include "unary.glsl"
#include "mathf.glsl"
float unary_op(float v) {
    if (p.mode == 1) {
        float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        float e = exp_accurate(-2.0 * abs(u));
        float t = (1.0 - e) / (1.0 + e);
        return 0.5 * v * (1.0 + (u < 0.0 ? -t : t));
    }
    return 0.5 * v * (1.0 + erf_as(v * 0.70710678118654752));
}
