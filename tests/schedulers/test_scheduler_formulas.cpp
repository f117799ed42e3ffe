// The step coefficients against a literal per-element float32 transcription of diffusers' step() code (torch's
// operation order, float32 0-d scalars), for configurations the diffusers fixtures do not cover: DPM-Solver orders
// 1-3, midpoint/heun, dpmsolver++/dpmsolver, every prediction type; DDIM prediction types and clipping; Euler v- and
// sample-prediction. Schedules (timesteps, sigmas, alphas_cumprod) are taken from the scheduler under test: those are
// checked against diffusers in test_schedulers.cpp.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/schedulers/sched_math.h"
#include "models/schedulers/scheduler.h"
#include "runtime/core/tensor.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::sched;

namespace {

using Vec = std::vector<float>;

nlohmann::json base_config(const std::string& cls) {
    return {{"_class_name", cls},
            {"num_train_timesteps", 1000},
            {"beta_start", 0.00085},
            {"beta_end", 0.012},
            {"beta_schedule", "scaled_linear"}};
}

// ---- diffusers DPMSolverMultistepScheduler.step, transcribed ----
struct DpmRef {
    std::string algorithm, solver_type, prediction;
    int order = 2;
    bool lower_order_final = true, euler_at_final = false, final_zero = true;
    std::vector<double> sigmas;
    size_t n = 0;
    std::vector<Vec> outputs;  // model_outputs, oldest first
    int lower_order_nums = 0;

