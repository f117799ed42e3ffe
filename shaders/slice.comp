#version 450
#extension GL_GOOGLE_include_directive : require
// slice: x as [outer, in_row] -> y [outer, out_row] = x[:, start : start + out_row].
#include "common.glsl"
#define USE_SLICE
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    if (i >= p.outer * p.out_row) return;
    uint o = i / p.out_row, r = i % p.out_row;
    y[i] = x[o * p.in_row + p.start + r];
}
