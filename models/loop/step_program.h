#pragma once
// The denoising loop on the device. One step is three command buffers submitted together:
//   loop_prepare (latents -> the transformer's hidden_states and timestep inputs), the Executor's recorded run,
//   loop_step (guidance + scheduler update) and loop_advance (step counter += 1).
// All of them are recorded once and submitted unchanged for every step: the per-step coefficients are one table
// (params::LoopStep, computed on the host once per generation) indexed by a step counter the device keeps.
// The host only submits, keeping `in_flight` steps queued, and waits for a step's fence only to report progress.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/core/step_params.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

struct StepLoopSpec {
    std::string hidden = "hidden_states", timestep = "timestep", output = "sample";  // executor input/output names
    int rows = 1;                 // latent rows the scheduler updates (one per prompt / class label)
    uint32_t row_lat = 0;         // floats per latent row
    uint32_t row_out = 0;         // floats per output row, >= row_lat (learned sigma: the first row_lat are the noise)
    bool cfg = false;             // the transformer batch is 2 * rows, guidance combines the halves
    bool cond_first = false;      // cfg: the conditional rows come first (DiT); else the negatives (PixArt, SD3)
    bool scale_in_place = false;  // the scheduler steps the scaled model input (DiT's pipeline), not the latents
    float guidance = 1;
    int in_flight = 2;  // steps submitted ahead of the one the host waits for
    // The loop's buffers in an allocator of the program's own, freed with it, instead of the executor's (whose ranges
    // live as long as the executor): for an executor kept resident between calls (TransformerCache), which would
    // otherwise grow by the loop's buffers at every call.
    bool own_memory = false;
    // How divisions (Euler's scale_model_input, the final latents / scaling_factor) round. Vulkan lets a float
    // OpFDiv be 2.5 ulp off; i64 and f64 give the host's correctly rounded quotient (shaders/loop.glsl).
    // automatic: i64 with shaderInt64, else f64 with shaderFloat64, else f32.
    enum class Division { automatic, i64, f64, f32 } division = Division::automatic;
};

struct StepLoopStats {
    double plan_ms = 0;  // the constructor: pipelines, buffers, recording
    int steps = 0;
    double host_ms = 0;  // host time in run() apart from waiting: uploads, submissions, progress callbacks
    double wait_ms = 0;  // waiting for the device
};

class StepProgram {
public:
    // Plans and records; throws when the executor cannot be driven (see supported()). The loop's buffers (the table,
    // the latents, the history ring: about 5 latent sizes) come from ex's allocator and live as long as ex (with
    // spec.own_memory: from the program's own, freed with it).
    // noise: the steps' noise, rows * row_lat floats per step in step order, where a step has prev_noise != 0
    // (uploaded once: steps x latents of device memory); empty where none does.
    StepProgram(vk::Context& ctx, exec::Executor& ex, const StepLoopSpec& spec,
                const std::vector<params::LoopStep>& steps, const std::vector<float>& noise = {});
    ~StepProgram();  // waits for the steps still in flight; frees the command buffers, pipelines and descriptors
    StepProgram(const StepProgram&) = delete;
    StepProgram& operator=(const StepProgram&) = delete;

    // Every step from latents x (rows * row_lat floats). progress(i + 1, n) once step i has finished on the device;
    // an exception from it (cancel) leaves at that step boundary, the steps already queued finishing unobserved.
    // observe(i), when given, runs first, with step i's results still in place (the executor's output, latents()):
    // the steps then run one at a time.
    void run(const std::vector<float>& x, const std::function<void(int, int)>& progress = {},
             const std::function<void(int)>& observe = {});
    // The latents after run(): as they are (mode < 0), or through loop_finalize (modes in step_params.h).
    std::vector<float> latents(int mode = -1, float a = 1, float b = 0);
    const StepLoopStats& stats() const;

    // Whether ex can be driven: not eager, f32 inputs and output of the sizes spec implies. why: the reason if not.
    static bool supported(const exec::Executor& ex, const StepLoopSpec& spec, std::string* why = nullptr);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::models
