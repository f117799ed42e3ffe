#version 450
#extension GL_GOOGLE_include_directive : require
// tanh: mathf.glsl's tanh_accurate (from exp_accurate(-2|x|), a few ulp, no overflow for any finite x).
#include "unary.glsl"
#include "mathf.glsl"
float unary_op(float v) { return tanh_accurate(v); }
