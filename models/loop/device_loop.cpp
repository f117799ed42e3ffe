#include "models/loop/device_loop.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"

namespace kiln::models {

bool use_device_loop(const Settings& s, bool host_loop) { return !host_loop && s.device_loop; }

std::vector<params::LoopStep> plan_loop_steps(sched::Scheduler& s, const std::function<float(int)>& timestep) {
    const int n = s.num_inference_steps();
    KILN_CHECK(n >= 1, s.name(), ": device loop before set_timesteps");
    std::vector<params::LoopStep> out((size_t)n);
    int available = 0;  // history entries the device ring holds before step i
    for (int i = 0; i < n; ++i) {
        const sched::StepCoefficients c = s.plan_step(i);
        KILN_CHECK(c.history_used <= available && c.history_used <= 2 && c.history_keep <= 2, s.name(), ": step ", i,
                   " reads ", c.history_used, " previous outputs, ", available, " kept");
        params::LoopStep& r = out[(size_t)i];
        r.timestep = timestep(i);
        r.divisor = s.model_input_divisor(i);
        r.x0_sample = (float)c.x0_sample, r.x0_model = (float)c.x0_model, r.x0_clip = (float)c.x0_clip;
        r.prev_sample = (float)c.prev_sample, r.prev_model = (float)c.prev_model, r.prev_x0 = (float)c.prev_x0;
        r.prev_h0 = (float)c.prev_history[0], r.prev_h1 = (float)c.prev_history[1];
        r.prev_noise = (float)c.prev_noise;
        r.want_x0 = c.needs_x0();
        r.history_used = (uint32_t)c.history_used;
        r.keep_x0 = c.history_keep > 0;
        available = c.history_keep > 0 ? std::min(available + 1, c.history_keep) : 0;
    }
    return out;
}

std::vector<std::vector<float>> draw_step_noise(TorchCpuGenerator& gen, const sched::Scheduler& s, size_t n,
                                                DType dtype) {
    std::vector<std::vector<float>> out;
    if (!s.draws_noise()) return out;
    out.resize(s.timesteps().size(), std::vector<float>(n));
    for (auto& v : out) gen.randn(v.data(), (int64_t)n, s.step_noise_f32() ? DType::f32 : dtype);
    return out;
}

std::vector<float> device_step_noise(const std::vector<std::vector<float>>& step_noise, size_t n) {
    std::vector<float> out;
    out.reserve(step_noise.size() * n);
    for (const auto& v : step_noise) {
        KILN_CHECK(v.size() >= n, "device loop: a step's noise has ", v.size(), " values, fewer than ", n);
        out.insert(out.end(), v.begin(), v.begin() + (long)n);
    }
    return out;
}

}  // namespace kiln::models
