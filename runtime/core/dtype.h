#pragma once
// Element types, their sizes and names, and exact f16/bf16 <-> f32 conversions.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// q8_0 .. q5_k: ggml's block-quantized weight formats (runtime/core/quant.h); only linear weights use them.
// f8_e4m3 (e4m3fn: bias 7, no inf, S.1111.111 NaN) and f8_e5m2 (bias 15, IEEE-like: the top byte of an f16):
// the fp8 safetensors types. Both are exact subsets of f16; models upcast them at load (models/core/weights.cpp).
// New values are appended: the numbering is part of no file format, but keep it stable anyway.
enum class DType : uint8_t {
    f32,
    f16,
    bf16,
    i32,
    i64,
    u8,
    q8_0,
    q4_0,
    q4_1,
    q5_0,
    q5_1,
    q4_k,
    q6_k,
    q2_k,
    q3_k,
    q5_k,
    f8_e4m3,
    f8_e5m2
};

bool dtype_is_quant(DType t);
// Values per block (1 for plain types; 32 for q8_0..q5_1, 256 for the k-quants q2_k..q6_k) and bytes per block.
int64_t dtype_block(DType t);
size_t dtype_block_bytes(DType t);
// Bytes of n values of type t; throws if n is not a whole number of blocks.
size_t dtype_nbytes(DType t, int64_t n);
// Bytes per element of a plain type; throws for a block-quantized one (use dtype_nbytes).
size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32"/"float32"/"F32", "f16"/"float16"/"F16", "bf16"/"BF16", "i32"/"I32", "i64"/"I64", "u8"/"U8",
// the quantized "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", and
// "f8_e4m3"/"float8_e4m3fn"/"F8_E4M3", "f8_e5m2"/"float8_e5m2"/"F8_E5M2" (any case).
// Throws kiln::Error naming `what` for anything else.
DType parse_dtype(std::string_view s, std::string_view what = "dtype");

// IEEE binary16 <-> binary32, round-to-nearest-even, inf/nan preserved.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
// bfloat16: the top 16 bits of binary32, round-to-nearest-even.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
// fp8 -> binary32, exact (every fp8 value is an f16, hence an f32); NaN stays NaN, e5m2's inf stays inf.
float f8_e4m3_to_f32(uint8_t b);
float f8_e5m2_to_f32(uint8_t b);

// Converts n elements from src (of type from) to dst (of type to). Float types and i32/i64; a quantized
// `from` dequantizes, a quantized `to` quantizes (n whole blocks). fp8 is read only (a source type): a `to`
// of f8_e4m3/f8_e5m2 throws.
void convert(const void* src, DType from, void* dst, DType to, size_t n);

}  // namespace kiln
