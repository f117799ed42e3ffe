// attention body: out = softmax(q k^T * scale + mask) v per (batch, head); q/k/v/out [B, S, H*D].
// Each invocation owns QR query rows of one (b, h) (rows base + 32r, so a workgroup of 32 covers
// 32 QR consecutive rows); q (pre-scaled) and the output accumulators live in registers. DV (the head
// width in units of VT) and QR are specialization constants; QR trades registers (2 QR D floats) for
// loads (each k/v load serves QR rows: 1.6x at QR 2 on lavapipe, 2x at QR 4). One pass over Sk with
// online softmax: running max m and sum l per row; acc is rescaled by exp(m_old - m_new) when the max
// grows. Rows past Sq are clamped for the loads and not stored.
// ATTN_VEC4 (attention_vec4.comp, D % 4 == 0): q/k/v/out read and written as 4-vectors.
// Grouped-query heads read k/v head h / (H / Hkv); soft-capping (s = softcap tanh(s), q pre-scaled by scale /
// softcap) and causal limits apply only where set, so the arithmetic without them is unchanged.
// Workgroups: (ceil(Sq / (32 QR)), H, B).
#include "common.glsl"
#include "mathf.glsl"
#define USE_ATTENTION
#include "runtime/ir/params.h"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 32) in;
layout(constant_id = 0) const uint DV = 64;
layout(constant_id = 1) const uint QR = 1;
#ifdef ATTN_VEC4
#define VT vec4
#else
#define VT float
#endif
#ifdef ATTN_TEX
// ATTN_TEX (attention_tex.comp, attention_vec4_tex.comp): q, k and v are uniform texel buffers (R32F, or RGBA32F
// with ATTN_VEC4), read with texelFetch: vector gathers on llvmpipe instead of lane-by-lane storage-buffer loads.
// Same values, same order: bitwise equal to the storage-buffer shaders.
layout(binding = 0) uniform textureBuffer q_t;
layout(binding = 1) uniform textureBuffer k_t;
layout(binding = 2) uniform textureBuffer v_t;
#ifdef ATTN_VEC4
#define QKV_LOAD(t, i) texelFetch(t, int(i))
#else
#define QKV_LOAD(t, i) texelFetch(t, int(i)).x
#endif
#define Q_AT(i) QKV_LOAD(q_t, i)
#define K_AT(i) QKV_LOAD(k_t, i)
#define V_AT(i) QKV_LOAD(v_t, i)
#else
layout(binding = 0) readonly buffer Q { VT q[]; };
layout(binding = 1) readonly buffer Kb { VT k[]; };
layout(binding = 2) readonly buffer V { VT v[]; };
#define Q_AT(i) q[i]
#define K_AT(i) k[i]
#define V_AT(i) v[i]
#endif
layout(binding = 3) readonly buffer Mk { float mask[]; };
layout(binding = 4) writeonly buffer O { VT o[]; };

void main() {
    uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    uint i0 = gl_WorkGroupID.x * (32 * QR) + gl_LocalInvocationID.x;
    if (i0 >= p.Sq) return;
    uint W = p.H * DV, Wk = p.Hkv * DV;  // q/o and k/v row widths in VT units
    uint hk = h / (p.H / p.Hkv);
    uint rows[QR];
    int lim[QR];  // causal: the last key row r sees
    [[unroll]] for (uint r = 0; r < QR; ++r) {
        rows[r] = min(i0 + 32 * r, p.Sq - 1);
        lim[r] = int(rows[r]) + int(p.Sk) - int(p.Sq);
    }
    uint jend = p.causal != 0 ? uint(clamp(lim[QR - 1] + 1, 0, int(p.Sk))) : p.Sk;
    VT qv[QR][DV], acc[QR][DV];
    float m[QR], l[QR];
    [[unroll]] for (uint r = 0; r < QR; ++r) {
        uint qoff = (b * p.Sq + rows[r]) * W + h * DV;
        for (uint d = 0; d < DV; ++d) {
            qv[r][d] = Q_AT(qoff + d) * p.scale;
            acc[r][d] = VT(0.0);
        }
        m[r] = -3.402823466e38;  // finite start: a -inf score then gives p = 0, not NaN
        l[r] = 0.0;
    }
    for (uint j = 0; j < jend; ++j) {
        uint koff = (b * p.Sk + j) * Wk + hk * DV;
        float s[QR];
        [[unroll]] for (uint r = 0; r < QR; ++r) s[r] = 0.0;
        for (uint d = 0; d < DV; ++d) {
            VT kv = K_AT(koff + d);
            [[unroll]] for (uint r = 0; r < QR; ++r) s[r] += dot(qv[r][d], kv);
        }
        float pj[QR];
        [[unroll]] for (uint r = 0; r < QR; ++r) {
            if (p.causal != 0 && int(j) > lim[r]) {
                pj[r] = 0.0;
                continue;
            }
            if (p.softcap > 0.0) s[r] = p.softcap * tanh_accurate(s[r]);
            if (p.has_mask != 0) s[r] += mask[b * p.mask_sb + rows[r] * p.mask_sq + j];
            if (s[r] > m[r]) {
                float c = exp(m[r] - s[r]);
                l[r] *= c;
                for (uint d = 0; d < DV; ++d) acc[r][d] *= c;
                m[r] = s[r];
            }
            pj[r] = exp(s[r] - m[r]);
            l[r] += pj[r];
        }
        for (uint d = 0; d < DV; ++d) {
            VT vv = V_AT(koff + d);
            [[unroll]] for (uint r = 0; r < QR; ++r) acc[r][d] += pj[r] * vv;
        }
    }
    [[unroll]] for (uint r = 0; r < QR; ++r) {
        uint i = i0 + 32 * r;
        if (i >= p.Sq) break;
        uint qoff = (b * p.Sq + i) * W + h * DV;
        float inv = l[r] > 0.0 ? 1.0 / l[r] : 0.0;  // 0: a causal row that sees no key
        for (uint d = 0; d < DV; ++d) o[qoff + d] = acc[r][d] * inv;
    }
}
