#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_samplerless_texture_functions : require  // texelFetch on a textureBuffer
// attention, any head_dim <= 256, q/k/v through one-channel texel buffers (attention.glsl, ATTN_TEX).
#define ATTN_TEX
#include "attention.glsl"
