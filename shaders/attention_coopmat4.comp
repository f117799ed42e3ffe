// requires: GL_KHR_cooperative_matrix
#version 450
#extension GL_GOOGLE_include_directive : require
// attention, flash on cooperative matrices with the query rows split over subgroups (docs/attention.md), f32 or f16
// q/k/v: out = softmax(q k^T * scale (soft-capped) + mask) v per (batch, head), q/out [B, Sq, H*D], k/v
// [B, Sk, Hkv*D]. A workgroup of NSG subgroups owns BR = NSG * RS query rows of one (b, h); subgroup g owns rows
// g RS .. g RS + RS - 1 (RS a multiple of the device's CM). The q tile is staged once. Per tile of BC keys the whole
// workgroup stages K and V into shared memory (one load serves every subgroup: K/V are read once per BR query rows),
// between the only two workgroup barriers of the tile; the tile after it is read from memory into registers while
// the subgroups compute. Then each subgroup alone, on its own slices of shared memory (subgroup barriers only):
//   1. S_g = Q_g K^T                              (its RS x BC score fragments, stored to its rows of s_s)
//   2. its rows' online softmax: m' = max(m, max S), alpha = exp(m - m'), P = exp(S - m'), l = alpha l + sum P
//      (LR lanes per row, their partial max and sum combined through red_m / red_l in lane order)
//   3. O_g = alpha O_g + P_g V                    (its RS x DL output fragments in f32 accumulators)
// and at the end out = O / l. Precision: attention_flash_cm.glsl's scheme, the same terms per product in the same
// order (operands f16 hi + lo, q staged as q scale 2^QSH, P as P 2^PSH; FAST: hi alone). Keys past Sk or past a
// row's causal limit get P = 0; tiles past the workgroup's last visible key are skipped. Shared memory:
// lower_attention.cpp. Workgroups: (ceil(Sq / BR), H, B).
#include "common.glsl"
#include "mathf.glsl"
#define USE_ATTENTION
#include "runtime/ir/params.h"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
layout(constant_id = 0) const uint D = 64;   // head_dim
layout(constant_id = 1) const uint BR = 64;  // query rows per workgroup: NSG * RS
layout(constant_id = 2) const uint BC = 16;  // keys per K/V tile (a multiple of CN, CK and LR)
layout(constant_id = 3) const uint F16 = 0;  // bit i: q, k, v (i = 0, 1, 2) stored f16; 8: KILN_PRECISION=fast;
                                             // 16: the output stored f16 (one rounding of the f32 value)
layout(constant_id = 4) const uint CM = 16;  // the device's matrix shape
layout(constant_id = 5) const uint CN = 16;
layout(constant_id = 6) const uint CK = 16;
layout(constant_id = 7) const uint SG = 32;  // subgroup size
layout(constant_id = 8) const uint DL = 64;  // D rounded up to a multiple of CK and CN
layout(constant_id = 9) const uint QSH = 3;
layout(constant_id = 10) const uint NI = 128;  // invocations: NSG * SG
layout(constant_id = 11) const uint RS = 16;   // query rows per subgroup
layout(constant_id = 12) const uint LR = 2;    // softmax: lanes per row (RS LR a multiple of SG; BC % LR == 0)
layout(local_size_x_id = 10) in;
const uint PSH = 12u;
const bool FAST = (F16 & 8u) != 0u;
const uint NSG = NI / SG;
const uint LQ = DL + 8u, LP = BC + 8u;    // f16 row strides of the q, K, V tiles and of P
const uint RPL = RS * LR / SG;  // softmax: rows per lane
const uint KPL = BC / LR;                 // keys per lane and row
const uint FR = RS / CM, FC = BC / CN, FD = DL / CN;  // a subgroup's row, score-column, output-column fragments
const uint NL = (BC * DL + NI - 1u) / NI;             // K (and V) elements each invocation stages per tile

layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 0) readonly buffer Q16 { float16_t q16[]; };
layout(binding = 1) readonly buffer Kb { float k[]; };
layout(binding = 1) readonly buffer K16 { float16_t k16[]; };
layout(binding = 2) readonly buffer V { float v[]; };
layout(binding = 2) readonly buffer V16 { float16_t v16[]; };
layout(binding = 3) readonly buffer Mk { float mask[]; };
layout(binding = 4) writeonly buffer O { float o[]; };
layout(binding = 4) writeonly buffer O16 { float16_t o16[]; };

shared float16_t q_hi[BR * LQ], q_lo[BR * LQ];
shared float16_t k_hi[BC * LQ], k_lo[BC * LQ], v_hi[BC * LQ], v_lo[BC * LQ];
shared float16_t p_hi[BR * LP], p_lo[BR * LP];
// Subgroup g's rows g RS .. of s_s: its scores (RS x BC), then its row scaling (RS x CN, stride CN), at the end its
// output fragment on the way out (CM x CN). red_m / red_l: its lanes' partial max and sum per row (RS x LR).
shared float s_s[BR * BC];
shared float red_m[NSG * RS * LR], red_l[NSG * RS * LR];

#include "attention_split.glsl"  // split(x, hi, lo)

#define ACC coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>
#define MA coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA>
#define MB coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB>
#define ROW gl_CooperativeMatrixLayoutRowMajor
#define COL gl_CooperativeMatrixLayoutColumnMajor

float load_q(uint i) { return (F16 & 1u) != 0 ? float(q16[i]) : q[i]; }
float load_k(uint i) { return (F16 & 2u) != 0 ? float(k16[i]) : k[i]; }
float load_v(uint i) { return (F16 & 4u) != 0 ? float(v16[i]) : v[i]; }
void store_o(uint i, float x) {
    if ((F16 & 16u) != 0)
        o16[i] = float16_t(x);
    else
        o[i] = x;
}

ACC o_acc[FR * FD];  // this subgroup's output fragments, row fragment fr: fr FD ..
float kr[NL], vr[NL];  // the next tile's K and V elements tid + n NI (c = e / DL, d = e % DL; d >= D: 0)

void subgroup_sync() {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
}

// kr, vr = the K/V tile at key j0 (keys past Sk read its last row; they get P = 0).
void fetch(uint j0, uint kbase) {
    [[unroll]] for (uint n = 0; n < NL; ++n) {
        const uint e = gl_LocalInvocationID.x + n * NI, c = e / DL, d = e % DL;
        const uint i = kbase + min(j0 + c, p.Sk - 1) * p.Hkv * D + d;
        kr[n] = e < BC * DL && d < D ? load_k(i) : 0.0;
        vr[n] = e < BC * DL && d < D ? load_v(i) : 0.0;
    }
}

// 1. s_s[r0 ..] = Q_g K^T 2^-QSH: per fragment and CK slice the terms lo hi, hi lo, hi hi (as attention_flash_cm.glsl).
void scores(uint r0) {
    const float unscale = 1.0 / float(1u << QSH);
    [[unroll]] for (uint fr = 0; fr < FR; ++fr)
        [[unroll]] for (uint fc = 0; fc < FC; ++fc) {
            const uint qo = (r0 + fr * CM) * LQ, ko = fc * CN * LQ;
            ACC s = ACC(0.0);
            for (uint kk = 0; kk < DL; kk += CK) {
                MA qh, ql;
                MB kh, kl;
                coopMatLoad(qh, q_hi, qo + kk, LQ, ROW);
                coopMatLoad(kh, k_hi, ko + kk, LQ, COL);  // B[d][c] = K[c][d]
                if (!FAST) {
                    coopMatLoad(ql, q_lo, qo + kk, LQ, ROW);
                    s = coopMatMulAdd(ql, kh, s);
                }
                if ((F16 & 2u) == 0 && !FAST) {
                    coopMatLoad(kl, k_lo, ko + kk, LQ, COL);
                    s = coopMatMulAdd(qh, kl, s);
                }
                s = coopMatMulAdd(qh, kh, s);
            }
            s = s * unscale;
            coopMatStore(s, s_s, (r0 + fr * CM) * BC + fc * CN, BC, ROW);
        }
    subgroup_sync();
}

