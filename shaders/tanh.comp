#version 450
#extension GL_GOOGLE_include_directive : require
// tanh: from e = exp(-2|x|) (mathf.glsl's exp_accurate, ~1 ulp), (1 - e) / (1 + e) with the sign of x, so nothing
// overflows for any finite x; a few ulp from the correctly rounded value.
#include "unary.glsl"
#include "mathf.glsl"
float unary_op(float v) {
    float e = exp_accurate(-2.0 * abs(v));
    float t = (1.0 - e) / (1.0 + e);
    return v < 0.0 ? -t : t;
}
