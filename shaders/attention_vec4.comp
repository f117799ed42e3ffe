#version 450
#extension GL_GOOGLE_include_directive : require
// attention for head_dim % 4 == 0: 4-vector loads and registers (see attention.glsl).
#define ATTN_VEC4
#include "attention.glsl"
