#version 450
#extension GL_GOOGLE_include_directive : require
// group_norm on [B, C, HW]: one workgroup of 256 per (batch, group) normalises its C/G * HW
// contiguous elements (two-pass mean/variance), then the per-channel affine.
#include "common.glsl"
#define USE_GROUP_NORM
#include "runtime/ir/params.h"
#include "reduce.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Wt { float w[]; };
layout(binding = 2) readonly buffer Bs { float b[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint bg = wg_row();
    if (bg >= p.B * p.G) return;
    uint cg = p.C / p.G, g = bg % p.G, cnt = cg * p.HW;
    uint base = bg * cnt, t = gl_LocalInvocationID.x;  // (b*C + g*cg) * HW == bg * cnt
    float s = 0.0;
    for (uint i = t; i < cnt; i += 256) s += x[base + i];
    float mean = wg_sum(s) / float(cnt);
    float v = 0.0;
    for (uint i = t; i < cnt; i += 256) {
        float d = x[base + i] - mean;
        v += d * d;
    }
    float inv = inversesqrt(wg_sum(v) / float(cnt) + p.eps);
    for (uint i = t; i < cnt; i += 256) {
        uint c = g * cg + i / p.HW;
        float r = (x[base + i] - mean) * inv;
        if (p.has_w != 0) r *= w[c];
        if (p.has_b != 0) r += b[c];
        y[base + i] = r;
    }
}
