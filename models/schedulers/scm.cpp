// SCMScheduler (diffusers 0.38, scheduling_scm.py, prediction_type "trigflow") with SanaSprintPipeline's wrapping of
// the transformer folded in, so the shared loops (host and device) run Sana-Sprint unchanged.
//
// diffusers, per step i with angle s = timesteps[i] and the next t = timesteps[i+1] (float32):
//   pipeline:  u = sin(s) / (cos(s) + sin(s)), r = sqrt(u^2 + (1-u)^2)
//              x_in = latents / sigma_data * r;  out = transformer(x_in, timestep=u)
//              v = ((1-2u) x_in + (1-2u+2u^2) out) / r * sigma_data
//   scheduler: x0 = cos(s) latents - sin(s) v;  prev = cos(t) x0 + sin(t) sigma_data noise
// With x_in expanded, v = (1-2u) latents + (1-2u+2u^2) sigma_data / r * out, so
//   x0 = (cos(s) - sin(s)(1-2u)) latents - sin(s)(1-2u+2u^2) sigma_data / r * out.
// Kiln's step therefore takes the transformer's raw output; scale_model_input divides by sigma_data / r, the
// transformer timestep is u (transformer_timestep), init_noise_sigma is sigma_data (the pipeline's
// latents * sigma_data) and final_latents_divisor is sigma_data (it decodes x0 / sigma_data / scaling_factor; after
// the last step, whose t is 0, prev = 1 * x0 + 0 * noise = x0). Noise is drawn at every step, the last included, as
// diffusers draws it (float32, from the pipeline's generator).
#include <cmath>

#include "models/schedulers/schedulers_impl.h"
#include "runtime/core/error.h"

namespace kiln::sched::detail {
namespace {

class Scm final : public Scheduler {
public:
    explicit Scm(const Config& c) {
        name_ = "SCMScheduler";
        num_train_timesteps_ = c.integer("num_train_timesteps", 1000);
        if (num_train_timesteps_ < 1) c.reject("num_train_timesteps", "must be at least 1");
        (void)c.choice("prediction_type", "trigflow", {"trigflow"});
        sigma_data_ = c.number("sigma_data", 0.5);
        if (!(sigma_data_ > 0)) c.reject("sigma_data", "must be positive");
        // SanaSprintPipeline's call arguments max_timesteps / intermediate_timesteps, readable as config overrides
        // (--scheduler-config): diffusers' defaults 1.57080 and 1.3, the intermediate one only for 2 steps
        // (diffusers raises for another step count unless it is None: null here).
        max_t_ = c.number("max_timesteps", 1.57080);
        if (!(max_t_ > 0 && max_t_ <= 1.5708)) c.reject("max_timesteps", "must lie in (0, 1.5708] (an angle)");
        inter_given_ = c.has("intermediate_timesteps");
        inter_null_ = !inter_given_ && c.has_null("intermediate_timesteps");
        inter_t_ = c.number("intermediate_timesteps", 1.3);
        if (!inter_null_ && !(inter_t_ > 0 && inter_t_ < max_t_))
            c.reject("intermediate_timesteps", "must lie in (0, max_timesteps)");
    }

    void set_timesteps(int n, std::optional<double> mu) override {
        KILN_CHECK(!mu, name_, ": set_timesteps: mu is not used by this scheduler");
        KILN_CHECK(n >= 1 && n <= num_train_timesteps_, name_, ": num_inference_steps ", n,
                   " must be in [1, num_train_timesteps=", num_train_timesteps_, "]");
        KILN_CHECK(!inter_given_ || n == 2, name_, ": intermediate_timesteps is only used with 2 steps (got ", n,
                   "); set it to null for linspace(max_timesteps, 0, N + 1)");
        std::vector<float> angles;
        if (n == 2 && !inter_null_)  // torch.tensor([max, intermediate, 0]).float()
            angles = {(float)max_t_, (float)inter_t_, 0.0f};
        else
            angles = torch_linspace_f32(max_t_, 0.0, n + 1);
        sigmas_.assign(angles.begin(), angles.end());
        timesteps_.assign(angles.begin(), angles.end() - 1);  // the pipeline loops over timesteps[:-1]
        reset_state();
    }

    double init_noise_sigma() const override { return sigma_data_; }
    double final_latents_divisor() const override { return sigma_data_; }
    bool draws_noise() const override { return true; }
    bool step_noise_f32() const override { return true; }  // randn_tensor of the float32 noise_pred

    std::optional<float> transformer_timestep(int i) const override { return trig_u(angle(i)); }
    float model_input_divisor(int i) const override {
        const float u = trig_u(angle(i));
        return (float)sigma_data_ / trig_r(u);
    }

    StepCoefficients plan_step(int i) override {
        check_step_index(i);
        const float s = angle(i), t = (float)sigmas_[(size_t)i + 1];
        const float u = trig_u(s), r = trig_r(u), sd = (float)sigma_data_;
        const float cs = std::cos(s), sn = std::sin(s);
        const float a = 1.0f - 2.0f * u, b = 1.0f - 2.0f * u + 2.0f * u * u;
        StepCoefficients c;
        c.x0_sample = (double)cs - (double)sn * a;
        c.x0_model = -(double)sn * b * sd / r;
        c.prev_x0 = std::cos(t);
        c.prev_noise = (double)std::sin(t) * sd;
        return c;
    }

private:
    float angle(int i) const {
        KILN_CHECK(i >= 0 && i < (int)timesteps_.size(), name_, ": step index ", i, " out of range");
        return (float)timesteps_[(size_t)i];
    }
    static float trig_u(float s) { return std::sin(s) / (std::cos(s) + std::sin(s)); }
    static float trig_r(float u) { return std::sqrt(u * u + (1.0f - u) * (1.0f - u)); }

    double sigma_data_ = 0.5, max_t_ = 1.5708, inter_t_ = 1.3;
    bool inter_given_ = false, inter_null_ = false;
};

}  // namespace

std::unique_ptr<Scheduler> make_scm(const Config& c) { return std::make_unique<Scm>(c); }

}  // namespace kiln::sched::detail
