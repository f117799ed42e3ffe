#version 450
#extension GL_GOOGLE_include_directive : require
// norm_modulate: y[b, n, c] = layer_norm(x)[b, n, c] * (1 + scale[b, c]) + shift[b, c], layer_norm without affine.
// The normalised value is computed as layer_norm.comp computes it, then modulated as modulate.comp does, in one
// dispatch (one workgroup per row). YF16: y stored f16 (ir::store_f16: read only by linears or attention), rounded
// once at the store through a second declaration of the binding.
#include "common.glsl"
#define USE_NORM_MODULATE
#include "runtime/ir/params.h"
#include "reduce.glsl"
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Sh { float shift[]; };
layout(binding = 2) readonly buffer Sc { float scale[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(binding = 3) writeonly buffer Y16 { float16_t y16[]; };
layout(constant_id = 0) const uint YF16 = 0;
#include "layer_norm.glsl"

void main() {
    uint row = wg_row();
    if (row >= p.rows) return;
    uint base = row * p.cols, t = gl_LocalInvocationID.x, b = row / p.N;
    uint sh0 = p.sh_off + b * p.sh_stride, sc0 = p.sc_off + b * p.sc_stride;
    vec2 st = layer_norm_stats(base, p.cols, p.eps);
    float mean = st.x, inv = st.y;
    for (uint c = t; c < p.cols; c += 64) {
        float r = (x[base + c] - mean) * inv;
        const float v = r * (1.0 + scale[sc0 + c]) + shift[sh0 + c];
        if (YF16 != 0)
            y16[base + c] = float16_t(v);
        else
            y[base + c] = v;
    }
}
