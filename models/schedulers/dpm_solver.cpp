// DPMSolverMultistepScheduler (diffusers 0.38, scheduling_dpmsolver_multistep.py): DPM-Solver++ / DPM-Solver,
// orders 1-3, midpoint / heun. Scalars (alpha_t, sigma_t, lambda, h, ...) are float32 0-d tensors in diffusers:
// they are computed here in float with the same operations, then expanded into per-buffer weights in double.
#include <cmath>

#include "models/schedulers/schedulers_impl.h"
#include "runtime/core/error.h"

namespace kiln::sched::detail {
namespace {

class DpmSolver final : public Scheduler {
public:
    explicit DpmSolver(const Config& c) : train_(make_train_schedule(c)) {
        name_ = "DPMSolverMultistepScheduler";
        num_train_timesteps_ = train_.num_train_timesteps;
        rescale_zero_snr_ = c.boolean("rescale_betas_zero_snr", false);
        if (rescale_zero_snr_) train_.alphas_cumprod.back() = std::ldexp(1.0f, -24);
        order_ = (int)c.integer("solver_order", 2);
        if (order_ < 1 || order_ > 3) c.reject("solver_order", "must be 1, 2 or 3");
        prediction_ = c.choice("prediction_type", "epsilon", {"epsilon", "sample", "v_prediction", "flow_prediction"});
        if (c.boolean("thresholding", false))
            c.reject("thresholding", "dynamic thresholding is not implemented (needs a per-sample quantile)");
        algorithm_ = c.string("algorithm_type", "dpmsolver++");
        if (algorithm_ == "deis") algorithm_ = "dpmsolver++";  // as diffusers does
        if (algorithm_ == "sde-dpmsolver++" || algorithm_ == "sde-dpmsolver") {
            // The SDE variants: every step adds noise (drawn by the caller, float32, as diffusers' step draws it).
            sde_ = true;
            algorithm_ = algorithm_.substr(4);
            if (order_ == 3)
                c.reject("solver_order", "3 has no SDE update in diffusers (its third-order step leaves x_t unset)");
        }
        if (algorithm_ != "dpmsolver++" && algorithm_ != "dpmsolver")
            c.reject("algorithm_type",
                     "not supported (supported: dpmsolver++, dpmsolver, sde-dpmsolver++, sde-dpmsolver, deis)");
        solver_type_ = c.string("solver_type", "midpoint");
        if (solver_type_ == "logrho" || solver_type_ == "bh1" || solver_type_ == "bh2") solver_type_ = "midpoint";
        if (solver_type_ != "midpoint" && solver_type_ != "heun")
            c.reject("solver_type", "not supported (supported: midpoint, heun)");
        if (prediction_ == "flow_prediction" && algorithm_ != "dpmsolver++")
            c.reject("prediction_type", "flow_prediction needs algorithm_type dpmsolver++");
        lower_order_final_ = c.boolean("lower_order_final", true);
        euler_at_final_ = c.boolean("euler_at_final", false);
        karras_ = c.boolean("use_karras_sigmas", false);
        lu_lambdas_ = c.boolean("use_lu_lambdas", false);
        exponential_ = c.boolean("use_exponential_sigmas", false);
        flow_sigmas_ = c.boolean("use_flow_sigmas", false);
        if (c.boolean("use_beta_sigmas", false))
            c.reject("use_beta_sigmas", "beta sigmas (scipy.stats.beta.ppf) are not implemented");
        if ((int)karras_ + (int)exponential_ > 1)
            c.reject("use_exponential_sigmas", "only one of use_karras_sigmas, use_exponential_sigmas may be set");
        flow_shift_ = c.number("flow_shift", 1.0);
        final_sigmas_ = c.choice("final_sigmas_type", "zero", {"zero", "sigma_min"});
        if (algorithm_ == "dpmsolver" && final_sigmas_ == "zero")
            c.reject("final_sigmas_type", "'zero' is not supported with algorithm_type " +
                                              std::string(sde_ ? "sde-dpmsolver" : "dpmsolver") + "; use sigma_min");
        lambda_min_clipped_ = c.number("lambda_min_clipped", -INFINITY);
        if (c.has("variance_type"))
            c.reject("variance_type", "learned variance is not supported (split the model output before the step)");
        spacing_ = c.choice("timestep_spacing", "linspace", {"linspace", "leading", "trailing"});
        steps_offset_ = c.integer("steps_offset", 0);
        dynamic_shifting_ = c.boolean("use_dynamic_shifting", false);
        time_shift_type_ = c.string("time_shift_type", "exponential");
        beta_schedule_ = c.has("trained_betas") ? "" : c.string("beta_schedule", "linear");

        // Training sigmas ((1 - a) / a)^0.5 and lambda_t = log(alpha_t) - log(sigma_t), float32.
        const size_t N = train_.alphas_cumprod.size();
        train_sigmas_ = vp_sigmas(train_.alphas_cumprod);
        lambda_t_.resize(N);
        for (size_t i = 0; i < N; ++i) {
            const float a = train_.alphas_cumprod[i];
            lambda_t_[i] = std::log(std::sqrt(a)) - std::log(std::sqrt(1.0f - a));
        }
    }

