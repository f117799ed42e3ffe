// Shared by every shader: extensions, and the weight storage type of the W_F32/W_F16/W_BF16 variants.
// Weights are read through W2F(): f16 via 16-bit storage, bf16 as the top half of an f32.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable

#if defined(W_Q8_0) || defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || \
    defined(W_Q4_K) || defined(W_Q6_K)
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

// 1-D dispatch helper: invocations beyond n return. Groups may be spread over x and y when
// n / local_size exceeds maxComputeWorkGroupCount[0] (65535).
uint flat_id() { return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x; }
