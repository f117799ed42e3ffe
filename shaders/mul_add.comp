#version 450
#extension GL_GOOGLE_include_directive : require
// mul_add: out = a * b + c with numpy broadcasting (see MulAddParams); made by ir::fuse from add(mul(a, b), c).
// The product is rounded to f32 before the sum (precise: no fused multiply-add), as mul.comp then add.comp
// compute it, so fused and unfused agree bitwise.
#include "common.glsl"
#define USE_MUL_ADD
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
SELECT_BUF(4)
WEIGHT_BUF(0, A, float, a)
WEIGHT_BUF(1, B, float, b)
WEIGHT_BUF(2, C, float, c)
#ifdef KILN_PTR
#define a A_p.data
#define b B_p.data
#define c C_p.data
#endif
layout(binding = 3) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    if (i >= p.n) return;
    uint ia = 0, ib = 0, ic = 0, rem = i;
    for (int d = int(p.rank) - 1; d >= 0; --d) {
        uint idx = rem % p.shape[d];
        rem /= p.shape[d];
        ia += idx * p.sa[d];
        ib += idx * p.sb[d];
        ic += idx * p.sc[d];
    }
    precise float t = a[WBASE(A) + p.oa + ia] * b[WBASE(B) + p.ob + ib];
    precise float r = t + c[WBASE(C) + p.oc + ic];
    y[i] = r;
}
// ptr variant
