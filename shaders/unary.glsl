// Elementwise unary body (scale, silu, gelu): y[i] = UNARY_OP(x[i]); the including shader defines
// UNARY_OP(x) and may read p.alpha, p.beta, p.mode (UnaryParams).
#include "common.glsl"
#define USE_UNARY
#include "runtime/ir/params.h"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };

float unary_op(float v);

void main() {
    uint i = flat_id();
    if (i >= p.n) return;
    y[i] = unary_op(x[i]);
}
