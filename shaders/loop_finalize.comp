// variants: f32 f64 i64
#version 450
#extension GL_GOOGLE_include_directive : require
// loop_finalize: the latents handed to the VAE. mode 0: z = a * x (DiT: 1/scaling_factor as a float);
// 1: x / a (PixArt); 2: x / a + b (SD3, Flux: scaling and shift factors).
#include "loop.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Z { float z[]; };

void main() {
    uint i = flat_id();
    if (i >= p.n) return;
    precise float v;
    if (p.mode == 0)
        v = p.a * x[i];
    else if (p.mode == 1)
        v = div_rn(x[i], p.a);
    else
        v = div_rn(x[i], p.a) + p.b;
    z[i] = v;
}
