#version 450
#extension GL_GOOGLE_include_directive : require
// modulate: y[b, n, c] = x[b, n, c] * (1 + scale[b, c]) + shift[b, c]. YF16: y stored f16 (ir::store_f16), rounded
// once at the store through a second declaration of the binding.
#include "common.glsl"
#define USE_MODULATE
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Sh { float shift[]; };
layout(binding = 2) readonly buffer Sc { float scale[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(binding = 3) writeonly buffer Y16 { float16_t y16[]; };
layout(constant_id = 0) const uint YF16 = 0;

void main() {
    uint i = flat_id();
    if (i >= p.B * p.N * p.C) return;
    uint b = i / (p.N * p.C), c = i % p.C;
    const float v = x[i] * (1.0 + scale[p.sc_off + b * p.sc_stride + c]) + shift[p.sh_off + b * p.sh_stride + c];
    if (YF16 != 0)
        y16[i] = float16_t(v);
    else
        y[i] = v;
}