    void alpha_sigma(float s, float& a, float& sg) const {
        a = 1.0f / std::sqrt(s * s + 1.0f);
        sg = s * a;
    }
    Vec convert(const Vec& mo, const Vec& x, int i) const {
        float a, s;
        alpha_sigma((float)sigmas[(size_t)i], a, s);
        Vec r(x.size());
        for (size_t k = 0; k < x.size(); ++k) {
            if (algorithm == "dpmsolver++") {
                if (prediction == "epsilon")
                    r[k] = (x[k] - s * mo[k]) / a;
                else if (prediction == "sample")
                    r[k] = mo[k];
                else
                    r[k] = a * x[k] - s * mo[k];
            } else {
                if (prediction == "epsilon")
                    r[k] = mo[k];
                else if (prediction == "sample")
                    r[k] = (x[k] - a * mo[k]) / s;
                else
                    r[k] = a * mo[k] + s * x[k];
            }
        }
        return r;
    }
    Vec step(const Vec& mo_in, int i, const Vec& x) {
        const bool lof = i == (int)n - 1 && (euler_at_final || (lower_order_final && n < 15) || final_zero);
        const bool los = i == (int)n - 2 && lower_order_final && n < 15;
        const Vec m = convert(mo_in, x, i);
        outputs.push_back(m);
        if ((int)outputs.size() > order) outputs.erase(outputs.begin());
        float at, st, a0, s0, a1 = 0, s1 = 0, a2 = 0, s2 = 0;
        alpha_sigma((float)sigmas[(size_t)i + 1], at, st);
        alpha_sigma((float)sigmas[(size_t)i], a0, s0);
        const float lt = std::log(at) - std::log(st), l0 = std::log(a0) - std::log(s0);
        const float h = lt - l0;
        const bool pp = algorithm == "dpmsolver++";
        Vec out(x.size());
        if (order == 1 || lower_order_nums < 1 || lof) {
            for (size_t k = 0; k < x.size(); ++k)
                out[k] = pp ? (st / s0) * x[k] - (at * (std::exp(-h) - 1.0f)) * m[k]
                            : (at / a0) * x[k] - (st * (std::exp(h) - 1.0f)) * m[k];
        } else if (order == 2 || lower_order_nums < 2 || los) {
            alpha_sigma((float)sigmas[(size_t)i - 1], a1, s1);
            const float l1 = std::log(a1) - std::log(s1);
            const float r0 = (l0 - l1) / h;
            const Vec& m0 = outputs[outputs.size() - 1];
            const Vec& m1 = outputs[outputs.size() - 2];
            for (size_t k = 0; k < x.size(); ++k) {
                const float D0 = m0[k], D1 = (1.0f / r0) * (m0[k] - m1[k]);
                if (pp && solver_type == "midpoint")
                    out[k] = (st / s0) * x[k] - (at * (std::exp(-h) - 1.0f)) * D0 -
                             (0.5f * (at * (std::exp(-h) - 1.0f))) * D1;
                else if (pp)
                    out[k] = (st / s0) * x[k] - (at * (std::exp(-h) - 1.0f)) * D0 +
                             (at * ((std::exp(-h) - 1.0f) / h + 1.0f)) * D1;
                else if (solver_type == "midpoint")
                    out[k] =
                        (at / a0) * x[k] - (st * (std::exp(h) - 1.0f)) * D0 - (0.5f * (st * (std::exp(h) - 1.0f))) * D1;
                else
                    out[k] = (at / a0) * x[k] - (st * (std::exp(h) - 1.0f)) * D0 -
                             (st * ((std::exp(h) - 1.0f) / h - 1.0f)) * D1;
            }
        } else {
            alpha_sigma((float)sigmas[(size_t)i - 1], a1, s1);
            alpha_sigma((float)sigmas[(size_t)i - 2], a2, s2);
            const float l1 = std::log(a1) - std::log(s1), l2 = std::log(a2) - std::log(s2);
            const float r0 = (l0 - l1) / h, r1 = (l1 - l2) / h;
            const Vec& m0 = outputs[outputs.size() - 1];
            const Vec& m1 = outputs[outputs.size() - 2];
            const Vec& m2 = outputs[outputs.size() - 3];
            for (size_t k = 0; k < x.size(); ++k) {
                const float D0 = m0[k];
                const float D1_0 = (1.0f / r0) * (m0[k] - m1[k]), D1_1 = (1.0f / r1) * (m1[k] - m2[k]);
                const float D1 = D1_0 + (r0 / (r0 + r1)) * (D1_0 - D1_1);
                const float D2 = (1.0f / (r0 + r1)) * (D1_0 - D1_1);
                if (pp)
                    out[k] = (st / s0) * x[k] - (at * (std::exp(-h) - 1.0f)) * D0 +
                             (at * ((std::exp(-h) - 1.0f) / h + 1.0f)) * D1 -
                             (at * ((std::exp(-h) - 1.0f + h) / (h * h) - 0.5f)) * D2;
                else
                    out[k] = (at / a0) * x[k] - (st * (std::exp(h) - 1.0f)) * D0 -
                             (st * ((std::exp(h) - 1.0f) / h - 1.0f)) * D1 -
                             (st * ((std::exp(h) - 1.0f - h) / (h * h) - 0.5f)) * D2;
            }
        }
        if (lower_order_nums < order) ++lower_order_nums;
        return out;
    }
};

// Runs n steps of the scheduler and of ref side by side from the same sample; returns the worst rel L2.
template <class Ref>
double run_both(Scheduler& s, Ref& ref, int n, const Vec& x0) {
    Vec a = x0, b = x0;
    double worst = 0;
    for (int i = 0; i < n; ++i) {
        Vec mi = a;
        s.scale_model_input(mi, i);
        const float c = (float)std::cos(s.timesteps()[(size_t)i] / 100);
        Vec mo(mi.size());
        for (size_t k = 0; k < mi.size(); ++k) mo[k] = 0.1f * mi[k] + c;
        a = s.step(mo, i, a);
        b = ref.step(mo, i, b);
        worst = std::max(worst, rel_l2(a, b));
        b = a;  // compare step by step, not the drift
    }
    return worst;
}

}  // namespace

TEST_CASE("DPM-Solver coefficients match diffusers' formulas", "[schedulers]") {
    const std::string algorithm = GENERATE(as<std::string>{}, "dpmsolver++", "dpmsolver");
    const std::string solver_type = GENERATE(as<std::string>{}, "midpoint", "heun");
    const std::string prediction = GENERATE(as<std::string>{}, "epsilon", "v_prediction", "sample");
    const int order = GENERATE(1, 2, 3);
    const int n = GENERATE(4, 20);
    nlohmann::json cfg = base_config("DPMSolverMultistepScheduler");
    cfg["algorithm_type"] = algorithm;
    cfg["solver_type"] = solver_type;
    cfg["prediction_type"] = prediction;
    cfg["solver_order"] = order;
    if (algorithm == "dpmsolver") cfg["final_sigmas_type"] = "sigma_min";
    INFO(cfg.dump());
    auto s = make_scheduler(cfg);
    s->set_timesteps(n);
    DpmRef ref;
    ref.algorithm = algorithm;
    ref.solver_type = solver_type;
    ref.prediction = prediction;
    ref.order = order;
    ref.final_zero = algorithm == "dpmsolver++";
    ref.sigmas = s->sigmas();
    ref.n = (size_t)n;
    // Coefficients are expanded in double from the same float32 scalars and applied in float32; the reference rounds
    // after each torch op. Both are a few float32 ulps (6e-8 each) per element from the exact value: 1e-6 relative.
    const double e = run_both(*s, ref, n, test::random_vec(256, 3, -2, 2));
    CHECK(e <= 1e-6);
}

