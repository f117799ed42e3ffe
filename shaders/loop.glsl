// Shared by the loop_* shaders (the denoising loop on the device, models/loop/step_program.h).
// div_rn(a, b): a / b rounded to nearest even, as the host's float division. Vulkan lets a float OpFDiv be 2.5 ulp
// off, so the variants (step_program.cpp picks one by device feature):
//  i64: exact integer division of the 24-bit significands (A << 40) / B, rounded with guard and sticky bits;
//  f64: double division (<= 2.5 double ulp) rounded once to float, also correctly rounded: a quotient of two floats
//       is never closer than ~2^-49 (relative) to a float midpoint, far more than the double error (2^-51.7);
//  f32: the float division (<= 2.5 ulp), for devices with neither shaderInt64 nor shaderFloat64.
// i64 falls back to the float division for zeros, subnormals, infinities, NaNs and results outside the normal
// range (not latents / a divisor of order 1).
#include "common.glsl"
#include "models/core/step_params.h"

#if defined(W_I64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
float div_rn(float a, float b) {
    precise float q = a / b;
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const uint ea = (ua >> 23) & 0xFFu, eb = (ub >> 23) & 0xFFu;
    if (ea == 0u || ea == 255u || eb == 0u || eb == 255u) return q;
    const uint64_t A = uint64_t((ua & 0x7FFFFFu) | 0x800000u), B = uint64_t((ub & 0x7FFFFFu) | 0x800000u);
    const uint64_t N = A << 40, Q = N / B;  // A / B in (1/2, 2): Q has 40 or 41 bits
    const bool sticky = Q * B != N;
    const uint shift = Q >= (uint64_t(1) << 40) ? 17u : 16u;  // keep 24 bits
    uint64_t m = Q >> shift;
    const uint64_t rem = Q & ((uint64_t(1) << shift) - 1ul), half_ = uint64_t(1) << (shift - 1u);
    if (rem > half_ || (rem == half_ && (sticky || (m & 1ul) != 0ul))) m += 1ul;
    // a / b = m * 2^(shift - 40 + ea - eb), m in [2^23, 2^24]: biased exponent 23 + shift - 40 + ea - eb + 127
    int e = int(ea) - int(eb) + int(shift) + 110;
    if (m == (uint64_t(1) << 24)) {
        m >>= 1;
        e += 1;
    }
    if (e < 1 || e > 254) return q;
    return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(e) << 23) | (uint(m) & 0x7FFFFFu));
}
#elif defined(W_F64)
float div_rn(float a, float b) { return float(double(a) / double(b)); }
#else
float div_rn(float a, float b) {
    precise float q = a / b;
    return q;
}
#endif
