#version 450
#extension GL_GOOGLE_include_directive : require
// concat along an axis: a as [outer, na], b as [outer, nb] -> y [outer, na + nb].
// f16 activation storage (ir::store_f16): AF16 / BF16 / YF16 read a or b, or write y, as f16 through a second
// declaration of the same binding. An f16 input copied to an f16 output is unchanged; an f32 one is rounded once.
#include "common.glsl"
#define USE_CONCAT
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint AF16 = 0;
layout(constant_id = 1) const uint BF16 = 0;
layout(constant_id = 2) const uint YF16 = 0;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 0) readonly buffer A16 { float16_t a16[]; };
layout(binding = 1) readonly buffer Bb { float b[]; };
layout(binding = 1) readonly buffer Bb16 { float16_t b16[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(binding = 2) writeonly buffer Y16 { float16_t y16[]; };

void main() {
    uint i = flat_id();
    uint row = p.na + p.nb;
    if (i >= p.outer * row) return;
    uint o = i / row, r = i % row;
    if (YF16 != 0 && (r < p.na ? AF16 : BF16) != 0) {  // f16 to f16: a copy, no conversion
        y16[i] = r < p.na ? a16[o * p.na + r] : b16[o * p.nb + (r - p.na)];
        return;
    }
    float v;
    if (r < p.na)
        v = AF16 != 0 ? float(a16[o * p.na + r]) : a[o * p.na + r];
    else
        v = BF16 != 0 ? float(b16[o * p.nb + (r - p.na)]) : b[o * p.nb + (r - p.na)];
    if (YF16 != 0)
        y16[i] = float16_t(v);
    else
        y[i] = v;
}
