#pragma once
// Element types, their sizes and names, and exact f16/bf16 <-> f32 conversions.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// q8_0 .. q6_k: ggml's block-quantized weight formats (runtime/core/quant.h); only linear weights use them.
enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k };

bool dtype_is_quant(DType t);
// Values per block (1 for plain types; 32 for q8_0..q5_1, 256 for q4_k/q6_k) and bytes per block.
int64_t dtype_block(DType t);
size_t dtype_block_bytes(DType t);
// Bytes of n values of type t; throws if n is not a whole number of blocks.
size_t dtype_nbytes(DType t, int64_t n);
// Bytes per element of a plain type; throws for a block-quantized one (use dtype_nbytes).
size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32"/"float32"/"F32", "f16"/"float16"/"F16", "bf16"/"BF16", "i32"/"I32", "i64"/"I64", "u8"/"U8",
// and the quantized "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q6_k" (any case).
// Throws kiln::Error naming `what` for anything else.
DType parse_dtype(std::string_view s, std::string_view what = "dtype");

// IEEE binary16 <-> binary32, round-to-nearest-even, inf/nan preserved.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
// bfloat16: the top 16 bits of binary32, round-to-nearest-even.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// Converts n elements from src (of type from) to dst (of type to). Float types and i32/i64; a quantized
// `from` dequantizes, a quantized `to` quantizes (n whole blocks).
void convert(const void* src, DType from, void* dst, DType to, size_t n);

}  // namespace kiln
