// EulerDiscreteScheduler (diffusers 0.38, scheduling_euler_discrete.py), s_churn = 0 (no noise injection).
#include <algorithm>
#include <cmath>

#include "models/schedulers/schedulers_impl.h"
#include "runtime/core/error.h"

namespace kiln::sched::detail {
namespace {

class Euler final : public Scheduler {
public:
    explicit Euler(const Config& c) : train_(make_train_schedule(c)) {
        name_ = "EulerDiscreteScheduler";
        num_train_timesteps_ = train_.num_train_timesteps;
        if (c.boolean("rescale_betas_zero_snr", false)) train_.alphas_cumprod.back() = std::ldexp(1.0f, -24);
        prediction_ = c.choice("prediction_type", "epsilon", {"epsilon", "v_prediction", "sample", "original_sample"});
        interpolation_ = c.choice("interpolation_type", "linear", {"linear", "log_linear"});
        karras_ = c.boolean("use_karras_sigmas", false);
        exponential_ = c.boolean("use_exponential_sigmas", false);
        if (c.boolean("use_beta_sigmas", false))
            c.reject("use_beta_sigmas", "beta sigmas (scipy.stats.beta.ppf) are not implemented");
        if (karras_ && exponential_)
            c.reject("use_exponential_sigmas", "only one of use_karras_sigmas, use_exponential_sigmas may be set");
        sigma_min_ = c.opt_number("sigma_min");
        sigma_max_ = c.opt_number("sigma_max");
        spacing_ = c.choice("timestep_spacing", "linspace", {"linspace", "leading", "trailing"});
        continuous_v_ = c.choice("timestep_type", "discrete", {"discrete", "continuous"}) == "continuous" &&
                        prediction_ == "v_prediction";
        steps_offset_ = c.integer("steps_offset", 0);
        final_sigmas_ = c.choice("final_sigmas_type", "zero", {"zero", "sigma_min"});
        // Training sigmas ((1 - a) / a)^0.5, float32 ascending in t. Before set_timesteps diffusers' sigmas are
        // these, flipped, plus a final 0 (init_noise_sigma reads them).
        train_sigmas_ = vp_sigmas(train_.alphas_cumprod);
        sigmas_ = euler_initial_sigmas(train_sigmas_);
    }

    double init_noise_sigma() const override { return euler_init_noise_sigma(sigmas_, spacing_); }

    float model_input_divisor(int step_index) const override { return euler_input_divisor(sigmas_, step_index, name_); }

    void set_timesteps(int n, std::optional<double> mu) override {
        KILN_CHECK(!mu, name_, ": set_timesteps: mu is only for flow-matching schedulers with use_dynamic_shifting");
        const int64_t N = num_train_timesteps_;
        KILN_CHECK(n >= 1 && n <= N, name_, ": num_inference_steps ", n, " must be in [1, num_train_timesteps=", N,
                   "]");
        schedule(euler_timesteps(spacing_, N, n, steps_offset_));
    }

    // diffusers' set_timesteps(timesteps=...): float32 timesteps; the sigmas follow from them as from the spaced
    // ones (log_linear interpolation ignores them there too, and only their count matters).
    void set_custom_timesteps(const std::vector<double>& in) override {
        check_custom_timesteps(in, false);
        KILN_CHECK(!karras_ && !exponential_, name_, ": custom timesteps cannot be used with config field '",
                   karras_ ? "use_karras_sigmas" : "use_exponential_sigmas", "' = true");
        KILN_CHECK(!continuous_v_, name_, ": custom timesteps cannot be used with timestep_type 'continuous' and ",
                   "prediction_type 'v_prediction'");
        schedule(std::vector<float>(in.begin(), in.end()));
    }

