#version 450
#extension GL_GOOGLE_include_directive : require
// gelu: mode 0 exact, mode 1 tanh approximation (activation.glsl).
#include "unary.glsl"
#include "activation.glsl"
float unary_op(float v) { return p.mode == 1 ? act_gelu_tanh(v) : act_gelu(v); }
