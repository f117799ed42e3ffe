// variants: f32 f16 bf16
// ptr variant
#version 450
#extension GL_GOOGLE_include_directive : require
// embedding: y[i, :] = table[ids[i], :], table [V, D] stored f32/f16/bf16. Ids are clamped to
// [0, V-1], so a bad id never reads out of bounds (the CPU reference throws on it instead).
#include "common.glsl"
#define USE_EMBEDDING
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
SELECT_BUF(3)
WEIGHT_BUF(0, T, WTYPE, table)
#ifdef KILN_PTR
#define table T_p.data
#endif
layout(binding = 1) readonly buffer I { int ids[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

void main() {
    uint i = flat_id();
    if (i >= p.N * p.D) return;
    uint r = i / p.D, d = i % p.D;
    uint id = uint(clamp(ids[r], 0, int(p.V) - 1));
    y[i] = W2F(table[WBASE(T) + id * p.D + d]);
}
