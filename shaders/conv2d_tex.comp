// variants: f32 f16 bf16
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require  // texelFetch on a textureBuffer
#extension GL_EXT_control_flow_attributes : require
// conv2d with x and W read through uniform texel buffers (conv2d.glsl, CONV2D_TEX), chosen where the device's
// measured linear table prefers texel loads (runtime/exec/linear_select.h).
#define CONV2D_TEX
#include "conv2d.glsl"
