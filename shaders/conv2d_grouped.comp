// variants: f32 f16 bf16
// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
// conv2d NCHW with groups > 1 (depthwise convolutions, grouped 1x1 mixes): y[b, o, i, j] = bias[o] + sum over the
// Cg = C / groups input channels c of o's group g = o / (O / groups), ky, kx of
// x[b, g Cg + c, i*sh - ph + ky, j*sw - pw + kx] * w[o, c, ky, kx] (zero padding). One output per invocation, summed in
// the CPU reference's order (c, ky, kx) in f32. Grouped convolutions are small (Cg kh kw terms), so no tiling.
#include "common.glsl"
#define USE_CONV2D
#include "runtime/ir/params.h"
layout(local_size_x = 64) in;
// W and the bias may be block weights (Sana's depthwise conv inside every transformer block): selected per replay
// through device addresses (_ptr) or a per-replay offset (_off), see common.glsl.
SELECT_BUF(4)
layout(binding = 0) readonly buffer X { float x[]; };
WEIGHT_BUF(1, Wt, WTYPE, w)
WEIGHT_BUF(2, Bs, float, bias)
#ifdef KILN_PTR
#define w Wt_p.data
#define bias Bs_p.data
#endif
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint id = flat_id();
    if (id >= p.B * p.O * p.HO * p.WO) return;
    uint j = id % p.WO, i = (id / p.WO) % p.HO, o = (id / (p.WO * p.HO)) % p.O, b = id / (p.WO * p.HO * p.O);
    uint cg = p.C / p.groups, c0 = (o / (p.O / p.groups)) * cg;
    float acc = 0.0;
    for (uint c = 0; c < cg; ++c) {
        uint xc = (b * p.C + c0 + c) * p.H, wc = (o * cg + c) * p.KH * p.KW;
        for (uint ky = 0; ky < p.KH; ++ky) {
            int iy = int(i * p.stride_h + ky) - int(p.pad_h);
            if (iy < 0 || iy >= int(p.H)) continue;
            for (uint kx = 0; kx < p.KW; ++kx) {
                int ix = int(j * p.stride_w + kx) - int(p.pad_w);
                if (ix < 0 || ix >= int(p.W)) continue;
                acc += x[(xc + uint(iy)) * p.W + uint(ix)] * W2F(w[WBASE(Wt) + wc + ky * p.KW + kx]);
            }
        }
    }
    y[id] = acc + (p.has_bias != 0 ? bias[WBASE(Bs) + o] : 0.0);
}