    void set_timesteps(int n, std::optional<double> mu) override {
        if (mu) {
            KILN_CHECK(dynamic_shifting_, name_, ": set_timesteps: mu given but use_dynamic_shifting is false");
            KILN_CHECK(time_shift_type_ == "exponential", name_, ": config field 'time_shift_type' = \"",
                       time_shift_type_, "\": only exponential is supported with mu");
            flow_shift_ = std::exp(*mu);  // diffusers overwrites config.flow_shift
        }
        const int64_t N = num_train_timesteps_;
        KILN_CHECK(n >= 1 && n <= N, name_, ": num_inference_steps ", n, " must be in [1, num_train_timesteps=", N,
                   "]");
        // lambda_min_clipped: searchsorted(flip(lambda_t), value) on the ascending flipped array
        int64_t clipped = 0;
        while (clipped < (int64_t)N && lambda_t_[(size_t)(N - 1 - clipped)] < lambda_min_clipped_) ++clipped;
        const int64_t last = N - clipped;

        std::vector<double> t;
        if (spacing_ == "linspace") {
            const std::vector<double> v = np_linspace(0, (double)(last - 1), n + 1);
            for (int i = n; i >= 1; --i) t.push_back(np_round(v[(size_t)i]));
        } else if (spacing_ == "leading") {
            const int64_t ratio = last / (n + 1);
            for (int64_t i = n; i >= 1; --i) t.push_back((double)(i * ratio + steps_offset_));
        } else {
            for (double v : np_arange((double)last, 0, -((double)N / (double)n))) t.push_back(np_round(v) - 1);
        }

        std::vector<float> log_sigmas(train_sigmas_.size());
        for (size_t i = 0; i < log_sigmas.size(); ++i) log_sigmas[i] = std::log(train_sigmas_[i]);
        const bool round_t = beta_schedule_ != "squaredcos_cap_v2";
        std::vector<double> s;
        auto from_sigmas = [&](bool round) {
            t.clear();
            for (double sg : s) t.push_back(round ? np_round(sigma_to_t(sg, log_sigmas)) : sigma_to_t(sg, log_sigmas));
        };
        if (karras_) {
            s = karras_sigmas(train_sigmas_.front(), train_sigmas_.back(), n);
            from_sigmas(round_t);
        } else if (lu_lambdas_) {
            // diffusers ramps log-sigma linearly ("lambdas" = flip(log_sigmas)) from its max to its min
            const std::vector<double> ramp = np_linspace(0, 1, n);
            const double lmin = log_sigmas.front(), lmax = log_sigmas.back();
            for (double r : ramp) s.push_back(std::exp(lmax + r * (lmin - lmax)));
            from_sigmas(round_t);
        } else if (exponential_) {
            s = exponential_sigmas(train_sigmas_.front(), train_sigmas_.back(), n);
            from_sigmas(false);
        } else if (flow_sigmas_) {
            const std::vector<double> alphas = np_linspace(1, 1.0 / (double)N, n + 1);
            for (int i = n; i >= 1; --i) {  // flip, drop the last
                const double sg = 1.0 - alphas[(size_t)i];
                s.push_back(flow_shift_ * sg / (1 + (flow_shift_ - 1) * sg));
            }
            t.clear();
            for (double sg : s) t.push_back(sg * (double)N);
        } else {
            for (double tv : t) s.push_back(np_interp(tv, train_sigmas_));
        }
        finish(std::move(t), s);
    }

