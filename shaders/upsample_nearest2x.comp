#version 450
#extension GL_GOOGLE_include_directive : require
// upsample_nearest2x: y[bc, i, j] = x[bc, i / 2, j / 2], [BC, H, W] -> [BC, 2H, 2W].
#include "common.glsl"
#define USE_UPSAMPLE
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    uint W2 = 2 * p.W, H2 = 2 * p.H;
    if (i >= p.BC * H2 * W2) return;
    uint j = i % W2, r = (i / W2) % H2, bc = i / (W2 * H2);
    y[i] = x[(bc * p.H + r / 2) * p.W + j / 2];
}
