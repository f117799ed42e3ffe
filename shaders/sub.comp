// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
// sub: out = a - b with numpy broadcasting (see BinaryParams).
#define BINARY_OP(a, b) ((a) - (b))
#include "binary.glsl"
