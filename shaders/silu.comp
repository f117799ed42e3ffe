#version 450
#extension GL_GOOGLE_include_directive : require
// silu: y = x * sigmoid(x) (activation.glsl).
#include "unary.glsl"
#include "activation.glsl"
float unary_op(float v) { return act_silu(v); }
