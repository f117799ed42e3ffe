// attention body: out = softmax(q k^T * scale + mask) v per (batch, head); q/k/v/out [B, S, H*D].
// One invocation per (b, h, query row): q (pre-scaled) and the output accumulator live in registers
// (DV, the head width in units of VT, is a specialization constant), one pass over Sk with online
// softmax: running max m and sum l; acc is rescaled by exp(m_old - m_new) when the max grows.
// ATTN_VEC4 (attention_vec4.comp, D % 4 == 0): q/k/v/out read and written as 4-vectors.
// Workgroups: (ceil(Sq / 32), H, B).
#include "common.glsl"
#define USE_ATTENTION
#include "runtime/ir/params.h"
layout(local_size_x = 32) in;
layout(constant_id = 0) const uint DV = 64;
#ifdef ATTN_VEC4
#define VT vec4
#else
#define VT float
#endif
layout(binding = 0) readonly buffer Q { VT q[]; };
layout(binding = 1) readonly buffer Kb { VT k[]; };
layout(binding = 2) readonly buffer V { VT v[]; };
layout(binding = 3) readonly buffer Mk { float mask[]; };
layout(binding = 4) writeonly buffer O { VT o[]; };

void main() {
    uint i = gl_GlobalInvocationID.x, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    if (i >= p.Sq) return;
    uint W = p.H * DV;  // row width in VT units
    uint qoff = (b * p.Sq + i) * W + h * DV;
    VT qv[DV], acc[DV];
    for (uint d = 0; d < DV; ++d) {
        qv[d] = q[qoff + d] * p.scale;
        acc[d] = VT(0.0);
    }
    uint moff = b * p.mask_sb + i * p.mask_sq;
    float m = -3.402823466e38, l = 0.0;  // finite start: a -inf score then gives p = 0, not NaN
    for (uint j = 0; j < p.Sk; ++j) {
        uint koff = (b * p.Sk + j) * W + h * DV;
        float s = 0.0;
        for (uint d = 0; d < DV; ++d) s += dot(qv[d], k[koff + d]);
        if (p.has_mask != 0) s += mask[moff + j];
        if (s > m) {
            float c = exp(m - s);
            l *= c;
            for (uint d = 0; d < DV; ++d) acc[d] *= c;
            m = s;
        }
        float pj = exp(s - m);
        l += pj;
        for (uint d = 0; d < DV; ++d) acc[d] += pj * v[koff + d];
    }
    float inv = 1.0 / l;
    for (uint d = 0; d < DV; ++d) o[qoff + d] = acc[d] * inv;
}
