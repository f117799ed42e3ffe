// Broadcasting binary op body; the including shader defines BINARY_OP(a, b).
#include "common.glsl"
#define USE_BINARY
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
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
    y[i] = BINARY_OP(a[ia], b[ib]);
}
