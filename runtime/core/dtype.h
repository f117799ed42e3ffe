#pragma once
// Element types, their sizes and names, and exact f16/bf16 <-> f32 conversions.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32"/"float32"/"F32", "f16"/"float16"/"F16", "bf16"/"BF16", "i32"/"I32", "i64"/"I64", "u8"/"U8".
// Throws kiln::Error naming `what` for anything else.
DType parse_dtype(std::string_view s, std::string_view what = "dtype");

// IEEE binary16 <-> binary32, round-to-nearest-even, inf/nan preserved.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
// bfloat16: the top 16 bits of binary32, round-to-nearest-even.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// Converts n elements from src (of type from) to dst (of type to). Float types and i32/i64 only.
void convert(const void* src, DType from, void* dst, DType to, size_t n);

}  // namespace kiln