    // diffusers' set_timesteps(sigmas=...): the whole schedule, its final sigma included, as float32; timesteps
    // from _sigma_to_t of each but the last (float32 sigmas: numpy takes their log in float32). No karras /
    // exponential respacing and no final sigma appended, as there.
    void set_sigmas(const std::vector<double>& in, std::optional<double> mu) override {
        KILN_CHECK(!mu, name_, ": set_timesteps: mu is only for flow-matching schedulers with use_dynamic_shifting");
        KILN_CHECK(in.size() >= 2, name_, ": custom sigmas are the whole schedule, the final one included: at least ",
                   "2 for one step, got ", in.size());
        for (size_t i = 0; i < in.size(); ++i)
            KILN_CHECK(std::isfinite(in[i]) && in[i] >= 0, name_, ": sigmas[", i, "] is ", in[i],
                       " (sigmas are finite and not negative)");
        const std::vector<float> ls = log_sigmas();
        sigmas_.assign(in.begin(), in.end());
        timesteps_.clear();
        for (size_t i = 0; i + 1 < in.size(); ++i) {
            timesteps_.push_back((float)sigma_to_t_f32((float)in[i], ls));
        }
        for (double& v : sigmas_) v = (float)v;
        if (continuous_v_) {
            timesteps_.clear();
            for (size_t i = 0; i + 1 < sigmas_.size(); ++i) timesteps_.push_back(0.25f * std::log((float)sigmas_[i]));
        }
        reset_state();
    }

private:
    std::vector<float> log_sigmas() const {
        std::vector<float> ls(train_sigmas_.size());
        for (size_t i = 0; i < ls.size(); ++i) ls[i] = std::log(train_sigmas_[i]);
        return ls;
    }

    // The rest of set_timesteps from the float32 timesteps t: sigmas, respacing, the final sigma.
    void schedule(const std::vector<float>& t) {
        const int n = (int)t.size();
        const std::vector<float> log_sigmas = this->log_sigmas();
        std::vector<double> s;  // numpy float64 until the final float32 cast
        if (interpolation_ == "linear") {
            for (float tv : t) s.push_back(np_interp(tv, train_sigmas_));
        } else {  // log_linear: torch.linspace(log(max), log(min), n + 1).exp(), float32, n + 1 values
            for (float v : torch_linspace_f32(log_sigmas.back(), log_sigmas.front(), n + 1)) s.push_back(std::exp(v));
        }
        std::vector<double> t_d(t.begin(), t.end());
        if (karras_ || exponential_) {
            const double smin = sigma_min_ ? *sigma_min_ : s.back(), smax = sigma_max_ ? *sigma_max_ : s.front();
            s = karras_ ? karras_sigmas(smin, smax, n) : exponential_sigmas(smin, smax, n);
            t_d.clear();
            for (double sg : s) t_d.push_back(sigma_to_t(sg, log_sigmas));
        }
        const float a0 = train_.alphas_cumprod[0];
        sigmas_.clear();
        for (double sg : s) sigmas_.push_back((float)sg);
        sigmas_.push_back(final_sigmas_ == "sigma_min" ? std::sqrt((1.0f - a0) / a0) : 0.0f);
        timesteps_.clear();
        if (continuous_v_) {
            for (size_t i = 0; i + 1 < sigmas_.size(); ++i) timesteps_.push_back(0.25f * std::log((float)sigmas_[i]));
        } else {
            for (double tv : t_d) timesteps_.push_back((float)tv);
        }
        reset_state();
    }

public:
    StepCoefficients plan_step(int step_index) override {
        check_step_index(step_index);
        KILN_CHECK((size_t)step_index + 1 < sigmas_.size(), name_, ": no sigma after step ", step_index);
        const float sigma = (float)sigmas_[(size_t)step_index];  // sigma_hat = sigma * (gamma + 1), gamma = 0
        const float dt = (float)sigmas_[(size_t)step_index + 1] - sigma;
        StepCoefficients c;
        // prev = sample + (sample - pred_original_sample) / sigma * dt
        if (prediction_ == "epsilon") {  // pred = sample - sigma * mo  ->  prev = sample + dt * mo
            c.prev_sample = 1;
            c.prev_model = dt;
        } else if (prediction_ == "v_prediction") {  // pred = mo * (-sigma / sqrt(sigma^2+1)) + sample / (sigma^2+1)
            const float s2p1 = sigma * sigma + 1.0f;
            const float cm = -sigma / std::sqrt(s2p1);
            const double r = (double)dt / sigma;
            c.prev_sample = 1 + r - r / s2p1;
            c.prev_model = -r * cm;
        } else {  // sample / original_sample: pred = mo
            const double r = (double)dt / sigma;
            c.prev_sample = 1 + r;
            c.prev_model = -r;
        }
        return c;
    }

private:
    TrainSchedule train_;
    std::vector<float> train_sigmas_;
    std::string prediction_, interpolation_, spacing_, final_sigmas_;
    bool karras_ = false, exponential_ = false, continuous_v_ = false;
    std::optional<double> sigma_min_, sigma_max_;
    int64_t steps_offset_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_euler(const Config& c) { return std::make_unique<Euler>(c); }

}  // namespace kiln::sched::detail
