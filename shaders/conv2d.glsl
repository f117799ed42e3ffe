// conv2d body, included by conv2d.comp (storage buffers) and conv2d_tex.comp (texel buffers); see conv2d.comp.
#include "common.glsl"
#define USE_CONV2D
#include "runtime/ir/params.h"
#define TO 8
#define TC 8
layout(local_size_x = 64) in;
#ifdef CONV2D_TEX
// conv2d_tex.comp: x and W are uniform texel buffers of one channel (x R32F; W R32F, R16F or R16_UINT for bf16),
// read with texelFetch: llvmpipe gathers texels as vectors but loads storage buffers lane by lane. Same values,
// same order: bitwise equal to the storage-buffer shader.
layout(binding = 0) uniform textureBuffer x_t;
#define XLOAD(i) texelFetch(x_t, int(i)).x
#if defined(W_BF16)
layout(binding = 1) uniform utextureBuffer w_t;
#define WLOAD(i) uintBitsToFloat(texelFetch(w_t, int(i)).x << 16)
#else
layout(binding = 1) uniform textureBuffer w_t;
#define WLOAD(i) texelFetch(w_t, int(i)).x
#endif
#else
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Wt { WTYPE w[]; };
#define XLOAD(i) x[i]
#define WLOAD(i) W2F(w[i])
#endif
layout(binding = 2) readonly buffer Bs { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };

float xat(uint xrow, int ix) { return (ix >= 0 && ix < int(p.W)) ? XLOAD(xrow + uint(ix)) : 0.0; }

void main() {
    uint blocks = (p.WO + TC - 1) / TC;
    uint id = gl_GlobalInvocationID.x;
    if (id >= p.B * p.HO * blocks) return;
    uint j0 = (id % blocks) * TC, oi = (id / blocks) % p.HO, b = id / (blocks * p.HO);
    uint o0 = gl_WorkGroupID.y * TO;
    uint ksz = p.KH * p.KW;
    uint wo[TO];
    [[unroll]] for (uint u = 0; u < TO; ++u) wo[u] = min(o0 + u, p.O - 1) * p.C * ksz;
    float acc[TO][TC];
    [[unroll]] for (uint u = 0; u < TO; ++u)
        [[unroll]] for (uint v = 0; v < TC; ++v) acc[u][v] = 0.0;
    int ix0 = int(j0 * p.stride_w) - int(p.pad_w);
    bool fast = p.stride_w == 1 && p.KW <= 3;
    for (uint c = 0; c < p.C; ++c) {
        uint xc = (b * p.C + c) * p.H;
        for (uint ky = 0; ky < p.KH; ++ky) {
            int iy = int(oi * p.stride_h + ky) - int(p.pad_h);
            if (iy < 0 || iy >= int(p.H)) continue;
            uint xrow = (xc + uint(iy)) * p.W;
            uint wk = c * ksz + ky * p.KW;
            if (fast) {
                float xw[TC + 2];
                [[unroll]] for (uint v = 0; v < TC + 2; ++v) xw[v] = xat(xrow, ix0 + int(v));
                [[unroll]] for (uint kx = 0; kx < 3; ++kx) {
                    if (kx >= p.KW) break;
                    float wv[TO];
                    [[unroll]] for (uint u = 0; u < TO; ++u) wv[u] = WLOAD(wo[u] + wk + kx);
                    [[unroll]] for (uint u = 0; u < TO; ++u)
                        [[unroll]] for (uint v = 0; v < TC; ++v) acc[u][v] += wv[u] * xw[v + kx];
                }
            } else {
                for (uint kx = 0; kx < p.KW; ++kx) {
                    float xv[TC], wv[TO];
                    [[unroll]] for (uint v = 0; v < TC; ++v) xv[v] = xat(xrow, ix0 + int(v * p.stride_w + kx));
                    [[unroll]] for (uint u = 0; u < TO; ++u) wv[u] = WLOAD(wo[u] + wk + kx);
                    [[unroll]] for (uint u = 0; u < TO; ++u)
                        [[unroll]] for (uint v = 0; v < TC; ++v) acc[u][v] += wv[u] * xv[v];
                }
            }
        }
    }
    [[unroll]] for (uint u = 0; u < TO; ++u) {
        uint o = o0 + u;
        if (o >= p.O) break;
        float bv = p.has_bias != 0 ? bias[o] : 0.0;
        uint yrow = ((b * p.O + o) * p.HO + oi) * p.WO;
        [[unroll]] for (uint v = 0; v < TC; ++v)
            if (j0 + v < p.WO) y[yrow + j0 + v] = acc[u][v] + bv;
    }
}
