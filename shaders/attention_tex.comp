#version 450
#extension GL_GOOGLE_include_directive : require
// attention, any head_dim <= 256, q/k/v through one-channel texel buffers (attention.glsl, ATTN_TEX).
#define ATTN_TEX
#include "attention.glsl"
