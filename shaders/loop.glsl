// Shared by the loop_* shaders (the denoising loop on the device, runtime/exec/step_program.h).
// div_rn(a, b): a / b rounded to nearest float, as the host's float division. Vulkan lets a float OpFDiv be
// 2.5 ulp off; the f64 variant divides in double (also <= 2.5 double ulp) and rounds once to float, which is
// correctly rounded: a quotient of two floats is never closer than ~2^-49 (relative) to a float midpoint,
// far more than the double error (2.5 * 2^-53). The f32 variant is used where the device lacks shaderFloat64.
#include "common.glsl"
#include "runtime/exec/step_params.h"

#ifdef W_F64
float div_rn(float a, float b) { return float(double(a) / double(b)); }
#else
float div_rn(float a, float b) {
    precise float q = a / b;
    return q;
}
#endif
