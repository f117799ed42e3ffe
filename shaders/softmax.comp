#version 450
#extension GL_GOOGLE_include_directive : require
// softmax over the last dim: y = exp(x - max) / sum exp(x - max). One workgroup of 64 per row.
#include "common.glsl"
#define USE_ROW
#include "runtime/ir/params.h"
#include "reduce.glsl"
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };

void main() {
    uint row = wg_row();
    if (row >= p.rows) return;
    uint base = row * p.cols, t = gl_LocalInvocationID.x;
    float m = -3.402823466e38;
    for (uint c = t; c < p.cols; c += 64) m = max(m, x[base + c]);
    m = wg_max(m);
    float s = 0.0;
    for (uint c = t; c < p.cols; c += 64) s += exp(x[base + c] - m);
    float inv = 1.0 / wg_sum(s);
    for (uint c = t; c < p.cols; c += 64) y[base + c] = exp(x[base + c] - m) * inv;
}