    bool draws_noise() const override { return sde_; }
    bool step_noise_f32() const override { return true; }  // randn_tensor(..., dtype=torch.float32)

    // diffusers' set_timesteps(timesteps=...): int64 timesteps, sigmas interpolated at them (lambda_min_clipped and
    // the spacing are not used).
    void set_custom_timesteps(const std::vector<double>& t) override {
        check_custom_timesteps(t, true);
        // diffusers raises for the first three; use_flow_sigmas would need num_inference_steps, None there.
        for (auto [on, field] : {std::pair{karras_, "use_karras_sigmas"},
                                 {lu_lambdas_, "use_lu_lambdas"},
                                 {exponential_, "use_exponential_sigmas"},
                                 {flow_sigmas_, "use_flow_sigmas"}})
            KILN_CHECK(!on, name_, ": custom timesteps cannot be used with config field '", field, "' = true");
        std::vector<double> s;
        for (double tv : t) s.push_back(np_interp(tv, train_sigmas_));
        finish(t, s);
    }

private:
    // The end of set_timesteps: t (float64 until the int64 cast) and the sigmas of its steps, without the last.
    void finish(std::vector<double> t, const std::vector<double>& s) {
        // timesteps: .to(int64) truncates toward zero
        for (double& tv : t) tv = (double)(int64_t)tv;
        const float a0 = train_.alphas_cumprod[0];
        const float sigma_last = final_sigmas_ == "sigma_min" ? std::sqrt((1.0f - a0) / a0) : 0.0f;
        sigmas_.clear();
        for (double sg : s) sigmas_.push_back((double)(float)sg);
        sigmas_.push_back(sigma_last);
        timesteps_ = t;
        lower_order_nums_ = 0;
        reset_state();
    }

public:
    StepCoefficients plan_step(int step_index) override {
        const bool first = last_step_ < 0;
        check_step_index(step_index);
        if (first) lower_order_nums_ = 0;
        const int n = (int)timesteps_.size();
        const bool lower_final =
            step_index == n - 1 && (euler_at_final_ || (lower_order_final_ && n < 15) || final_sigmas_ == "zero");
        const bool lower_second = step_index == n - 2 && lower_order_final_ && n < 15;
        int ord = 3;
        if (order_ == 1 || lower_order_nums_ < 1 || lower_final)
            ord = 1;
        else if (order_ == 2 || lower_order_nums_ < 2 || lower_second)
            ord = 2;

        StepCoefficients c = convert(step_index);
        c.history_keep = order_ - 1;
        const float st_raw = (float)sigmas_[(size_t)step_index + 1];
        float alpha_t, sigma_t, alpha_s0, sigma_s0;
        alpha_sigma(st_raw, alpha_t, sigma_t);
        alpha_sigma((float)sigmas_[(size_t)step_index], alpha_s0, sigma_s0);
        const float lambda_t = std::log(alpha_t) - std::log(sigma_t);
        const float lambda_s0 = std::log(alpha_s0) - std::log(sigma_s0);
        const float h = lambda_t - lambda_s0;
        const bool pp = algorithm_ == "dpmsolver++";
        // The sample term and the weight of D0 = m0 (this step's converted output).
        //   ++: x_t = sigma_t/sigma_s0 * x - alpha_t*(exp(-h)-1) * D0 ...
        //   dpmsolver: x_t = alpha_t/alpha_s0 * x - sigma_t*(exp(h)-1) * D0 ...
        const float em1 = pp ? std::exp(-h) - 1.0f : std::exp(h) - 1.0f;
        const float base = pp ? alpha_t * em1 : sigma_t * em1;  // coefficient of D0, with a minus sign
        c.prev_sample = pp ? (float)(sigma_t / sigma_s0) : (float)(alpha_t / alpha_s0);
        // SDE variants (first and second order, as diffusers writes them):
        //   sde-dpmsolver++: x_t = (sigma_t/sigma_s0 * exp(-h)) x + alpha_t*(1 - exp(-2h)) D0 [+ k1 D1]
        //                          + sigma_t*sqrt(1 - exp(-2h)) noise
        //   sde-dpmsolver:   x_t = alpha_t/alpha_s0 x - 2*sigma_t*(exp(h)-1) D0 [+ k1 D1]
        //                          + sigma_t*sqrt(exp(2h) - 1) noise
        const float e2 = pp ? 1.0f - std::exp(-2.0f * h) : 0.0f;  // 1 - exp(-2h)
        double sde_w0 = 0;
        if (sde_) {
            if (pp) {
                c.prev_sample = (float)(sigma_t / sigma_s0 * std::exp(-h));
                sde_w0 = alpha_t * e2;
                c.prev_noise = sigma_t * std::sqrt(1.0f - std::exp(-2.0f * h));
            } else {
                sde_w0 = -(2.0f * (sigma_t * em1));
                c.prev_noise = sigma_t * std::sqrt(std::exp(2.0f * h) - 1.0f);
            }
        }
        // Weights of m0, m1, m2; x0 = m0 is computed by the step, m1/m2 come from history.
        double w0 = sde_ ? sde_w0 : -(double)base, w1 = 0, w2 = 0;
        if (ord >= 2) {
            float alpha_s1, sigma_s1;
            alpha_sigma((float)sigmas_[(size_t)step_index - 1], alpha_s1, sigma_s1);
            const float lambda_s1 = std::log(alpha_s1) - std::log(sigma_s1);
            const float h0 = lambda_s0 - lambda_s1;
            const float r0 = h0 / h;
            if (ord == 2) {
                // D1 = (1/r0) * (m0 - m1)
                const float inv_r0 = 1.0f / r0;
                float k1;  // coefficient of D1 in x_t
                if (sde_ && pp)
                    k1 = solver_type_ == "midpoint" ? 0.5f * (alpha_t * e2) : alpha_t * (e2 / (-2.0f * h) + 1.0f);
                else if (sde_)
                    k1 = solver_type_ == "midpoint" ? -(sigma_t * em1) : -(2.0f * (sigma_t * (em1 / h - 1.0f)));
                else if (pp)
                    k1 = solver_type_ == "midpoint" ? -(0.5f * base) : alpha_t * (em1 / h + 1.0f);
                else
                    k1 = solver_type_ == "midpoint" ? -(0.5f * base) : -(sigma_t * (em1 / h - 1.0f));
                w0 += (double)k1 * inv_r0;
                w1 -= (double)k1 * inv_r0;
            } else {
                float alpha_s2, sigma_s2;
                alpha_sigma((float)sigmas_[(size_t)step_index - 2], alpha_s2, sigma_s2);
                const float lambda_s2 = std::log(alpha_s2) - std::log(sigma_s2);
                const float h1 = lambda_s1 - lambda_s2;
                const float r1 = h1 / h;
                // D1_0 = (m0-m1)/r0, D1_1 = (m1-m2)/r1, D1 = D1_0 + r0/(r0+r1)*(D1_0-D1_1), D2 = (D1_0-D1_1)/(r0+r1)
                const double i0 = 1.0f / r0, i1 = 1.0f / r1;
                const double q = r0 / (r0 + r1), i01 = 1.0f / (r0 + r1);
                // D1_0 and D1_1 as weights of (m0, m1, m2)
                const double d10[3] = {i0, -i0, 0}, d11[3] = {0, i1, -i1};
                double d1[3], d2[3];
                for (int k = 0; k < 3; ++k) {
                    d1[k] = d10[k] + q * (d10[k] - d11[k]);
                    d2[k] = i01 * (d10[k] - d11[k]);
                }
                float k1, k2;
                if (pp) {
                    k1 = alpha_t * (em1 / h + 1.0f);
                    k2 = -(alpha_t * ((em1 + h) / (h * h) - 0.5f));
                } else {
                    k1 = -(sigma_t * (em1 / h - 1.0f));
                    k2 = -(sigma_t * ((em1 - h) / (h * h) - 0.5f));
                }
                w0 += k1 * d1[0] + k2 * d2[0];
                w1 += k1 * d1[1] + k2 * d2[1];
                w2 += k1 * d1[2] + k2 * d2[2];
            }
        }
        c.prev_x0 = w0;
        c.prev_history = {w1, w2};
        c.history_used = ord - 1;
        if (lower_order_nums_ < order_) ++lower_order_nums_;
        return c;
    }

private:
    // _sigma_to_alpha_sigma_t in float32
    void alpha_sigma(float sigma, float& alpha_t, float& sigma_t) const {
        if (flow_sigmas_) {
            alpha_t = 1.0f - sigma;
            sigma_t = sigma;
        } else {
            alpha_t = 1.0f / std::sqrt(sigma * sigma + 1.0f);
            sigma_t = sigma * alpha_t;
        }
    }

