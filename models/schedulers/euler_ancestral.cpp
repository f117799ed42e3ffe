// EulerAncestralDiscreteScheduler (diffusers 0.38, scheduling_euler_ancestral_discrete.py): Euler's schedule
// (linear interpolation, final sigma 0), each step down to sigma_down plus sigma_up times fresh noise, which the
// caller draws (diffusers' randn_tensor(model_output.shape, generator) in every step).
#include <cmath>

#include "models/schedulers/schedulers_impl.h"
#include "runtime/core/error.h"

namespace kiln::sched::detail {
namespace {

class EulerAncestral final : public Scheduler {
public:
    explicit EulerAncestral(const Config& c) : train_(make_train_schedule(c)) {
        name_ = "EulerAncestralDiscreteScheduler";
        num_train_timesteps_ = train_.num_train_timesteps;
        if (c.boolean("rescale_betas_zero_snr", false)) train_.alphas_cumprod.back() = std::ldexp(1.0f, -24);
        prediction_ = c.string("prediction_type", "epsilon");
        if (prediction_ == "sample") c.reject("prediction_type", "not implemented by diffusers' Euler ancestral step");
        if (prediction_ != "epsilon" && prediction_ != "v_prediction")
            c.reject("prediction_type", "not supported (supported: epsilon, v_prediction)");
        spacing_ = c.choice("timestep_spacing", "linspace", {"linspace", "leading", "trailing"});
        steps_offset_ = c.integer("steps_offset", 0);
        train_sigmas_ = vp_sigmas(train_.alphas_cumprod);
        sigmas_ = euler_initial_sigmas(train_sigmas_);
    }

    double init_noise_sigma() const override { return euler_init_noise_sigma(sigmas_, spacing_); }

    float model_input_divisor(int step_index) const override { return euler_input_divisor(sigmas_, step_index, name_); }

    bool draws_noise() const override { return true; }

    void set_timesteps(int n, std::optional<double> mu) override {
        KILN_CHECK(!mu, name_, ": set_timesteps: mu is only for flow-matching schedulers with use_dynamic_shifting");
        const int64_t N = num_train_timesteps_;
        KILN_CHECK(n >= 1 && n <= N, name_, ": num_inference_steps ", n, " must be in [1, num_train_timesteps=", N,
                   "]");
        const std::vector<float> t = euler_timesteps(spacing_, N, n, steps_offset_);
        sigmas_.clear();
        timesteps_.clear();
        for (float tv : t) {
            sigmas_.push_back((float)np_interp(tv, train_sigmas_));
            timesteps_.push_back(tv);
        }
        sigmas_.push_back(0.0);
        reset_state();
    }

    StepCoefficients plan_step(int step_index) override {
        check_step_index(step_index);
        // float32 scalars as torch holds them; x**2 is x*x.
        const float from = (float)sigmas_[(size_t)step_index], to = (float)sigmas_[(size_t)step_index + 1];
        const float up = std::sqrt(to * to * (from * from - to * to) / (from * from));
        const float down = std::sqrt(to * to - up * up);
        const float dt = down - from;
        StepCoefficients c;
        // prev = sample + (sample - pred_original_sample) / sigma * dt + noise * sigma_up
        if (prediction_ == "epsilon") {  // pred = sample - sigma * mo  ->  prev = sample + dt * mo
            c.prev_sample = 1;
            c.prev_model = dt;
        } else {  // v_prediction: pred = mo * (-sigma / sqrt(sigma^2+1)) + sample / (sigma^2+1)
            const float s2p1 = from * from + 1.0f;
            const float cm = -from / std::sqrt(s2p1);
            const double r = (double)dt / from;
            c.prev_sample = 1 + r - r / s2p1;
            c.prev_model = -r * cm;
        }
        c.prev_noise = up;
        return c;
    }

private:
    TrainSchedule train_;
    std::vector<float> train_sigmas_;
    std::string prediction_, spacing_;
    int64_t steps_offset_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_euler_ancestral(const Config& c) { return std::make_unique<EulerAncestral>(c); }

}  // namespace kiln::sched::detail
