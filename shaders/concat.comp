#version 450
#extension GL_GOOGLE_include_directive : require
// concat along an axis: a as [outer, na], b as [outer, nb] -> y [outer, na + nb].
#include "common.glsl"
#define USE_CONCAT
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer Bb { float b[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    uint row = p.na + p.nb;
    if (i >= p.outer * row) return;
    uint o = i / row, r = i % row;
    y[i] = r < p.na ? a[o * p.na + r] : b[o * p.nb + (r - p.na)];
}
