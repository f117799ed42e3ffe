// Flash attention body: out = softmax(q k^T * scale (soft-capped) + mask) v per (batch, head), q/out [B, Sq, H*D],
// k/v [B, Sk, Hkv*D] (params.h). One workgroup of 64 invocations owns BR query rows of one (b, h); the q tile (pre-
// scaled) sits in shared memory, and K/V are walked in tiles of BC keys staged through one shared buffer (K, then V
// over it). Per tile, with the BR x BC scores S in shared memory:
//   1. S = Q K^T                                  (flash_scores: the inner product a cooperative-matrix variant
//   2. per row: m' = max(m, max S), alpha = exp(m - m'), P = exp(S - m'), l = alpha l + sum P     swaps; so is 3)
//   3. O = alpha O + P V                          (flash_pv)
// and at the end out = O / l. The score matrix is never stored beyond one tile. Invocation (r, t) = (tid / T,
// tid % T), T = 64 / BR: row r's scores j = t, t + T, ... (step 2 too: the row's max and sum of P combine the T
// invocations' partials through shared memory, t ascending); its output columns d = t, t + T, ... in registers.
// Shared rows are padded to D + 1 floats, so the T lanes of a row (reading K rows j, j + 1, ...) hit distinct
// banks. Each score is one invocation's dot product over d ascending; nothing is reduced across a subgroup, so the
// results do not depend on the subgroup size. Rows past Sq and keys past Sk are clamped for the loads; keys past
// Sk or past the causal limit get P = 0, and K/V tiles beyond the workgroup's last visible key are skipped. Shared
// memory: lower_attention.cpp.
// FLASH_COOPMAT (attention_coopmat.comp) swaps steps 1 and 3 for cooperative matrices (attention_flash_cm.glsl);
// the loads, step 2 and the barriers are this file's.
// Workgroups: (ceil(Sq / BR), H, B).
#include "common.glsl"
#include "mathf.glsl"
#define USE_ATTENTION
#include "runtime/ir/params.h"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint D = 64;   // head_dim
layout(constant_id = 1) const uint BR = 16;  // query rows per workgroup (4, 8 or 16)
layout(constant_id = 2) const uint BC = 32;  // keys per K/V tile
layout(constant_id = 3) const uint F16 = 0;  // bit i: q, k, v (i = 0, 1, 2) stored f16; 8: KILN_PRECISION=fast;
                                             // 16: the output stored f16 (one rounding of the f32 value)
const uint NI = 64;
const uint T = NI / BR;          // invocations per query row
const uint DT = (D + T - 1) / T; // output columns per invocation
const uint NS = (BC + T - 1) / T; // scores per invocation

layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 0) readonly buffer Q16 { float16_t q16[]; };
layout(binding = 1) readonly buffer Kb { float k[]; };
layout(binding = 1) readonly buffer K16 { float16_t k16[]; };
layout(binding = 2) readonly buffer V { float v[]; };
layout(binding = 2) readonly buffer V16 { float16_t v16[]; };
layout(binding = 3) readonly buffer Mk { float mask[]; };
layout(binding = 4) writeonly buffer O { float o[]; };
layout(binding = 4) writeonly buffer O16 { float16_t o16[]; };

shared float s_s[BR * BC];
shared float red_m[NI], red_l[NI];  // per invocation: its keys' max and sum of P in the current tile

float load_q(uint i) { return (F16 & 1u) != 0 ? float(q16[i]) : q[i]; }
float load_k(uint i) { return (F16 & 2u) != 0 ? float(k16[i]) : k[i]; }
float load_v(uint i) { return (F16 & 4u) != 0 ? float(v16[i]) : v[i]; }
void store_o(uint i, float x) {
    if ((F16 & 16u) != 0)
        o16[i] = float16_t(x);
    else
        o[i] = x;
}

#ifdef FLASH_COOPMAT
#include "attention_flash_cm.glsl"  // DL, store_q, store_kv, flash_scores, store_p, flash_init, flash_pv, flash_out
#else
const uint DL = D;      // columns of q / K / V the loads stage
const uint DS = D + 1;  // shared row stride
shared float q_s[BR * DS];
shared float kv_s[BC * DS + T];  // + the columns flash_pv reads past the last row's D

void store_q(uint r, uint d, float x) { q_s[r * DS + d] = x; }
void store_kv(uint c, uint d, float x) { kv_s[c * DS + d] = x; }
void store_p(uint r, uint c, float pc) { s_s[r * BC + c] = pc; }

// s_s[r][c] = q_s[r] . kv_s[c] for this invocation's keys c = t + n T, n < NS (scalar: one dot per key and
// invocation, d ascending; each q element loaded once for the NS keys).
void flash_scores(uint r, uint t) {
    float s[NS];
    uint row[NS];  // keys past the tile (BC % T != 0, BC < T) read its last row and are not stored
    [[unroll]] for (uint n = 0; n < NS; ++n) {
        s[n] = 0.0;
        row[n] = min(t + n * T, BC - 1) * DS;
    }
    for (uint d = 0; d < D; ++d) {
        float qd = q_s[r * DS + d];
        [[unroll]] for (uint n = 0; n < NS; ++n) s[n] += qd * kv_s[row[n] + d];
    }
    [[unroll]] for (uint n = 0; n < NS; ++n)
        if (t + n * T < BC) s_s[r * BC + t + n * T] = s[n];
}