    // convert_model_output as x0 = x0_sample*sample + x0_model*model_output
    StepCoefficients convert(int i) const {
        StepCoefficients c;
        const float sigma = (float)sigmas_[(size_t)i];
        float alpha_t, sigma_t;
        alpha_sigma(sigma, alpha_t, sigma_t);
        if (algorithm_ == "dpmsolver++") {
            if (prediction_ == "epsilon") {  // (sample - sigma_t * mo) / alpha_t
                c.x0_sample = 1.0 / alpha_t;
                c.x0_model = -(double)sigma_t / alpha_t;
            } else if (prediction_ == "sample") {
                c.x0_model = 1;
            } else if (prediction_ == "v_prediction") {  // alpha_t * sample - sigma_t * mo
                c.x0_sample = alpha_t;
                c.x0_model = -(double)sigma_t;
            } else {  // flow_prediction: sample - sigma * mo
                c.x0_sample = 1;
                c.x0_model = -(double)sigma;
            }
        } else {  // dpmsolver: the converted output is epsilon
            if (prediction_ == "epsilon") {
                c.x0_model = 1;
            } else if (prediction_ == "sample") {  // (sample - alpha_t * mo) / sigma_t
                c.x0_sample = 1.0 / sigma_t;
                c.x0_model = -(double)alpha_t / sigma_t;
            } else {  // v_prediction: alpha_t * mo + sigma_t * sample
                c.x0_sample = sigma_t;
                c.x0_model = alpha_t;
            }
        }
        return c;
    }

    TrainSchedule train_;
    std::vector<float> train_sigmas_, lambda_t_;
    bool rescale_zero_snr_ = false, lower_order_final_ = true, euler_at_final_ = false, sde_ = false;
    bool karras_ = false, lu_lambdas_ = false, exponential_ = false, flow_sigmas_ = false, dynamic_shifting_ = false;
    int order_ = 2, lower_order_nums_ = 0;
    double flow_shift_ = 1.0, lambda_min_clipped_ = -INFINITY;
    int64_t steps_offset_ = 0;
    std::string prediction_, algorithm_, solver_type_, final_sigmas_, spacing_, time_shift_type_, beta_schedule_;
};

}  // namespace

std::unique_ptr<Scheduler> make_dpm_solver(const Config& c) { return std::make_unique<DpmSolver>(c); }

}  // namespace kiln::sched::detail