namespace {
struct DdimRef {
    std::vector<float> ac;
    int64_t N = 1000, n = 0;
    std::string prediction;
    bool clip = false;
    float range = 1, final_ac = 1;
    std::vector<double> t;
    Vec step(const Vec& mo, int i, const Vec& x) const {
        const int64_t ti = (int64_t)t[(size_t)i], prev = ti - N / n;
        const float a = ac[(size_t)ti], ap = prev >= 0 ? ac[(size_t)prev] : final_ac, b = 1.0f - a;
        const float sa = std::sqrt(a), sb = std::sqrt(b), sap = std::sqrt(ap), dir = std::sqrt(1.0f - ap - 0.0f);
        Vec out(x.size());
        for (size_t k = 0; k < x.size(); ++k) {
            float x0, eps;
            if (prediction == "epsilon") {
                x0 = (x[k] - sb * mo[k]) / sa;
                eps = mo[k];
            } else if (prediction == "sample") {
                x0 = mo[k];
                eps = (x[k] - sa * x0) / sb;
            } else {
                x0 = sa * x[k] - sb * mo[k];
                eps = sa * mo[k] + sb * x[k];
            }
            if (clip) x0 = std::clamp(x0, -range, range);
            out[k] = sap * x0 + dir * eps;
        }
        return out;
    }
};
}  // namespace

TEST_CASE("DDIM coefficients match diffusers' formulas", "[schedulers]") {
    const std::string prediction = GENERATE(as<std::string>{}, "epsilon", "v_prediction", "sample");
    const std::string spacing = GENERATE(as<std::string>{}, "leading", "trailing", "linspace");
    const bool clip = GENERATE(false, true);
    const bool alpha_one = GENERATE(false, true);
    nlohmann::json cfg = base_config("DDIMScheduler");
    cfg["prediction_type"] = prediction;
    cfg["timestep_spacing"] = spacing;
    cfg["clip_sample"] = clip;
    cfg["clip_sample_range"] = 1.5;
    cfg["set_alpha_to_one"] = alpha_one;
    cfg["rescale_betas_zero_snr"] = spacing == "trailing";
    INFO(cfg.dump());
    auto s = make_scheduler(cfg);
    const int n = 10;
    s->set_timesteps(n);
    DdimRef ref;
    ref.ac = sched::detail::make_train_schedule(sched::detail::Config(cfg, "DDIMScheduler")).alphas_cumprod;
    ref.n = n;
    ref.prediction = prediction;
    ref.clip = clip;
    ref.range = 1.5f;
    ref.final_ac = alpha_one ? 1.0f : ref.ac[0];
    ref.t = s->timesteps();
    const double e = run_both(*s, ref, n, test::random_vec(256, 5, -2, 2));
    CHECK(e <= 1e-6);
}

namespace {
struct EulerRef {
    std::string prediction;
    std::vector<double> sigmas;
    Vec step(const Vec& mo, int i, const Vec& x) const {
        const float sigma = (float)sigmas[(size_t)i], sigma_hat = sigma * (0.0f + 1.0f);
        const float dt = (float)sigmas[(size_t)i + 1] - sigma_hat;
        Vec out(x.size());
        for (size_t k = 0; k < x.size(); ++k) {
            float pred;
            if (prediction == "epsilon")
                pred = x[k] - sigma_hat * mo[k];
            else if (prediction == "v_prediction")
                pred = mo[k] * (-sigma / std::sqrt(sigma * sigma + 1.0f)) + x[k] / (sigma * sigma + 1.0f);
            else
                pred = mo[k];
            const float derivative = (x[k] - pred) / sigma_hat;
            out[k] = x[k] + derivative * dt;
        }
        return out;
    }
};
}  // namespace

