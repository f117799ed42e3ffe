#version 450
#extension GL_GOOGLE_include_directive : require
// attention, any head_dim <= 256: scalar loads (see attention.glsl; attention_vec4.comp serves D % 4 == 0).
#include "attention.glsl"
