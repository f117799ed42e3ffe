#version 450
#extension GL_GOOGLE_include_directive : require
// permute: out index i decomposed over out_shape (outermost first); src = sum idx[d] * in_stride[d],
// in_stride[d] being the input stride of the axis that becomes output axis d.
#include "common.glsl"
#define USE_PERMUTE
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    if (i >= p.n) return;
    uint src = 0, rem = i;
    for (int d = int(p.rank) - 1; d >= 0; --d) {
        src += (rem % p.out_shape[d]) * p.in_stride[d];
        rem /= p.out_shape[d];
    }
    y[i] = x[src];
}
