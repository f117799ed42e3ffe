#pragma once
// Block-quantized weight formats, byte for byte ggml's (so GGUF tools read Kiln files and the reverse).
// A row of K values is K / block(t) consecutive blocks; each block holds its own f16 scale(s).
//   q8_0  32 values, 34 B: f16 d, i8 q[32]                       x = q d
//   q4_0  32 values, 18 B: f16 d, u8 qs[16]                      x = (nibble - 8) d
//   q4_1  32 values, 20 B: f16 d, f16 m, u8 qs[16]               x = nibble d + m
//   q5_0  32 values, 22 B: f16 d, u32 qh, u8 qs[16]              x = (nibble | bit << 4 - 16) d
//   q5_1  32 values, 24 B: f16 d, f16 m, u32 qh, u8 qs[16]       x = (nibble | bit << 4) d + m
//   q4_k 256 values, 144 B: f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale + 6-bit min), u8 qs[128]
//                           x = (d sc_s) nibble - (dmin m_s), sub-block s = i / 32
//   q6_k 256 values, 210 B: u8 ql[128], u8 qh[64], i8 sc[16], f16 d    x = (d sc_s) (q6 - 32), s = i / 16
//   q2_k 256 values,  84 B: u8 scales[16] (4-bit scale | 4-bit min << 4), u8 qs[64], f16 d, f16 dmin
//                           x = (d sc_s) q2 - (dmin m_s), s = i / 16
//   q3_k 256 values, 110 B: u8 hmask[32], u8 qs[64], u8 scales[12] (16 x 6-bit), f16 d
//                           x = (d (sc_s - 32)) (q2 + 4 hbit - 4), s = i / 16
//   q5_k 256 values, 176 B: f16 d, f16 dmin, u8 scales[12] (as q4_k), u8 qh[32], u8 qs[128]
//                           x = (d sc_s) (nibble | hbit << 4) - (dmin m_s), s = i / 32
// In the k-quants, value i = 128 h + 32 c + l: q2_k / q3_k keep its 2 low bits at bit 2c of qs[32 h + l],
// q3_k its high bit at bit 4h + c of hmask[l]; q5_k its fifth bit at bit i / 32 of qh[l] (quant.cpp).
// Nibble i of a 32-value block (q4_0..q5_1) is the low half of qs[i] for i < 16, the high half of qs[i-16]
// otherwise; qh bit i is value i's fifth bit. shaders/quant.glsl is the device side of dequantize();
// both evaluate the same f32 expressions in the same order, so they agree bitwise.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/core/tensor.h"

namespace kiln {

// Quantizes n values (n a multiple of dtype_block(t)) into dst (dtype_nbytes(t, n) bytes).
// Scales are chosen so that every value is within about one quantization step (see the per-format
// bounds in tests/core/test_quant.cpp); zero blocks encode exactly.
void quantize(const float* src, DType t, void* dst, size_t n);
// The storage a float tensor `name` of `shape` gets when `want` (quantized) is asked for. Only linear
// layers' matrices are quantized: 2-D, named "*.weight", rows of whole blocks, and not an embedding table
// (module name containing "embedding", or embed_tokens / shared / relative_attention_bias: gathered by
// row, never a linear operand). K-quant rows that are not whole 256-blocks fall back as llama.cpp does
// (q4_0 standing in for its IQ4_NL): q2_k / q3_k to q4_0, q4_k to q5_0, q5_k to q5_1, q6_k to q8_0;
// anything else is f16.
DType quant_storage(DType want, const std::string& name, const Shape& shape);
// Dequantizes n values (a multiple of dtype_block(t)) of type t from src.
void dequantize(const void* src, DType t, float* dst, size_t n);

}  // namespace kiln
