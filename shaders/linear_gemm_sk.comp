// variants: f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k
// ptr variant
// gated variant
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// linear_gemm.comp split along K (linear_splitk.glsl): coopmat_sk's scalar twin, on any device.
#define GEMM_SPLITK
#include "linear_gemm.glsl"
