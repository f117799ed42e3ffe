#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require  // texelFetch on a textureBuffer
// attention for head_dim % 4 == 0, q/k/v through RGBA32F texel buffers (attention.glsl, ATTN_VEC4 and ATTN_TEX).
#define ATTN_VEC4
#define ATTN_TEX
#include "attention.glsl"
