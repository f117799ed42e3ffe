#version 450
#extension GL_GOOGLE_include_directive : require
// relu: y = max(x, 0) (exact).
#include "unary.glsl"
float unary_op(float v) { return v > 0.0 ? v : 0.0; }
