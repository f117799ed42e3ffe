// Push-constant parameter structs of every shader, written once for C++ and GLSL.
// C++: plain structs in kiln::params, each static_assert'ed to fit the 128-byte push budget.
// GLSL: a shader defines USE_<NAME> before including this file and gets `p` as its push block.
// Only uint/int/float scalars and uint arrays: std430 push layout then equals the C++ layout.
#ifndef KILN_PARAMS_H
#define KILN_PARAMS_H

#ifdef __cplusplus
#include <cstdint>
namespace kiln::params {
using uint = uint32_t;
#define KILN_PARAMS(name) struct name
#define KILN_PARAMS_END(name) \
    ;                         \
    static_assert(sizeof(name) <= 128, #name " exceeds the push-constant budget");
#else
#define KILN_PARAMS(name) layout(push_constant) uniform name##_pc
#define KILN_PARAMS_END(name) p;
#endif

// add/sub/mul: out[i] = a[oa + ia] op b[ob + ib]; i decomposed over `shape` (rank dims, outermost first),
// ia/ib from per-dim strides (0 on broadcast dims). oa/ob and strides other than the plain ones: an operand read
// as a slice of a wider value (ir::InputView).
#if defined(__cplusplus) || defined(USE_BINARY)
KILN_PARAMS(BinaryParams) {
    uint n, rank;
    uint shape[6];
    uint sa[6];
    uint sb[6];
    uint oa, ob;
    uint act;  // ir::Act applied to the result (a fused activation, ir::fuse), 0: none
} KILN_PARAMS_END(BinaryParams)
#endif

// mul_add: out[i] = a[oa + ia] * b[ob + ib] + c[oc + ic], as BinaryParams with a third operand.
#if defined(__cplusplus) || defined(USE_MUL_ADD)
KILN_PARAMS(MulAddParams) {
    uint n, rank;
    uint shape[6];
    uint sa[6];
    uint sb[6];
    uint sc[6];
    uint oa, ob, oc;
} KILN_PARAMS_END(MulAddParams)
#endif

// scale: alpha*x + beta; silu; gelu (mode 1 = tanh approximation).
#if defined(__cplusplus) || defined(USE_UNARY)
KILN_PARAMS(UnaryParams) {
    uint n, mode;
    float alpha, beta;
} KILN_PARAMS_END(UnaryParams)
#endif

// softmax / layer_norm / rms_norm over the last dim: rows x cols.
#if defined(__cplusplus) || defined(USE_ROW)
KILN_PARAMS(RowParams) {
    uint rows, cols, has_w, has_b;
    float eps;
} KILN_PARAMS_END(RowParams)
#endif

// group_norm on [B, C, HW] with G groups.
#if defined(__cplusplus) || defined(USE_GROUP_NORM)
KILN_PARAMS(GroupNormParams) {
    uint B, C, HW, G, has_w, has_b;
    float eps;
} KILN_PARAMS_END(GroupNormParams)
#endif

// linear: y[M, N] = x[M, K] @ W[N, K]^T + b[N]. A gated linear (ir::fuse: the "_gated" shaders) also adds a gated
// residual, y = res + gate * h: gate row m / g_rows starts at element g_off + (m / g_rows) g_stride (g_stride N and
// g_off 0, or the view's width and start where the gate is read as a slice: ir::InputView).
#if defined(__cplusplus) || defined(USE_LINEAR)
KILN_PARAMS(LinearParams) {
    uint M, N, K, has_bias;
    uint g_off, g_stride, g_rows;
    uint tile_group;  // row tiles per band of the grouped workgroup order (vk::linear_tile_group)
} KILN_PARAMS_END(LinearParams)
#endif

// linear_multi: y_i[M, N[i]] = x[M, K] @ W_i[N[i], K]^T + b_i (bit i of has_bias); part i owns the workgroup
// columns [tile0[i], tile0[i + 1]) (tile0[4] = all of them).
#if defined(__cplusplus) || defined(USE_LINEAR_MULTI)
KILN_PARAMS(LinearMultiParams) {
    uint M, K, has_bias, parts;
    uint N[4];
    uint tile0[5];
    uint tile_group;  // as LinearParams'
} KILN_PARAMS_END(LinearMultiParams)
#endif

// norm_modulate: row r of x [B, N, C] (rows = B N, cols = C) normalised, then * (1 + scale[r / N]) + shift[r / N];
// shift/scale row b starts at element sh_off + b sh_stride / sc_off + b sc_stride (C and 0 unless read as a slice).
#if defined(__cplusplus) || defined(USE_NORM_MODULATE)
KILN_PARAMS(NormModulateParams) {
    uint rows, cols, N;
    float eps;
    uint sh_off, sh_stride, sc_off, sc_stride;
} KILN_PARAMS_END(NormModulateParams)
#endif

// matmul: y[B, M, N] = a[B, M, K] @ b[B|1, K, N]; b_batch_stride = 0 when b is broadcast.
#if defined(__cplusplus) || defined(USE_MATMUL)
KILN_PARAMS(MatmulParams) {
    uint B, M, N, K, b_batch_stride;
} KILN_PARAMS_END(MatmulParams)
#endif

// attention: q [B, Sq, H*D], k/v [B, Sk, Hkv*D], mask [B|1, Sq|1, Sk] additive (mask_sb/mask_sq are its
// batch/row strides, 0 when broadcast), out [B, Sq, H*D]; q head h reads k/v head h / (H / Hkv). scale multiplies q
// (already divided by softcap where softcap > 0: s = softcap * tanh(q.k)); causal: key j visible to row i iff
// j <= i + Sk - Sq (ir::AttentionAttrs).
#if defined(__cplusplus) || defined(USE_ATTENTION)
KILN_PARAMS(AttentionParams) {
    uint B, Sq, Sk, H, D, has_mask, mask_sb, mask_sq;
    float scale;
    uint Hkv, causal;
    float softcap;
} KILN_PARAMS_END(AttentionParams)
#endif

// modulate: y[b, n, c] = x[b, n, c] * (1 + scale[b, c]) + shift[b, c]; shift/scale rows as in norm_modulate.
#if defined(__cplusplus) || defined(USE_MODULATE)
KILN_PARAMS(ModulateParams) {
    uint B, N, C;
    uint sh_off, sh_stride, sc_off, sc_stride;
} KILN_PARAMS_END(ModulateParams)
#endif

// rope: x [B, S, H, 2*pairs]; pair i of (b, s, h) rotated by cos/sin[s, i].
#if defined(__cplusplus) || defined(USE_ROPE)
KILN_PARAMS(RopeParams) {
    uint B, S, H, pairs;  // pairs = D / 2
} KILN_PARAMS_END(RopeParams)
#endif

// embedding: y[i, :] = table[ids[i], :], table [V, D].
#if defined(__cplusplus) || defined(USE_EMBEDDING)
KILN_PARAMS(EmbeddingParams) {
    uint N, D, V;
} KILN_PARAMS_END(EmbeddingParams)
#endif

// timestep_embedding (diffusers get_timestep_embedding): y [N, dim].
#if defined(__cplusplus) || defined(USE_TIMESTEP)
KILN_PARAMS(TimestepParams) {
    uint N, dim, half_dim, flip;
    float shift, scale, log_max_period;
} KILN_PARAMS_END(TimestepParams)
#endif

// conv2d NCHW: x [B, C, H, W], w [O, C, KH, KW] -> y [B, O, HO, WO].
#if defined(__cplusplus) || defined(USE_CONV2D)
KILN_PARAMS(Conv2dParams) {
    uint B, C, H, W, O, KH, KW, HO, WO, stride_h, stride_w, pad_h, pad_w, has_bias, groups;
} KILN_PARAMS_END(Conv2dParams)
#endif

// upsample_nearest2x: [BC, H, W] -> [BC, 2H, 2W].
#if defined(__cplusplus) || defined(USE_UPSAMPLE)
KILN_PARAMS(UpsampleParams) {
    uint BC, H, W;
} KILN_PARAMS_END(UpsampleParams)
#endif

// permute: out index decomposed over out_shape; src = sum idx[d] * in_stride[d].
#if defined(__cplusplus) || defined(USE_PERMUTE)
KILN_PARAMS(PermuteParams) {
    uint n, rank;
    uint out_shape[6];
    uint in_stride[6];
} KILN_PARAMS_END(PermuteParams)
#endif

// concat along an axis: both inputs seen as [outer, na] and [outer, nb] -> out [outer, na + nb].
#if defined(__cplusplus) || defined(USE_CONCAT)
KILN_PARAMS(ConcatParams) {
    uint outer, na, nb;
} KILN_PARAMS_END(ConcatParams)
#endif

// slice: input seen as [outer, in_row], out [outer, out_row] = in[:, start : start + out_row].
#if defined(__cplusplus) || defined(USE_SLICE)
KILN_PARAMS(SliceParams) {
    uint outer, in_row, start, out_row;
} KILN_PARAMS_END(SliceParams)
#endif

// rms_norm_rope: rows = B S H heads of D = 2 pairs values; head r is at sequence position (r / H) % S.
#if defined(__cplusplus) || defined(USE_RMS_ROPE)
KILN_PARAMS(RmsRopeParams) {
    uint rows, D, H, S, has_w;
    float eps;
} KILN_PARAMS_END(RmsRopeParams)
#endif

// select_advance: the device-side block counter of a regional replay (runtime/exec/block_weights.cpp). Every
// invocation adds 1 to rows[ctr]; with `width` invocations per dispatch, old / width is the replay just run. Row
// old / width + 1 of the kind's selection rows (words uints each, from rows[row0]) is copied into the slots
// (table[live] on) that the next replay's dispatches read; after the last replay (n) nothing is copied.
#if defined(__cplusplus) || defined(USE_SELECT_ADVANCE)
KILN_PARAMS(SelectAdvanceParams) {
    uint row0, words, n, ctr, live, width;
} KILN_PARAMS_END(SelectAdvanceParams)
#endif

#ifdef __cplusplus
}  // namespace kiln::params
#endif
#endif  // KILN_PARAMS_H
