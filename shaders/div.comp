// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
// div: out = a / b with numpy broadcasting (see BinaryParams). Vulkan allows 2.5 ulp for f32 division.
#define BINARY_OP(a, b) ((a) / (b))
#include "binary.glsl"