// O_g *= the row factors this subgroup's lanes wrote to its s_s rows (RS x CN, stride CN).
void row_scale(uint r0) {
    subgroup_sync();
    [[unroll]] for (uint fr = 0; fr < FR; ++fr) {
        ACC a;
        coopMatLoad(a, s_s, r0 * BC + fr * CM * CN, CN, ROW);
        [[unroll]] for (uint fd = 0; fd < FD; ++fd) o_acc[fr * FD + fd] = o_acc[fr * FD + fd] * a;
    }
}

// 3. O_g += P_g V: per CK slice of the keys the terms lo hi, hi lo, hi hi (as attention_flash_cm.glsl).
void pv(uint r0) {
    [[unroll]] for (uint fr = 0; fr < FR; ++fr)
        for (uint kk = 0; kk < BC; kk += CK) {
            MA ph, pl;
            coopMatLoad(ph, p_hi, (r0 + fr * CM) * LP + kk, LP, ROW);
            if (!FAST) coopMatLoad(pl, p_lo, (r0 + fr * CM) * LP + kk, LP, ROW);
            [[unroll]] for (uint fd = 0; fd < FD; ++fd) {
                MB vh, vl;
                coopMatLoad(vh, v_hi, kk * LQ + fd * CN, LQ, ROW);  // B[c][d] = V[c][d]
                if (!FAST) o_acc[fr * FD + fd] = coopMatMulAdd(pl, vh, o_acc[fr * FD + fd]);
                if ((F16 & 4u) == 0 && !FAST) {
                    coopMatLoad(vl, v_lo, kk * LQ + fd * CN, LQ, ROW);
                    o_acc[fr * FD + fd] = coopMatMulAdd(ph, vl, o_acc[fr * FD + fd]);
                }
                o_acc[fr * FD + fd] = coopMatMulAdd(ph, vh, o_acc[fr * FD + fd]);
            }
        }
}

