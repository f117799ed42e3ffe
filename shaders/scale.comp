#version 450
#extension GL_GOOGLE_include_directive : require
// scale: y = alpha * x + beta.
#include "unary.glsl"
float unary_op(float v) { return p.alpha * v + p.beta; }
