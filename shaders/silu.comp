#version 450
#extension GL_GOOGLE_include_directive : require
// silu: y = x * sigmoid(x), sigmoid from e = exp(-|x|) so nothing overflows for any finite x.
#include "unary.glsl"
float unary_op(float v) {
    float e = exp(-abs(v));
    float s = v >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    return v * s;
}
