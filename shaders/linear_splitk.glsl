// Split-K of the tiled GEMM (linear_coopmat_sk.comp, linear_gemm_sk.comp: linear_gemm.glsl with GEMM_SPLITK), for
// shapes whose M x N / (BM x BN) tiles leave the device's compute units short of workgroups (DiT-XL/2 at 256 px:
// 144 tiles of 64 x 64 on 132 SMs). S = gl_NumWorkGroups.z workgroups share each output tile. Of the T = ceil(K / BK)
// K slices, workgroup z sums the whole slices [z P, min((z + 1) P, T)), P = ceil(T / S) (the lowering makes every
// range non-empty), each slice exactly as the unsplit kernel does (per-slice scale, hi / lo split, products), and
// stores its f32 tile to scratch [S, M, N] (the binding after y; the executor plans it with the activations). A
// second dispatch of the same shader with PHASE = 1 (constant 14), the reduce, sums each element's S partials in the
// order z = 0, 1, .., S - 1 in f32 and applies the epilogue (y_store: bias, activation, gated residual, f16
// storage). No atomics: every run gives the same bits.
// Accuracy: the products are the unsplit kernel's; only the order of the f32 additions changes (S sums of contiguous
// K ranges, then their sum). Any order of adding the K products is within (K - 1) 2^-24 sum |x W| (first order) of
// their exact sum, the bound linear_gemm.glsl's accumulation is held to; this one is within the tighter
// (K / S + S) 2^-24 sum |x W|. So results match coopmat's within that bound, not bitwise.
// Included by linear_gemm.glsl after linear_io.glsl; linear_gate.glsl numbers the bindings.
layout(constant_id = 14) const uint PHASE = 0;  // 0: the partial sums; 1: the reduce
layout(binding = LINEAR_SCRATCH_BINDING) buffer Scratch { float scratch[]; };

// This workgroup's K slices of the `total`: (first, count).
uvec2 splitk_range(uint total) {
    const uint per = (total + gl_NumWorkGroups.z - 1u) / gl_NumWorkGroups.z, t0 = gl_WorkGroupID.z * per;
    return uvec2(t0, min(per, total - min(t0, total)));
}

// The partial sum of element (m, n) over this workgroup's slices.
void splitk_store(uint m, uint n, float v) { scratch[(gl_WorkGroupID.z * p.M + m) * p.N + n] = v; }
#define GEMM_STORE splitk_store

// PHASE 1, on the partial pass's grid: workgroup (x, y, z) finishes the elements e = z NT + tid (+ S NT ..) of tile
// (x, y), row-major in the tile (consecutive invocations, consecutive columns).
void splitk_reduce() {
    const uint S = gl_NumWorkGroups.z, m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, mn = p.M * p.N;
    for (uint e = gl_WorkGroupID.z * NT + gl_LocalInvocationID.x; e < BM * BN; e += S * NT) {
        const uint m = m0 + e / BN, n = n0 + e % BN;
        if (m >= p.M || n >= p.N) continue;
        precise float v = scratch[m * p.N + n];
        for (uint z = 1u; z < S; ++z) v += scratch[z * mn + m * p.N + n];
        y_store(m, n, v);
    }
}
