// FlowMatchEulerDiscreteScheduler (diffusers 0.38, scheduling_flow_match_euler_discrete.py): prev = x + dt * v; with
// stochastic_sampling, x0 = x - sigma * v and prev = (1 - sigma_next) * x0 + sigma_next * noise (the caller's noise,
// float32: diffusers draws randn_tensor(sample.shape) after upcasting the sample).
#include <cmath>

#include "models/schedulers/schedulers_impl.h"
#include "runtime/core/error.h"

namespace kiln::sched::detail {
namespace {

class FlowMatchEuler final : public Scheduler {
public:
    explicit FlowMatchEuler(const Config& c) {
        name_ = "FlowMatchEulerDiscreteScheduler";
        num_train_timesteps_ = c.integer("num_train_timesteps", 1000);
        if (num_train_timesteps_ < 1) c.reject("num_train_timesteps", "must be at least 1");
        shift_ = c.number("shift", 1.0);
        // Read by the pipelines for calculate_shift (mu), from the scheduler's config as diffusers' pipelines read
        // them: checked here, so that an override of them is a field this scheduler reads.
        (void)c.number("base_shift", 0.5);
        (void)c.number("max_shift", 1.15);
        (void)c.integer("base_image_seq_len", 256);
        (void)c.integer("max_image_seq_len", 4096);
        dynamic_ = c.boolean("use_dynamic_shifting", false);
        time_shift_type_ = c.choice("time_shift_type", "exponential", {"exponential", "linear"});
        invert_ = c.boolean("invert_sigmas", false);
        shift_terminal_ = c.opt_number("shift_terminal");
        if (shift_terminal_ && *shift_terminal_ == 1.0) c.reject("shift_terminal", "must not be 1");
        karras_ = c.boolean("use_karras_sigmas", false);
        exponential_ = c.boolean("use_exponential_sigmas", false);
        if (c.boolean("use_beta_sigmas", false))
            c.reject("use_beta_sigmas", "beta sigmas (scipy.stats.beta.ppf) are not implemented");
        if (karras_ && exponential_)
            c.reject("use_exponential_sigmas", "only one of use_karras_sigmas, use_exponential_sigmas may be set");
        stochastic_ = c.boolean("stochastic_sampling", false);

        // Training schedule (float32): sigmas = linspace(1, N, N)[::-1] / N, statically shifted unless dynamic.
        const int64_t N = num_train_timesteps_;
        const std::vector<double> lin = np_linspace(1, (double)N, N);
        const float fs = (float)shift_, fs1 = (float)(shift_ - 1);
        float first = 0, last = 0;
        for (int64_t i = 0; i < N; ++i) {
            float s = (float)lin[(size_t)(N - 1 - i)] / (float)N;
            if (!dynamic_) s = fs * s / (1.0f + fs1 * s);
            if (i == 0) first = s;
            last = s;
        }
        sigma_max_ = first;
        sigma_min_ = last;
    }

    void set_sigma_min(double v) override { sigma_min_ = v; }

    void set_timesteps(int n, std::optional<double> mu) override {
        check_mu(mu);
        KILN_CHECK(n >= 1, name_, ": num_inference_steps must be >= 1, got ", n);
        const double N = (double)num_train_timesteps_;
        std::vector<double> s = np_linspace(sigma_max_ * N, sigma_min_ * N, n);
        for (double& v : s) v = v / N;
        if (dynamic_) {
            const double m = *mu;
            for (double& v : s) {
                const double x = 1 / v - 1;  // (1/t - 1) ** 1.0
                v = time_shift_type_ == "exponential" ? std::exp(m) / (std::exp(m) + x) : m / (m + x);
            }
        } else {
            for (double& v : s) v = shift_ * v / (1 + (shift_ - 1) * v);
        }
        if (shift_terminal_ && *shift_terminal_ != 0) {
            const double scale = (1 - s.back()) / (1 - *shift_terminal_);
            for (double& v : s) v = 1 - (1 - v) / scale;
        }
        finish(s);
    }

    // Custom sigmas: diffusers holds them as a float32 numpy array, so the shifts below run in float32 (a Python
    // float scalar meeting a float32 array computes in float32).
    void set_sigmas(const std::vector<double>& in, std::optional<double> mu) override {
        check_mu(mu);
        KILN_CHECK(!in.empty(), name_, ": set_timesteps(sigmas=...) needs at least one sigma");
        std::vector<float> f(in.begin(), in.end());
        if (dynamic_) {
            const float m = (float)*mu, em = (float)std::exp(*mu);
            for (float& v : f) {
                const float x = 1.0f / v - 1.0f;
                v = time_shift_type_ == "exponential" ? em / (em + x) : m / (m + x);
            }
        } else {
            const float fs = (float)shift_, fs1 = (float)(shift_ - 1);
            for (float& v : f) v = fs * v / (1.0f + fs1 * v);
        }
        if (shift_terminal_ && *shift_terminal_ != 0) {
            const float scale = (1.0f - f.back()) / (float)(1 - *shift_terminal_);
            for (float& v : f) v = 1.0f - (1.0f - v) / scale;
        }
        finish(std::vector<double>(f.begin(), f.end()));
    }

    StepCoefficients plan_step(int step_index) override {
        check_step_index(step_index);
        StepCoefficients c;
        const float sigma = (float)sigmas_[(size_t)step_index], next = (float)sigmas_[(size_t)step_index + 1];
        if (stochastic_) {  // x0 = sample - sigma * v; prev = (1 - next) * x0 + next * noise
            c.x0_sample = 1;
            c.x0_model = -sigma;
            c.prev_x0 = 1.0f - next;
            c.prev_noise = next;
            return c;
        }
        c.prev_sample = 1;
        c.prev_model = next - sigma;  // dt
        return c;
    }

    bool draws_noise() const override { return stochastic_; }
    bool step_noise_f32() const override { return true; }

private:
    void check_mu(const std::optional<double>& mu) const {
        KILN_CHECK(!dynamic_ || mu, name_, ": set_timesteps needs mu: config field 'use_dynamic_shifting' is true ",
                   "(see calculate_shift)");
    }

    // Karras / exponential respacing, then the float32 sigmas and timesteps = sigma * num_train_timesteps.
    void finish(std::vector<double> s) {
        const int n = (int)s.size();
        if (karras_)
            s = karras_sigmas(s.back(), s.front(), n);
        else if (exponential_)
            s = exponential_sigmas(s.back(), s.front(), n);
        const float fN = (float)num_train_timesteps_;
        sigmas_.clear();
        timesteps_.clear();
        for (double v : s) {
            float sg = (float)v;
            if (invert_) sg = 1.0f - sg;
            sigmas_.push_back(sg);
            timesteps_.push_back(sg * fN);
        }
        sigmas_.push_back(invert_ ? 1.0 : 0.0);
        reset_state();
    }

    double shift_ = 1.0, sigma_min_ = 0, sigma_max_ = 1;
    bool dynamic_ = false, invert_ = false, karras_ = false, exponential_ = false, stochastic_ = false;
    std::optional<double> shift_terminal_;
    std::string time_shift_type_;
};

}  // namespace

std::unique_ptr<Scheduler> make_flow_match_euler(const Config& c) { return std::make_unique<FlowMatchEuler>(c); }

}  // namespace kiln::sched::detail
