// variants: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k
// ptr variant
// gated variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require  // texelFetch on a textureBuffer
#extension GL_EXT_control_flow_attributes : require
// linear for K % 4 == 0 with x and W read through uniform texel buffers (linear.glsl, LINEAR_TEX; the "tex" variant
// of runtime/exec/linear_select.h).
#define LINEAR_TEX
#include "linear.glsl"