void main() {
    const uint tid = gl_LocalInvocationID.x, g = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, q0 = gl_WorkGroupID.x * BR, r0 = g * RS;
    const uint hk = h / (p.H / p.Hkv), W = p.H * D, kbase = b * p.Sk * p.Hkv * D + hk * D;
    const uint u = lane % LR, red0 = g * RS * LR;  // this lane's keys u + n LR of rows rl(x)
    // Keys any row of the workgroup sees. Every subgroup runs every tile, rows past Sq (clamped) included: a subgroup
    // that skipped its part (where its rows see no key of the tile) broke lavapipe 26 (2026-11-28: outputs 0 where
    // some subgroups of a workgroup skipped the subgroup barriers the others passed), so control flow stays uniform
    // over the workgroup.
    uint kend = p.Sk;
    if (p.causal != 0) kend = uint(clamp(int(min(q0 + BR, p.Sq)) + int(p.Sk) - int(p.Sq), 0, int(p.Sk)));

    for (uint e = tid; e < BR * DL; e += NI) {  // columns d in [D, DL) staged as 0
        const uint rr = e / DL, d = e % DL;
        const float x = d < D ? load_q((b * p.Sq + min(q0 + rr, p.Sq - 1)) * W + h * D + d) * p.scale : 0.0;
        split(x * float(1u << QSH), q_hi[rr * LQ + d], q_lo[rr * LQ + d]);
    }
    [[unroll]] for (uint n = 0; n < FR * FD; ++n) o_acc[n] = ACC(0.0);
    float m[RPL], l[RPL];  // the running max and sum of this lane's rows (the same in each of a row's LR lanes)
    [[unroll]] for (uint x = 0; x < RPL; ++x) {
        m[x] = -3.402823466e38;
        l[x] = 0.0;
    }
    if (kend > 0) fetch(0, kbase);

    for (uint j0 = 0; j0 < kend; j0 += BC) {
        barrier();  // every subgroup is done with the previous tile's K and V
        [[unroll]] for (uint n = 0; n < NL; ++n) {
            const uint e = tid + n * NI, c = e / DL, d = e % DL;
            if (e < BC * DL) {
                split(kr[n], k_hi[c * LQ + d], k_lo[c * LQ + d]);
                split(vr[n], v_hi[c * LQ + d], v_lo[c * LQ + d]);
            }
        }
        barrier();  // K and V staged (first tile: the q tile too)
        if (j0 + BC < kend) fetch(j0 + BC, kbase);
        scores(r0);
        // 2. This lane's rows rl = lane / LR + x SG / LR, keys c = u + n LR < cn: soft-capped, masked; the partial max.
        float sv[RPL][KPL];
        uint cn[RPL];
        [[unroll]] for (uint x = 0; x < RPL; ++x) {
            const uint rl = lane / LR + x * (SG / LR), i = min(q0 + r0 + rl, p.Sq - 1);
            cn[x] = min(BC, p.Sk - j0);
            if (p.causal != 0) cn[x] = uint(clamp(int(i) + int(p.Sk) - int(p.Sq) - int(j0) + 1, 0, int(cn[x])));
            float mt = -3.402823466e38;
            [[unroll]] for (uint n = 0; n < KPL; ++n) {
                const uint c = u + n * LR;
                float s = s_s[(r0 + rl) * BC + c];
                if (c < cn[x]) {
                    if (p.softcap > 0.0) s = p.softcap * tanh_accurate(s);
                    if (p.has_mask != 0) s += mask[b * p.mask_sb + i * p.mask_sq + j0 + c];
                    mt = max(mt, s);
                }
                sv[x][n] = s;
            }
            red_m[red0 + rl * LR + u] = mt;
        }
        subgroup_sync();  // the partial maxima; every lane has read its scores (s_s is free for the row scaling)
        float alpha[RPL];
        [[unroll]] for (uint x = 0; x < RPL; ++x) {
            const uint rl = lane / LR + x * (SG / LR);
            float mx = m[x], part = 0.0;
            for (uint w = 0; w < LR; ++w) mx = max(mx, red_m[red0 + rl * LR + w]);
            [[unroll]] for (uint n = 0; n < KPL; ++n) {
                const uint c = u + n * LR;
                const float pc = c < cn[x] ? exp(sv[x][n] - mx) : 0.0;
                split(pc * float(1u << PSH), p_hi[(r0 + rl) * LP + c], p_lo[(r0 + rl) * LP + c]);
                part += pc;
            }
            red_l[red0 + rl * LR + u] = part;
            alpha[x] = exp(m[x] - mx);
            m[x] = mx;
            for (uint c = u; c < CN; c += LR) s_s[r0 * BC + rl * CN + c] = alpha[x];
        }
        subgroup_sync();  // P, the partial sums and alpha
        [[unroll]] for (uint x = 0; x < RPL; ++x) {
            const uint rl = lane / LR + x * (SG / LR);
            float sum = 0.0;
            for (uint w = 0; w < LR; ++w) sum += red_l[red0 + rl * LR + w];
            l[x] = l[x] * alpha[x] + sum;
        }
        row_scale(r0);
        pv(r0);
    }
    // out = O 2^-PSH / l (0 for a causal row that sees no key), each fragment staged through this subgroup's s_s rows.
    subgroup_sync();  // the last tile's row scaling has been read
    [[unroll]] for (uint x = 0; x < RPL; ++x) {
        const uint rl = lane / LR + x * (SG / LR);
        const float inv = l[x] > 0.0 ? 1.0 / l[x] : 0.0;
        for (uint c = u; c < CN; c += LR) s_s[r0 * BC + rl * CN + c] = inv / float(1u << PSH);
    }
    row_scale(r0);
    const uint obase = (b * p.Sq + q0) * W + h * D;
    [[unroll]] for (uint fr = 0; fr < FR; ++fr)
        [[unroll]] for (uint fd = 0; fd < FD; ++fd) {
            subgroup_sync();  // the previous fragment has been read (first: the row scaling)
            coopMatStore(o_acc[fr * FD + fd], s_s, r0 * BC, CN, ROW);
            subgroup_sync();
            for (uint e = lane; e < CM * CN; e += SG) {
                const uint rr = r0 + fr * CM + e / CN, d = fd * CN + e % CN;
                if (q0 + rr < p.Sq && d < D) store_o(obase + rr * W + d, s_s[r0 * BC + e]);
            }
        }
}
