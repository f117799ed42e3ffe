// The flash kernel's inner products on cooperative matrices (VK_KHR_cooperative_matrix), included by
// attention_flash.glsl under FLASH_COOPMAT (attention_coopmat.comp): S = Q K^T as BR x DL times DL x BC and
// O = alpha O + P V as BR x BC times BC x DL, in fragments of the device's f16 x f16 + f32 shape CM x CN x CK, DL = D
// rounded up to whole fragments (the loads stage the extra columns as 0). The 64 invocations are NSG = 64 / SG
// subgroups; subgroup g takes score fragments g, g + NSG, ... and output fragments likewise, O in f32 accumulators.
// Operands are f16 pairs: x = hi + lo (split below), and each product takes the three terms hi hi + hi lo + lo hi
// (lo lo is 2^-22 of it); an operand stored f16 (F16 bits) has lo = 0 and its term is skipped. q is staged as
// q * scale * 2^QSH (2^QSH ~ 1 / scale: about q's own magnitude, so lo's f16 subnormals cost what K's do) and S scaled
// back by 2^-QSH, P as P 2^PSH (P in [0, 1]) and O by 2^-PSH at the end: powers of two, exact. Error per product
// (docs/attention.md): 5 2^-22 |x y| + 2^-23 (|x| + |y|), for |x|, |y| < 65504 (f16's range: beyond it hi overflows).
// FAST (F16 bit 8, KILN_PRECISION=fast): every operand is hi alone (rounded to 11 significant bits, 2^-11 relative,
// 2^-25 absolute below f16's normal range) and each product is one hi hi term: a third of the matrix operations.
// alpha and 1 / l scale O's rows through a BR x CN matrix of the row's factor (component-wise product).
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
layout(constant_id = 4) const uint CM = 16;  // the device's matrix shape
layout(constant_id = 5) const uint CN = 16;
layout(constant_id = 6) const uint CK = 16;
layout(constant_id = 7) const uint SG = 32;  // subgroup size (divides 64)
layout(constant_id = 8) const uint DL = 64;  // D rounded up to a multiple of CK and CN
layout(constant_id = 9) const uint QSH = 3;
const uint PSH = 12u;
const bool FAST = (F16 & 8u) != 0u;
const uint NSG = NI / SG;
const uint LQ = DL + 8u;  // f16 row stride of the q and K/V tiles
const uint LP = BC + 8u;  // of P
const uint NFS = (BR / CM) * (BC / CN);  // score fragments
const uint NFO = (BR / CM) * (DL / CN);  // output fragments
const uint FO = (NFO + NSG - 1u) / NSG;  // output fragments per subgroup

shared float16_t q_hi[BR * LQ], q_lo[BR * LQ];
shared float16_t kv_hi[BC * LQ], kv_lo[BC * LQ];
shared float16_t p_hi[BR * LP], p_lo[BR * LP];
shared float rs_s[BR * CN];          // a row scaling (alpha, then 2^-PSH / l) repeated over CN columns
shared float stage[NSG * CM * CN];  // one output fragment per subgroup on its way out

#define ACC coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>
#define MA coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA>
#define MB coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB>
#define ROW gl_CooperativeMatrixLayoutRowMajor
#define COL gl_CooperativeMatrixLayoutColumnMajor

ACC o_acc[FO];  // this subgroup's output fragments gl_SubgroupID + NSG n

void flash_init() {
    [[unroll]] for (uint n = 0; n < FO; ++n) o_acc[n] = ACC(0.0);
}

#include "attention_split.glsl"  // split(x, hi, lo)

void store_q(uint r, uint d, float x) { split(x * float(1u << QSH), q_hi[r * LQ + d], q_lo[r * LQ + d]); }
void store_kv(uint c, uint d, float x) { split(x, kv_hi[c * LQ + d], kv_lo[c * LQ + d]); }
void store_p(uint r, uint c, float pc) { split(pc * float(1u << PSH), p_hi[r * LP + c], p_lo[r * LP + c]); }

