// variants: f32 f16 bf16
// ptr variant
// gated variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// linear, any K: scalar loads (see linear.glsl; linear_vec4.comp serves K % 4 == 0).
#include "linear.glsl"