float acc[DT];  // row r's output columns d = t + x T

void flash_init() {
    [[unroll]] for (uint x = 0; x < DT; ++x) acc[x] = 0.0;
}

// acc[x] = alpha acc[x] + sum_c s_s[r][c] kv_s[c][d], d = t + x T, c ascending (columns d >= D are computed from
// padding and never stored).
void flash_pv(uint r, uint t, float alpha) {
    [[unroll]] for (uint x = 0; x < DT; ++x) acc[x] *= alpha;
    for (uint c = 0; c < BC; ++c) {
        float pc = s_s[r * BC + c];
        [[unroll]] for (uint x = 0; x < DT; ++x) acc[x] += pc * kv_s[c * DS + t + x * T];
    }
}

// out[row] = O / l (inv = 1 / l, 0 for a causal row that sees no key); obase: element (q0, 0) of the head's output.
void flash_out(uint r, uint t, uint q0, uint obase, float inv) {
    if (q0 + r >= p.Sq) return;
    [[unroll]] for (uint x = 0; x < DT; ++x) {
        uint d = t + x * T;
        if (d < D) store_o(obase + r * p.H * D + d, acc[x] * inv);
    }
}
#endif

void main() {
    uint tid = gl_LocalInvocationID.x, r = tid / T, t = tid % T;
    uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, q0 = gl_WorkGroupID.x * BR;
    uint hk = h / (p.H / p.Hkv), W = p.H * D, Wk = p.Hkv * D;
    uint i = min(q0 + r, p.Sq - 1);          // this invocation's query row (clamped)
    int lim = int(i) + int(p.Sk) - int(p.Sq);  // causal: the last key row i sees
    // Keys any row of the workgroup sees: all, or up to the causal limit of its last row.
    uint kend = p.Sk;
    if (p.causal != 0) kend = uint(clamp(int(min(q0 + BR, p.Sq)) + int(p.Sk) - int(p.Sq), 0, int(p.Sk)));

    // Columns d in [D, DL) (the cooperative-matrix variant's padding to whole fragments) are staged as 0.
    for (uint e = tid; e < BR * DL; e += NI) {
        uint rr = e / DL, d = e % DL;
        store_q(rr, d, d < D ? load_q((b * p.Sq + min(q0 + rr, p.Sq - 1)) * W + h * D + d) * p.scale : 0.0);
    }
    flash_init();
    float m = -3.402823466e38, l = 0.0;  // row r's running max and sum (the same in each of its T invocations)

    for (uint j0 = 0; j0 < kend; j0 += BC) {
        barrier();  // the previous tile's P V has read kv_s and s_s (first tile: q_s is written)
        for (uint e = tid; e < BC * DL; e += NI) {
            uint c = e / DL, d = e % DL;
            store_kv(c, d, d < D ? load_k((b * p.Sk + min(j0 + c, p.Sk - 1)) * Wk + hk * D + d) : 0.0);
        }
        barrier();
        flash_scores(r, t);
        // This invocation's keys (it wrote them): soft-capped, masked; their max. Keys past Sk or the causal limit
        // are left out (P = 0 below).
        uint cn = min(BC, p.Sk - j0);
        if (p.causal != 0) cn = uint(clamp(lim - int(j0) + 1, 0, int(cn)));
        float mt = -3.402823466e38;
        for (uint c = t; c < cn; c += T) {
            float s = s_s[r * BC + c];
            if (p.softcap > 0.0) s = p.softcap * tanh_accurate(s);
            if (p.has_mask != 0) s += mask[b * p.mask_sb + i * p.mask_sq + j0 + c];
            s_s[r * BC + c] = s;
            mt = max(mt, s);
        }
        red_m[tid] = mt;
        barrier();
        // Row max over the row's T partials (t ascending, so every lane of the row agrees), P for this
        // invocation's keys and their sum; V over K meanwhile.
        float mx = m;
        for (uint u = 0; u < T; ++u) mx = max(mx, red_m[r * T + u]);
        float part = 0.0;
        for (uint c = t; c < BC; c += T) {
            float pc = c < cn ? exp(s_s[r * BC + c] - mx) : 0.0;
            store_p(r, c, pc);
            part += pc;
        }
        red_l[tid] = part;
        for (uint e = tid; e < BC * DL; e += NI) {
            uint c = e / DL, d = e % DL;
            store_kv(c, d, d < D ? load_v((b * p.Sk + min(j0 + c, p.Sk - 1)) * Wk + hk * D + d) : 0.0);
        }
        barrier();
        float alpha = exp(m - mx), sum = 0.0;
        for (uint u = 0; u < T; ++u) sum += red_l[r * T + u];
        l = l * alpha + sum;
        m = mx;
        flash_pv(r, t, alpha);
    }
    float inv = l > 0.0 ? 1.0 / l : 0.0;  // 0: a causal row that sees no key
    flash_out(r, t, q0, (b * p.Sq + q0) * W + h * D, inv);
}
