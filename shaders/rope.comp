#version 450
#extension GL_GOOGLE_include_directive : require
// rope (interleaved pairs): x [B, S, H, 2*pairs]; for pair i at sequence position s,
//   y[2i] = x[2i] cos[s, i] - x[2i+1] sin[s, i],  y[2i+1] = x[2i+1] cos[s, i] + x[2i] sin[s, i].
#include "common.glsl"
#define USE_ROPE
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer C { float cos_t[]; };
layout(binding = 2) readonly buffer Sn { float sin_t[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint j = flat_id();  // pair index over [B, S, H, half]
    if (j >= p.B * p.S * p.H * p.pairs) return;
    uint i = j % p.pairs, s = (j / (p.pairs * p.H)) % p.S;
    float c = cos_t[s * p.pairs + i], sn = sin_t[s * p.pairs + i];
    float re = x[2 * j], im = x[2 * j + 1];
    // precise: each product rounded before the sum (no fused multiply-add), so rms_norm_rope.comp, which
    // computes the same, agrees bitwise on every driver.
    precise float a = re * c, b = im * sn, e = im * c, f = re * sn;
    y[2 * j] = a - b;
    y[2 * j + 1] = e + f;
}
