#pragma once
// The op table. One line per op: X(name, kind). Generates the Op enum, op names and, in each
// backend, its dispatch table — so a missing CPU reference or Vulkan lowering fails to link.
// kind: compute (has a shader) or view (an alias of its input's memory, no shader).
//
// Dtype rule: activations are f32. The "matrix" operand of linear/conv2d/embedding may be stored
// f32, f16 or bf16 (one shader source, compiled per weight dtype); that of linear may also be one of
// ggml's block-quantized types (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k; rows of whole blocks),
// dequantized inside the shader. Every other operand is f32, except activations stored as f16 (ir::store_f16,
// KILN_ACT_F16=1), which only linear and concat read.
#define KILN_OPS(X)                                                                                    \
    X(add, compute)                /* a + b, numpy broadcasting */                                     \
    X(sub, compute)                /* a - b, numpy broadcasting */                                     \
    X(mul, compute)                /* a * b, numpy broadcasting */                                     \
    X(div, compute)                /* a / b, numpy broadcasting */                                     \
    X(scale, compute)              /* alpha * x + beta */                                              \
    X(silu, compute)               /* x * sigmoid(x) */                                                \
    X(relu, compute)               /* max(x, 0) */                                                     \
    X(tanh, compute)               /* tanh(x) */                                                       \
    X(gelu, compute)               /* exact erf, or tanh approximation */                              \
    X(softmax, compute)            /* over the last dim */                                             \
    X(layer_norm, compute)         /* last dim; optional weight, bias */                               \
    X(group_norm, compute)         /* [B, C, *] with G groups; optional weight, bias */                \
    X(rms_norm, compute)           /* last dim; optional weight */                                     \
    X(linear, compute)             /* x [.., K] @ W[N, K]^T + b[N], then an optional activation */     \
    X(matmul, compute)             /* a [B, M, K] @ b [B|1, K, N] */                                   \
    X(attention, compute)          /* softmax(q k^T * s + mask) v, heads packed in the last dim */     \
    X(modulate, compute)           /* x [B, N, C] * (1 + scale[B, C]) + shift[B, C] */                 \
    X(rope, compute)               /* x [B, S, H*D] pairs rotated by cos/sin [S, D/2] */               \
    X(embedding, compute)          /* table [V, D] rows by i32 ids [N] */                              \
    X(timestep_embedding, compute) /* diffusers get_timestep_embedding */                              \
    X(conv2d, compute)             /* NCHW, any kernel / stride / padding / groups */                  \
    X(upsample_nearest2x, compute) /* [B, C, H, W] -> [B, C, 2H, 2W] */                                \
    X(permute, compute)            /* generic axis permutation, rank <= 6 */                           \
    X(concat, compute)             /* two inputs along one axis */                                     \
    X(slice, compute)              /* [start, start+length) along one axis */                          \
    X(linear_multi, compute)       /* fused: up to 4 linears of one x, each output its own value */    \
    X(norm_modulate, compute)      /* fused: modulate(layer_norm(x) without affine, shift, scale) */   \
    X(mul_add, compute)            /* fused: a * b + c, numpy broadcasting (product rounded first) */  \
    X(rms_norm_rope, compute)      /* fused: rope(rms_norm of each head of x [B, S, H*D], cos, sin) */ \
    X(reshape, view)               /* same elements, new shape */

namespace kiln::ir {

enum class Op : uint8_t {
#define KILN_X(name, kind) name,
    KILN_OPS(KILN_X)
#undef KILN_X
};
enum class OpKind : uint8_t { compute, view };

inline constexpr int kOpCount = 0
#define KILN_X(name, kind) +1
    KILN_OPS(KILN_X)
#undef KILN_X
    ;

const char* op_name(Op op);
OpKind op_kind(Op op);

}  // namespace kiln::ir
