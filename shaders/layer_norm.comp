// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
// layer_norm over the last dim: (x - mean) / sqrt(var + eps) * w + b, two-pass mean/variance.
#include "common.glsl"
#define USE_ROW
#include "runtime/ir/params.h"
#include "reduce.glsl"
layout(local_size_x = 64) in;
SELECT_BUF(4)
layout(binding = 0) readonly buffer X { float x[]; };
WEIGHT_BUF(1, Wt, float, w)
WEIGHT_BUF(2, Bs, float, b)
#ifdef KILN_PTR
#define w Wt_p.data
#define b Bs_p.data
#endif
layout(binding = 3) writeonly buffer Y { float y[]; };

#include "layer_norm.glsl"

void main() {
    uint row = wg_row();
    if (row >= p.rows) return;
    uint base = row * p.cols, t = gl_LocalInvocationID.x;
    vec2 st = layer_norm_stats(base, p.cols, p.eps);
    float mean = st.x, inv = st.y;
    for (uint c = t; c < p.cols; c += 64) {
        float r = (x[base + c] - mean) * inv;
        if (p.has_w != 0) r *= w[WBASE(Wt) + c];
        if (p.has_b != 0) r += b[WBASE(Bs) + c];
        y[base + c] = r;
    }
}
