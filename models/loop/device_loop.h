#pragma once
// The pipelines' side of the denoising loop on the device (models/loop/step_program.h): whether to use it, the
// per-step table built from a scheduler, and the steps' noise.
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "models/core/step_params.h"
#include "models/schedulers/scheduler.h"
#include "runtime/core/settings.h"
#include "runtime/core/torch_rng.h"

namespace kiln::models {

// The device loop unless forced to the host: host_loop (GenerateOptions, `kiln generate --host-loop`) or
// Settings::device_loop false (KILN_DEVICE_LOOP=0; the Context's settings).
bool use_device_loop(const Settings& s, bool host_loop);

// Every step's row of the table: plan_step(i) in order (advancing s's multistep state as step() would), its
// coefficients cast to float as sched::apply_step casts them, model_input_divisor(i) and timestep(i).
std::vector<params::LoopStep> plan_loop_steps(sched::Scheduler& s, const std::function<float(int)>& timestep);

// Every step's noise where the scheduler draws one (none otherwise): gen's next `n` normals per step, in step order
// (diffusers' randn_tensor in each step, after the initial latents), in the dtype diffusers draws them: float32
// where step_noise_f32(), else `dtype`, the pipeline's.
std::vector<std::vector<float>> draw_step_noise(TorchCpuGenerator& gen, const sched::Scheduler& s, size_t n,
                                                DType dtype);
// The device loop's noise buffer (StepProgram's `noise`): the first n values of each step's noise, concatenated.
std::vector<float> device_step_noise(const std::vector<std::vector<float>>& step_noise, size_t n);

// Wraps a progress callback so that step_ms (a GenerateResult's) gets the wall time between consecutive step
// completions as the host observes them (the device loop has no per-step host work to time otherwise).
template <class Result>
std::function<void(int, int)> step_timer(Result& res, std::function<void(int, int)> progress) {
    auto last = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    return [&res, progress, last](int done, int total) {
        auto now = std::chrono::steady_clock::now();
        res.step_ms.push_back(std::chrono::duration<double, std::milli>(now - *last).count());
        *last = now;
        if (progress) progress(done, total);
    };
}

}  // namespace kiln::models
