// DDIMScheduler (diffusers 0.38, scheduling_ddim.py): the DDIM update, with eta's DDPM variance (its noise is the
// caller's) and use_clipped_model_output = False, as the pipelines call it.
#include <cmath>

#include "models/schedulers/schedulers_impl.h"
#include "runtime/core/error.h"

namespace kiln::sched::detail {
namespace {

class Ddim final : public Scheduler {
public:
    explicit Ddim(const Config& c) : train_(make_train_schedule(c)) {
        name_ = "DDIMScheduler";
        num_train_timesteps_ = train_.num_train_timesteps;
        clip_sample_ = c.boolean("clip_sample", true);
        clip_range_ = c.number("clip_sample_range", 1.0);
        if (clip_sample_ && !(clip_range_ > 0)) c.reject("clip_sample_range", "must be > 0");
        const bool set_alpha_to_one = c.boolean("set_alpha_to_one", true);
        final_alpha_cumprod_ = set_alpha_to_one ? 1.0f : train_.alphas_cumprod[0];
        steps_offset_ = c.integer("steps_offset", 0);
        prediction_ = c.choice("prediction_type", "epsilon", {"epsilon", "sample", "v_prediction"});
        spacing_ = c.choice("timestep_spacing", "leading", {"leading", "trailing", "linspace"});
        if (c.boolean("thresholding", false))
            c.reject("thresholding", "dynamic thresholding is not implemented (needs a per-sample quantile)");
    }

    void set_timesteps(int n, std::optional<double> mu) override {
        KILN_CHECK(!mu, name_, ": set_timesteps: mu is only for flow-matching schedulers with use_dynamic_shifting");
        const int64_t N = num_train_timesteps_;
        KILN_CHECK(n >= 1 && n <= N, name_, ": num_inference_steps ", n, " must be in [1, num_train_timesteps=", N,
                   "]");
        std::vector<double> t;
        if (spacing_ == "linspace") {
            for (double v : np_linspace(0, (double)(N - 1), n)) t.insert(t.begin(), (double)(int64_t)np_round(v));
        } else if (spacing_ == "leading") {
            const int64_t ratio = N / n;
            for (int64_t i = n - 1; i >= 0; --i) t.push_back((double)(i * ratio + steps_offset_));
        } else {  // trailing
            for (double v : np_arange((double)N, 0, -((double)N / (double)n)))
                t.push_back((double)((int64_t)np_round(v) - 1));
        }
        // diffusers would fail indexing alphas_cumprod in step(); fail here, naming the cause
        for (double tv : t)
            KILN_CHECK(tv >= 0 && tv < (double)N, name_, ": set_timesteps(", n, "): timestep ", tv,
                       " outside the training schedule [0, ", N, ") (timestep_spacing '", spacing_,
                       "', config field 'steps_offset' = ", steps_offset_, ")");
        timesteps_ = t;
        sigmas_.clear();
        reset_state();
    }

    StepCoefficients plan_step(int step_index) override {
        check_step_index(step_index);
        const int64_t N = num_train_timesteps_;
        const int64_t t = (int64_t)timesteps_[(size_t)step_index];
        const int64_t prev_t = t - N / (int64_t)timesteps_.size();  // diffusers' quirk for every spacing
        KILN_CHECK(t >= 0 && t < N, name_, ": timestep ", t, " outside the training schedule [0, ", N, ")");
        // float32 scalars, as torch holds them
        const float a_t = train_.alphas_cumprod[(size_t)t];
        const float a_prev = prev_t >= 0 ? train_.alphas_cumprod[(size_t)prev_t] : final_alpha_cumprod_;
        const float b_t = 1.0f - a_t;
        const double sa = std::sqrt(a_t), sb = std::sqrt(b_t);  // float sqrt of a float == double sqrt rounded
        const double sa_f = (float)sa, sb_f = (float)sb;
        const double sa_prev = (float)std::sqrt(a_prev);
        // _get_variance and std_dev_t = eta * variance^0.5, float32 (eta rounded to float, as torch multiplies a
        // float32 tensor by a Python float); eta = 0 leaves the direction sqrt(1 - a_prev) bit for bit.
        const float b_prev = 1.0f - a_prev;
        const float variance = (b_prev / b_t) * (1.0f - a_t / a_prev);
        const float std_dev = (float)eta_ * std::sqrt(variance);
        const double dir = (float)std::sqrt((float)(b_prev - std_dev * std_dev));  // (1 - a_prev - std_dev_t^2)^0.5

        StepCoefficients c;
        // pred_original_sample (x0) and pred_epsilon as combinations of sample and model_output
        double eps_s = 0, eps_m = 0;
        if (prediction_ == "epsilon") {
            c.x0_sample = 1 / sa_f;
            c.x0_model = -sb_f / sa_f;
            eps_m = 1;
        } else if (prediction_ == "sample") {
            c.x0_model = 1;
            eps_s = 1 / sb_f;  // (sample - sqrt(a_t)*model_output) / sqrt(b_t), from the unclipped x0
            eps_m = -sa_f / sb_f;
        } else {  // v_prediction
            c.x0_sample = sa_f;
            c.x0_model = -sb_f;
            eps_s = sb_f;
            eps_m = sa_f;
        }
        if (clip_sample_) c.x0_clip = clip_range_;
        // prev = sqrt(a_prev) * x0 + sqrt(1 - a_prev) * pred_epsilon
        c.prev_x0 = sa_prev;
        c.prev_sample = dir * eps_s;
        c.prev_model = dir * eps_m;
        c.prev_noise = eta_ > 0 ? std_dev : 0.0f;  // + std_dev_t * variance_noise
        return c;
    }

    bool takes_eta() const override { return true; }
    bool draws_noise() const override { return eta_ > 0; }
    void set_eta(double eta) override {
        KILN_CHECK(std::isfinite(eta) && eta >= 0, name_, ": eta ", eta, " must be finite and >= 0");
        eta_ = eta;
    }

private:
    TrainSchedule train_;
    bool clip_sample_ = true;
    double clip_range_ = 1.0;
    float final_alpha_cumprod_ = 1.0f;
    int64_t steps_offset_ = 0;
    double eta_ = 0;  // diffusers' step(eta=...)
    std::string prediction_, spacing_;
};

}  // namespace

std::unique_ptr<Scheduler> make_ddim(const Config& c) { return std::make_unique<Ddim>(c); }

}  // namespace kiln::sched::detail
