// Broadcasting binary op body; the including shader defines BINARY_OP(a, b). p.act: an activation fused after the op
// (ir::fuse; activation.glsl's act_apply, the expression silu.comp / gelu.comp evaluate, on the op's f32 result, so
// fused equals unfused bitwise).
#include "common.glsl"
#include "activation.glsl"
#define USE_BINARY
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
SELECT_BUF(3)
WEIGHT_BUF(0, A, float, a)
WEIGHT_BUF(1, B, float, b)
#ifdef KILN_PTR
#define a A_p.data
#define b B_p.data
#endif
layout(binding = 2) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    if (i >= p.n) return;
    uint ia = 0, ib = 0, rem = i;
    for (int d = int(p.rank) - 1; d >= 0; --d) {
        uint idx = rem % p.shape[d];
        rem /= p.shape[d];
        ia += idx * p.sa[d];
        ib += idx * p.sb[d];
    }
    const float v = BINARY_OP(a[WBASE(A) + p.oa + ia], b[WBASE(B) + p.ob + ib]);
    y[i] = act_apply(p.act, v);  // 0: v itself
}
