#version 450
#extension GL_GOOGLE_include_directive : require
// slice: x as [outer, in_row] -> y [outer, out_row] = x[:, start : start + out_row].
// f16 activation storage (ir::store_f16): XF16 / YF16 read x or write y as f16 through a second declaration of the
// same binding. f16 to f16 is a copy; f32 to f16 rounds once.
#include "common.glsl"
#define USE_SLICE
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint XF16 = 0;
layout(constant_id = 1) const uint YF16 = 0;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 0) readonly buffer X16 { float16_t x16[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(binding = 1) writeonly buffer Y16 { float16_t y16[]; };

void main() {
    uint i = flat_id();
    if (i >= p.outer * p.out_row) return;
    uint o = i / p.out_row, r = i % p.out_row, j = o * p.in_row + p.start + r;
    if (YF16 != 0 && XF16 != 0) {
        y16[i] = x16[j];
        return;
    }
    const float v = XF16 != 0 ? float(x16[j]) : x[j];
    if (YF16 != 0)
        y16[i] = float16_t(v);
    else
        y[i] = v;
}
