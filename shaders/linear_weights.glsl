// The weight and bias bindings of the tiled linear kernels (linear_smem.comp, linear_coopmat.comp): W [N, K] as
// linear.glsl takes it (f32, f16, bf16 or a ggml block format: W_F32 / W_F16 / W_BF16 / W_QUANT with its W_Q*
// name, the same bindings and the "_ptr" / "_off" block-weight forms) at binding 1, the bias (f32) at binding 2.
// Defines WLOAD(i): 4-vector i of W in row-major order as f32 (ggml blocks dequantized by quant.glsl, bitwise as
// kiln::dequantize), and W0: the index WLOAD adds to a row's offset (WBASE(Wt); 0 for ggml blocks, whose
// quant.glsl reads from WBASE(Wt) itself). W_F16 also gets WLOAD16(i), the 4-vector as stored.
// The includer declares SELECT_BUF first.
#ifndef KILN_LINEAR_WEIGHTS_GLSL
#define KILN_LINEAR_WEIGHTS_GLSL
#if defined(W_F16)
WEIGHT_BUF(1, Wt, f16vec4, w)
#define WLOAD16(i) w[i]
#define WLOAD(i) vec4(w[i])
#elif defined(W_BF16)
WEIGHT_BUF(1, Wt, u16vec4, w)
#define WLOAD(i) uintBitsToFloat(uvec4(w[i]) << 16)
#elif defined(W_QUANT)
WEIGHT_BUF(1, Wt, uint16_t, w)
#ifdef KILN_PTR
#define w Wt_p.data  // before quant.glsl, whose functions read w
#endif
#include "quant.glsl"
#define WLOAD(i) dq4(i)
#else
WEIGHT_BUF(1, Wt, vec4, w)
#define WLOAD(i) w[i]
#endif
WEIGHT_BUF(2, Bs, float, bias)
#ifdef KILN_PTR
#ifndef w
#define w Wt_p.data
#endif
#define bias Bs_p.data
#endif
#ifdef W_QUANT
#define W0 0u
#else
#define W0 WBASE(Wt)
#endif
#endif
