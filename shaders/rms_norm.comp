// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
// rms_norm over the last dim: x / sqrt(mean(x^2) + eps) * w (normalise in f32, then weight).
#include "common.glsl"
#define USE_ROW
#include "runtime/ir/params.h"
#include "reduce.glsl"
layout(local_size_x = 64) in;
SELECT_BUF(3)
layout(binding = 0) readonly buffer X { float x[]; };
WEIGHT_BUF(1, Wt, float, w)
#ifdef KILN_PTR
#define w Wt_p.data
#endif
layout(binding = 2) writeonly buffer Y { float y[]; };

void main() {
    uint row = wg_row();
    if (row >= p.rows) return;
    uint base = row * p.cols, t = gl_LocalInvocationID.x;
    // precise here and in rms_norm_rope.comp / rms_norm.comp: the sum and the root round the same way in both (no
    // FMA contraction; rms_norm_rope's rotation is precise, which glslang carries back to inv), so they agree bitwise.
    precise float s = 0.0;
    for (uint c = t; c < p.cols; c += 64) s += x[base + c] * x[base + c];
    precise float inv = inversesqrt(wg_sum(s) / float(p.cols) + p.eps);
    for (uint c = t; c < p.cols; c += 64) {
        float r = x[base + c] * inv;
        y[base + c] = p.has_w != 0 ? r * w[WBASE(Wt) + c] : r;
    }
}
