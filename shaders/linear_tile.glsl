// One linear's output tile (the body of linear.glsl, shared with linear_multi.comp so both compute every
// output element by the same code): void LT_FN(uint tile_x, uint tile_y) computes columns [16 RN tile_x,
// 16 RN (tile_x + 1)) of row tile tile_y (LY RM rows), see linear.glsl. The includer defines:
//   LT_FN (name), LT_N (columns), LT_WLOAD(i) (one VT of W at index i), LT_W0 (index of W's first element),
//   LT_HAS_BIAS / LT_BIAS(n) (bias), LT_Y (output array) or LT_STORE(i, v), LT_ACT (activation code,
//   activation.glsl), optionally LT_XLOAD(i) (one VT of x; default x[i]);
// and VT, KSTEPS, RN, RM, LY, p.M, x as linear.glsl does. It may be included several times.
#ifndef LT_XLOAD
#define LT_XLOAD(i) x[i]
#endif
#ifndef LT_FMA_DEFINED
#define LT_FMA_DEFINED
// acc + a . b as one fma per product, in k order (components 0 to 3): the sum order of linear_smem.comp, so every linear
// variant gives the same bits on a device. (dot() then an add is another sum: the driver picks dot's order and
// whether the add fuses with its last product.) The same GLSL.std.450 Fma in both shaders: no contraction or
// reassociation applies to it, whatever the driver lowers it to.
float lt_fma(float a, float b, float acc) { return fma(a, b, acc); }
float lt_fma(vec4 a, vec4 b, float acc) {  // indices, not .xyzw: KILN_PTR #defines w
    return fma(a[3], b[3], fma(a[2], b[2], fma(a[1], b[1], fma(a[0], b[0], acc))));
}
#endif
#ifndef LT_STORE
#define LT_STORE(i, v) LT_Y[i] = (v)
#endif
void LT_FN(uint tile_x, uint tile_y) {
    const uint N = LT_N;
    uint n0 = tile_x * (16 * RN) + gl_LocalInvocationID.x;
    uint m0 = tile_y * (LY * RM) + gl_LocalInvocationID.y;
    uint ks = KSTEPS;
    uint xr[RM], wr[RN];  // row starts in units of VT
    [[unroll]] for (uint i = 0; i < RM; ++i) xr[i] = min(m0 + LY * i, p.M - 1) * ks;
    [[unroll]] for (uint j = 0; j < RN; ++j) wr[j] = LT_W0 + min(n0 + 16 * j, N - 1) * ks;
    float acc[RM][RN];
    [[unroll]] for (uint i = 0; i < RM; ++i)
        [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
    for (uint k = 0; k < ks; ++k) {
        VT a[RM], b[RN];
        [[unroll]] for (uint i = 0; i < RM; ++i) a[i] = LT_XLOAD(xr[i] + k);
        [[unroll]] for (uint j = 0; j < RN; ++j) b[j] = LT_WLOAD(wr[j] + k);
        [[unroll]] for (uint i = 0; i < RM; ++i)
            [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = lt_fma(a[i], b[j], acc[i][j]);
    }
    [[unroll]] for (uint i = 0; i < RM; ++i) {
        uint m = m0 + LY * i;
        if (m >= p.M) break;
        [[unroll]] for (uint j = 0; j < RN; ++j) {
            uint n = n0 + 16 * j;
            if (n < N) LT_STORE(m * N + n, act_apply(LT_ACT, acc[i][j] + (LT_HAS_BIAS ? LT_BIAS(n) : 0.0)));
        }
    }
}
