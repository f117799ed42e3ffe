// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
// rms_norm_rope (fused by ir::fuse from rope(rms_norm(head))): x [B, S, H*D], one workgroup per head row of D
// values: r = x / sqrt(mean(x^2) + eps) * w exactly as rms_norm.comp computes it (same sum partition, so the
// same inv), then pairs rotated exactly as rope.comp does with cos/sin [S, D/2] at the row's position.
#include "common.glsl"
#define USE_RMS_ROPE
#include "runtime/ir/params.h"
#include "reduce.glsl"
layout(local_size_x = 64) in;
SELECT_BUF(5)
layout(binding = 0) readonly buffer X { float x[]; };
WEIGHT_BUF(1, Wt, float, w)
#ifdef KILN_PTR
#define w Wt_p.data
#endif
layout(binding = 2) readonly buffer C { float cos_t[]; };
layout(binding = 3) readonly buffer Sn { float sin_t[]; };
layout(binding = 4) writeonly buffer Y { float y[]; };

float normed(uint base, uint c, float inv) {
    float r = x[base + c] * inv;
    return p.has_w != 0 ? r * w[WBASE(Wt) + c] : r;
}

void main() {
    uint row = wg_row();
    if (row >= p.rows) return;
    uint base = row * p.D, t = gl_LocalInvocationID.x, pairs = p.D / 2;
    // precise here and in rms_norm_rope.comp / rms_norm.comp: the sum and the root round the same way in both (no
    // FMA contraction; rms_norm_rope's rotation is precise, which glslang carries back to inv), so they agree bitwise.
    precise float s = 0.0;
    for (uint c = t; c < p.D; c += 64) s += x[base + c] * x[base + c];
    precise float inv = inversesqrt(wg_sum(s) / float(p.D) + p.eps);
    uint pos = (row / p.H) % p.S;
    for (uint i = t; i < pairs; i += 64) {
        float re = normed(base, 2 * i, inv), im = normed(base, 2 * i + 1, inv);
        float c = cos_t[pos * pairs + i], sn = sin_t[pos * pairs + i];
        precise float a = re * c, b = im * sn, e = im * c, f = re * sn;
        y[base + 2 * i] = a - b;
        y[base + 2 * i + 1] = e + f;
    }
}
