#version 450
#extension GL_GOOGLE_include_directive : require
// timestep_embedding (diffusers get_timestep_embedding), y [N, dim], in the reference's f32 order:
//   exponent = (-ln(max_period) * k) / (half - shift); freq = exp(exponent); arg = scale * (t * freq)
//   row = [sin(arg), cos(arg)] ([cos, sin] when flip), zero pad when dim is odd.
// The division is corrected to the rounded quotient (div_accurate), exp and sin/cos are the
// accurate ones of mathf.glsl (explicit range reduction: args reach ~1000 rad).
#include "common.glsl"
#define USE_TIMESTEP
#include "runtime/ir/params.h"
#include "mathf.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer T { float t[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    if (i >= p.N * p.dim) return;
    uint r = i / p.dim, col = i % p.dim;
    if (col >= 2 * p.half_dim) {
        y[i] = 0.0;
        return;
    }
    uint k = col < p.half_dim ? col : col - p.half_dim;
    precise float num = -p.log_max_period * float(k);
    precise float den = float(p.half_dim) - p.shift;
    float expo = div_accurate(num, den);
    float freq = exp_accurate(expo);
    precise float arg = p.scale * (t[r] * freq);
    vec2 sc = sincos_accurate(arg);
    bool first = col < p.half_dim;
    bool want_cos = (p.flip != 0) == first;
    y[i] = want_cos ? sc.y : sc.x;
}
