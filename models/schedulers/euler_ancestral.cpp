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
        train_sigmas_.resize(train_.alphas_cumprod.size());
        for (size_t i = 0; i < train_sigmas_.size(); ++i) {
            const float a = train_.alphas_cumprod[i];
            train_sigmas_[i] = std::sqrt((1.0f - a) / a);
        }
        for (auto it = train_sigmas_.rbegin(); it != train_sigmas_.rend(); ++it) sigmas_.push_back(*it);
        sigmas_.push_back(0.0);
    }

    double init_noise_sigma() const override {
        float mx = 0;
        for (double s : sigmas_) mx = std::max(mx, (float)s);
        if (spacing_ == "linspace" || spacing_ == "trailing") return mx;
        return std::sqrt(mx * mx + 1.0f);
    }

    float model_input_divisor(int step_index) const override {
        KILN_CHECK(step_index >= 0 && step_index + 1 < (int)sigmas_.size(), name_, ": step index ", step_index,
                   " out of range");
        const float s = (float)sigmas_[(size_t)step_index];
        return std::sqrt(s * s + 1.0f);
    }

    bool draws_noise() const override { return true; }

    void set_timesteps(int n, std::optional<double> mu) override {
        KILN_CHECK(!mu, name_, ": set_timesteps: mu is only for flow-matching schedulers with use_dynamic_shifting");
        const int64_t N = num_train_timesteps_;
        KILN_CHECK(n >= 1 && n <= N, name_, ": num_inference_steps ", n, " must be in [1, num_train_timesteps=", N,
                   "]");
        std::vector<float> t;  // numpy float32, as EulerDiscreteScheduler spaces them
        if (spacing_ == "linspace") {
            const std::vector<double> v = np_linspace(0, (double)(N - 1), n);
            for (auto it = v.rbegin(); it != v.rend(); ++it) t.push_back((float)*it);
        } else if (spacing_ == "leading") {
            const int64_t ratio = N / n;
            for (int64_t i = n - 1; i >= 0; --i) t.push_back((float)(i * ratio) + (float)steps_offset_);
        } else {
            for (double v : np_arange((double)N, 0, -((double)N / (double)n))) t.push_back((float)np_round(v) - 1.0f);
        }
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
