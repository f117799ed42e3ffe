// variants: f32 f16 bf16
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// conv2d NCHW, direct: y[b, o, i, j] = bias[o] + sum_{c, ky, kx} x[b, c, i*sh - ph + ky, j*sw - pw + kx]
// * w[o, c, ky, kx] (zero padding). Register tile: each invocation owns 4 output channels x 4
// consecutive output columns (16 FMAs per 4 x + 4 w loads); the 4 weights are the same across the
// workgroup (o quad on group y). Invocations on x enumerate (b, i, column quad).
#include "common.glsl"
#define USE_CONV2D
#include "runtime/ir/params.h"
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Wt { WTYPE w[]; };
layout(binding = 2) readonly buffer Bs { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint quads = (p.WO + 3) / 4;
    uint id = gl_GlobalInvocationID.x;
    if (id >= p.B * p.HO * quads) return;
    uint j0 = (id % quads) * 4, oi = (id / quads) % p.HO, b = id / (quads * p.HO);
    uint o0 = gl_WorkGroupID.y * 4;
    uint ksz = p.KH * p.KW;
    uint wo[4];
    [[unroll]] for (uint u = 0; u < 4; ++u) wo[u] = min(o0 + u, p.O - 1) * p.C * ksz;
    float acc[4][4];  // [channel][column]
    [[unroll]] for (uint u = 0; u < 4; ++u)
        [[unroll]] for (uint v = 0; v < 4; ++v) acc[u][v] = 0.0;
    int ix0 = int(j0 * p.stride_w) - int(p.pad_w);
    for (uint c = 0; c < p.C; ++c) {
        uint xc = (b * p.C + c) * p.H;
        for (uint ky = 0; ky < p.KH; ++ky) {
            int iy = int(oi * p.stride_h + ky) - int(p.pad_h);
            if (iy < 0 || iy >= int(p.H)) continue;
            uint xrow = (xc + uint(iy)) * p.W;
            uint wk = c * ksz + ky * p.KW;
            for (uint kx = 0; kx < p.KW; ++kx) {
                float xv[4], wv[4];
                [[unroll]] for (uint v = 0; v < 4; ++v) {
                    int ix = ix0 + int(v * p.stride_w + kx);
                    xv[v] = (ix >= 0 && ix < int(p.W)) ? x[xrow + uint(ix)] : 0.0;
                }
                [[unroll]] for (uint u = 0; u < 4; ++u) wv[u] = W2F(w[wo[u] + wk + kx]);
                [[unroll]] for (uint u = 0; u < 4; ++u)
                    [[unroll]] for (uint v = 0; v < 4; ++v) acc[u][v] += wv[u] * xv[v];
            }
        }
    }
    [[unroll]] for (uint u = 0; u < 4; ++u) {
        uint o = o0 + u;
        if (o >= p.O) break;
        float bv = p.has_bias != 0 ? bias[o] : 0.0;
        uint yrow = ((b * p.O + o) * p.HO + oi) * p.WO;
        [[unroll]] for (uint v = 0; v < 4; ++v)
            if (j0 + v < p.WO) y[yrow + j0 + v] = acc[u][v] + bv;
    }
}