// s_s = Q K^T: this subgroup's score fragments, then a barrier (step 2 reads scores other subgroups stored).
void flash_scores(uint r, uint t) {
    const float unscale = 1.0 / float(1u << QSH);
    for (uint f = gl_SubgroupID; f < NFS; f += NSG) {
        const uint qo = (f / (BC / CN)) * CM * LQ, ko = (f % (BC / CN)) * CN * LQ;
        ACC s = ACC(0.0);
        for (uint kk = 0; kk < DL; kk += CK) {
            MA qh, ql;
            MB kh, kl;
            coopMatLoad(qh, q_hi, qo + kk, LQ, ROW);
            coopMatLoad(kh, kv_hi, ko + kk, LQ, COL);  // B[d][c] = K[c][d]
            if (!FAST) {
                coopMatLoad(ql, q_lo, qo + kk, LQ, ROW);
                s = coopMatMulAdd(ql, kh, s);
            }
            if ((F16 & 2u) == 0 && !FAST) {
                coopMatLoad(kl, kv_lo, ko + kk, LQ, COL);
                s = coopMatMulAdd(qh, kl, s);
            }
            s = coopMatMulAdd(qh, kh, s);
        }
        s = s * unscale;
        coopMatStore(s, s_s, (f / (BC / CN)) * CM * BC + (f % (BC / CN)) * CN, BC, ROW);
    }
    barrier();
}

// O *= x per row (row r's T invocations pass its factor): through rs_s, read after a barrier.
void row_scale(uint r, uint t, float x) {
    for (uint c = t; c < CN; c += T) rs_s[r * CN + c] = x;
    barrier();
    [[unroll]] for (uint n = 0; n < FO; ++n) {
        const uint f = gl_SubgroupID + NSG * n;
        if (f < NFO) {
            ACC a;
            coopMatLoad(a, rs_s, (f / (DL / CN)) * CM * CN, CN, ROW);
            o_acc[n] = o_acc[n] * a;
        }
    }
}

// O = alpha O + P V (P and V staged; step 2's barrier passed).
void flash_pv(uint r, uint t, float alpha) {
    row_scale(r, t, alpha);
    [[unroll]] for (uint n = 0; n < FO; ++n) {
        const uint f = gl_SubgroupID + NSG * n;
        if (f >= NFO) continue;
        const uint po = (f / (DL / CN)) * CM * LP, vo = (f % (DL / CN)) * CN;
        for (uint kk = 0; kk < BC; kk += CK) {
            MA ph, pl;
            MB vh, vl;
            coopMatLoad(ph, p_hi, po + kk, LP, ROW);
            coopMatLoad(vh, kv_hi, kk * LQ + vo, LQ, ROW);  // B[c][d] = V[c][d]
            if (!FAST) {
                coopMatLoad(pl, p_lo, po + kk, LP, ROW);
                o_acc[n] = coopMatMulAdd(pl, vh, o_acc[n]);
            }
            if ((F16 & 4u) == 0 && !FAST) {
                coopMatLoad(vl, kv_lo, kk * LQ + vo, LQ, ROW);
                o_acc[n] = coopMatMulAdd(ph, vl, o_acc[n]);
            }
            o_acc[n] = coopMatMulAdd(ph, vh, o_acc[n]);
        }
    }
}

// out = O 2^-PSH / l: each fragment staged through this subgroup's slice of `stage`, rows past Sq and columns past D
// dropped. obase: element (q0, 0) of the head's output.
void flash_out(uint r, uint t, uint q0, uint obase, float inv) {
    barrier();  // every subgroup's last flash_pv has read rs_s
    row_scale(r, t, inv / float(1u << PSH));
    const uint sg = gl_SubgroupID, W = p.H * D;
    [[unroll]] for (uint n = 0; n < FO; ++n) {
        const uint f = sg + NSG * n;
        if (f >= NFO) continue;
        coopMatStore(o_acc[n], stage, sg * CM * CN, CN, ROW);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint e = gl_SubgroupInvocationID; e < CM * CN; e += SG) {
            const uint rr = (f / (DL / CN)) * CM + e / CN, d = (f % (DL / CN)) * CN + e % CN;
            if (q0 + rr < p.Sq && d < D) store_o(obase + rr * W + d, stage[sg * CM * CN + e]);
        }
        subgroupBarrier();
    }
}
