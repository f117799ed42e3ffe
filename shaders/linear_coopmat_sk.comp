// variants: f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k
// ptr variant
// gated variant
// requires: GL_KHR_cooperative_matrix
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_cooperative_matrix : require
// linear_coopmat.comp split along K (linear_splitk.glsl): partial sums, then a reduce dispatch of this shader.
#define GEMM_COOPMAT
#define GEMM_SPLITK
#include "linear_gemm.glsl"
