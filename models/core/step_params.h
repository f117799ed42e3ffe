// The denoising loop on the device (step_program.h): the per-step table and the push constants of the
// loop_* shaders, written once for C++ and GLSL (the same scheme as runtime/ir/params.h).
// One step, per latent element i (rows x row_lat):
//   m    = cfg ? unc + guidance * (cond - unc) : out          (out: the transformer's output, row_out per row)
//   x0   = x0_sample*s + x0_model*m, clamped to [-x0_clip, x0_clip] when x0_clip > 0 (only when want_x0)
//   prev = prev_sample*s + prev_model*m + prev_x0*x0 [+ prev_h0*hist0] [+ prev_h1*hist1] [+ prev_noise*noise]
//   (noise: step i's slice of the noise buffer, drawn on the host; DDIM with eta > 0)
// exactly in the order of sched::apply_step, so every rounding equals the host's.
#ifndef KILN_STEP_PARAMS_H
#define KILN_STEP_PARAMS_H

#ifdef __cplusplus
#include <cstdint>
namespace kiln::params {
using uint = uint32_t;
#endif

// One entry per step, in a storage buffer indexed by the step counter the device keeps (std430: 16 x 4 bytes).
struct LoopStep {
    float timestep;  // written to every row of the transformer's timestep input
    float divisor;   // scale_model_input: x / divisor (1: unchanged)
    float x0_sample, x0_model, x0_clip;
    float prev_sample, prev_model, prev_x0, prev_h0, prev_h1;
    uint want_x0;       // x0 is computed (clip, prev_x0, or kept as history)
    uint history_used;  // 0..2 history entries read: x0 of steps i-1, i-2 (ring slots (i+2)%3, (i+1)%3)
    uint keep_x0;       // x0 is written to ring slot i%3 for the next steps
    float prev_noise;   // weight of the step's noise (0: none read)
    uint pad1, pad2;
};

#ifdef __cplusplus
static_assert(sizeof(LoopStep) == 64, "LoopStep is 16 words in std430");
#define KILN_LOOP_PARAMS(name) struct name
#define KILN_LOOP_PARAMS_END(name) \
    ;                              \
    static_assert(sizeof(name) <= 128, #name " exceeds the push-constant budget");
#else
#define KILN_LOOP_PARAMS(name) layout(push_constant) uniform name##_pc
#define KILN_LOOP_PARAMS_END(name) p;
#endif

// n = rows * row_lat latent elements. batch: rows of the transformer input (rows, or 2 rows with guidance).
// loop_prepare: hidden[r * n + i] = x[i] / divisor for r < batch / rows; timestep[r] for r < batch;
//               scale_in_place: x[i] too (DiT steps the scaled latent_model_input, as diffusers does).
// loop_step: guidance (cond_first: the prompt rows come first, DiT) and the update above; then the counter.
// loop_finalize: z = mode 0: a * x; 1: x / a; 2: x / a + b (the latents handed to the VAE).
KILN_LOOP_PARAMS(LoopParams) {
    uint n, row_lat, row_out, rows;
    uint batch, cfg, cond_first, scale_in_place;
    float guidance;
    uint mode;
    float a, b;
}
KILN_LOOP_PARAMS_END(LoopParams)

#ifdef __cplusplus
}  // namespace kiln::params
#endif
#endif
