// Shared by every shader: extensions, and the weight storage type of the W_F32/W_F16/W_BF16 variants.
// Weights are read through W2F(): f16 via 16-bit storage, bf16 as the top half of an f32.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable

#if defined(W_Q8_0) || defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || \
    defined(W_Q2_K) || defined(W_Q3_K) || defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
#define W_QUANT  // block-quantized weights: see quant.glsl
#endif

#if defined(W_F16)
#define WTYPE float16_t
#define W2F(x) float(x)
#elif defined(W_BF16)
#define WTYPE uint16_t
#define W2F(x) uintBitsToFloat(uint(x) << 16)
#else
#define WTYPE float
#define W2F(x) (x)
#endif

// WEIGHT_BUF(binding, Block, T, name): a read-only input `name[]` that may be a block weight. In the
// "_ptr" variants (-DKILN_PTR; for the regional replay, which selects each block instance's weights on
// the device) the binding holds a small table of 64-bit device addresses, one per input binding, and
// `name` is the array at entry [binding] (the including shader then #defines name as Block_p.data).
// Bindings declared this way are found by reflection through the "_ptrs" suffix of their block name.
#ifdef KILN_PTR
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#define WEIGHT_BUF(B, Blk, T, name)                                                                       \
    layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Blk##_ref { T data[]; };        \
    layout(binding = B) readonly buffer Blk##_ptrs { uvec2 Blk##_addr[]; };                               \
    Blk##_ref Blk##_p = Blk##_ref(Blk##_addr[B]);
#define WBASE(Blk) 0u
#define SELECT_BUF(B)
#elif defined(KILN_OFF)
// "_off" variants (-DKILN_OFF): the weight binding holds a whole range of block instances (one binding for
// every replay) and `name` is read from element WBASE(Blk) on. The shader's last binding, declared by
// SELECT_BUF(B), is the dispatch's slot of the selection table: one uint per binding, the element offset of
// this replay's weight in 16-byte units (the primary writes it before each replay); non-weight inputs get 0.
// Plain storage-buffer loads: on lavapipe as fast as the plain variant (address loads are not, see
// runtime/exec/block_weights.cpp). The slot is a uniform buffer: llvmpipe reads a uniform buffer at a
// constant offset once for all lanes, a storage buffer lane by lane (measurably slower on tiny elementwise ops).
#define KILN_BYTES_float 4u
#define KILN_BYTES_vec4 16u
#define KILN_BYTES_float16_t 2u
#define KILN_BYTES_uint16_t 2u
#define KILN_BYTES_f16vec4 8u
#define KILN_BYTES_u16vec4 8u
#define KILN_BYTES_(T) KILN_BYTES_##T
#define KILN_BYTES(T) KILN_BYTES_(T)
#ifndef KILN_SEL_VECS
#define KILN_SEL_VECS 2  // <= 8 inputs (linear_multi: 3)
#endif
#define SELECT_BUF(B) layout(binding = B, std140) uniform Kiln_sel { uvec4 kiln_sel[KILN_SEL_VECS]; };
#define WEIGHT_BUF(B, Blk, T, name)                                     \
    layout(binding = B) readonly buffer Blk { T name[]; };              \
    uint Blk##_base = kiln_sel[B / 4][B % 4] * (16u / KILN_BYTES(T));
#define WBASE(Blk) Blk##_base
// A weight read through a uniform texel buffer (SAMPLER: textureBuffer or utextureBuffer) of texels of T's size.
#define WEIGHT_TEXEL(B, Blk, SAMPLER, T, name)    \
    layout(binding = B) uniform SAMPLER name;     \
    uint Blk##_base = kiln_sel[B / 4][B % 4] * (16u / KILN_BYTES(T));
#else
#define WEIGHT_BUF(B, Blk, T, name) layout(binding = B) readonly buffer Blk { T name[]; };
#define WEIGHT_TEXEL(B, Blk, SAMPLER, T, name) layout(binding = B) uniform SAMPLER name;
#define WBASE(Blk) 0u
#define SELECT_BUF(B)
#endif

// The tile (column tile x, row tile y) of a 2-D tiled dispatch (the linear kernels: gx column tiles of N, gy row tiles
// of M) that this workgroup computes, in a grouped order: workgroups, taken in id order (x fastest), walk bands of
// `group` row tiles, each band column tile by column tile, down the band's rows. Consecutive workgroups share
// a W tile (read by the band's rows one after another), an x row panel is re-read within its band, and W is swept once
// per band instead of once per row tile (docs/jit.md, "Workgroup order"). `group` (>= 1), the band's row tiles, is the
// lowering's (push constant tile_group; vk::linear_tile_group), which gives the traffic model the same value.
// Independent of the arithmetic: each tile is computed as before, only by another workgroup.
uvec2 tile_xy(uint group) {
    const uint gx = gl_NumWorkGroups.x, gy = gl_NumWorkGroups.y, id = gl_WorkGroupID.y * gx + gl_WorkGroupID.x;
    const uint band = id / (group * gx), r0 = band * group, rows = min(group, gy - r0);
    const uint at = id - r0 * gx;  // within the band: column tile at / rows, its row at % rows
    return uvec2(at / rows, r0 + at % rows);
}

// 1-D dispatch helper: invocations beyond n return. Groups may be spread over x and y when
// n / local_size exceeds maxComputeWorkGroupCount[0] (65535).
uint flat_id() { return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x; }
