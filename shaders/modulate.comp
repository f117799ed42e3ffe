#version 450
#extension GL_GOOGLE_include_directive : require
// modulate: y[b, n, c] = x[b, n, c] * (1 + scale[b, c]) + shift[b, c].
#include "common.glsl"
#define USE_MODULATE
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Sh { float shift[]; };
layout(binding = 2) readonly buffer Sc { float scale[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    if (i >= p.B * p.N * p.C) return;
    uint b = i / (p.N * p.C), c = i % p.C;
    y[i] = x[i] * (1.0 + scale[p.sc_off + b * p.sc_stride + c]) + shift[p.sh_off + b * p.sh_stride + c];
}
