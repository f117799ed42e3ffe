#version 450
#extension GL_GOOGLE_include_directive : require
// silu: y = x * sigmoid(x), sigmoid from e = exp(-|x|) (~1 ulp, mathf.glsl: the driver's exp may be off
// by 3 + 2|x| ulp), so nothing overflows for any finite x.
#include "unary.glsl"
#include "mathf.glsl"
float unary_op(float v) {
    float e = exp_accurate(-abs(v));
    float s = v >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    return v * s;
}