TEST_CASE("Euler coefficients match diffusers' formulas", "[schedulers]") {
    const std::string prediction = GENERATE(as<std::string>{}, "epsilon", "v_prediction", "sample");
    const std::string variant = GENERATE(as<std::string>{}, "plain", "karras", "exponential", "sigma_min");
    nlohmann::json cfg = base_config("EulerDiscreteScheduler");
    cfg["prediction_type"] = prediction;
    if (variant == "karras") cfg["use_karras_sigmas"] = true;
    if (variant == "exponential") cfg["use_exponential_sigmas"] = true;
    if (variant == "sigma_min") cfg["final_sigmas_type"] = "sigma_min";
    INFO(cfg.dump());
    auto s = make_scheduler(cfg);
    const int n = 12;
    s->set_timesteps(n);
    EulerRef ref{prediction, s->sigmas()};
    Vec x = test::random_vec(256, 9, -1, 1);
    for (float& v : x) v *= (float)s->init_noise_sigma();
    const double e = run_both(*s, ref, n, x);
    CHECK(e <= 1e-6);
}

TEST_CASE("sigma schedule variants are well formed", "[schedulers]") {
    struct Case {
        const char* cls;
        const char* key;
    };
    const Case cases[] = {{"DPMSolverMultistepScheduler", "use_karras_sigmas"},
                          {"DPMSolverMultistepScheduler", "use_exponential_sigmas"},
                          {"DPMSolverMultistepScheduler", "use_lu_lambdas"},
                          {"DPMSolverMultistepScheduler", "use_flow_sigmas"},
                          {"EulerDiscreteScheduler", "use_karras_sigmas"},
                          {"EulerDiscreteScheduler", "use_exponential_sigmas"},
                          {"FlowMatchEulerDiscreteScheduler", "use_karras_sigmas"},
                          {"FlowMatchEulerDiscreteScheduler", "use_exponential_sigmas"},
                          {"FlowMatchEulerDiscreteScheduler", "invert_sigmas"}};
    for (const auto& c : cases) {
        nlohmann::json cfg = base_config(c.cls);
        cfg[c.key] = true;
        if (std::string(c.key) == "use_flow_sigmas") {
            cfg["prediction_type"] = "flow_prediction";
            cfg["flow_shift"] = 3.0;
        }
        INFO(cfg.dump());
        auto s = make_scheduler(cfg);
        s->set_timesteps(20);
        const auto& t = s->timesteps();
        const auto& sg = s->sigmas();
        REQUIRE(t.size() == 20);
        REQUIRE(sg.size() == 21);
        const bool inverted = std::string(c.key) == "invert_sigmas";
        for (size_t i = 1; i < sg.size(); ++i) {
            if (inverted)
                CHECK(sg[i] > sg[i - 1]);
            else
                CHECK(sg[i] < sg[i - 1]);
        }
        for (size_t i = 0; i < t.size(); ++i) {
            CHECK(t[i] >= 0);
            CHECK(t[i] <= 1000);
            if (i > 0 && !inverted) CHECK(t[i] <= t[i - 1]);
        }
        std::vector<float> x = test::random_vec(64, 1);
        for (int i = 0; i < 20; ++i) {
            std::vector<float> mo(x.size(), 0.25f);
            x = s->step(mo, i, x);
        }
        for (float v : x) REQUIRE(std::isfinite(v));
    }
    // Karras endpoints are the training sigma range (DPM-Solver: min and max of ((1 - a) / a)^0.5).
    nlohmann::json cfg = base_config("DPMSolverMultistepScheduler");
    cfg["use_karras_sigmas"] = true;
    auto s = make_scheduler(cfg);
    s->set_timesteps(10);
    const auto tr = sched::detail::make_train_schedule(sched::detail::Config(cfg, "DPMSolverMultistepScheduler"));
    const float a0 = tr.alphas_cumprod.front(), aN = tr.alphas_cumprod.back();
    CHECK(s->sigmas().front() == Approx(std::sqrt((1.0f - aN) / aN)).epsilon(1e-6));
    CHECK(s->sigmas()[9] == Approx(std::sqrt((1.0f - a0) / a0)).epsilon(1e-6));
    CHECK(s->timesteps().front() == 999);
    CHECK(s->timesteps().back() == 0);
}
