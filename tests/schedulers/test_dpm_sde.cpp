// DPMSolverMultistepScheduler's SDE variants (algorithm_type sde-dpmsolver++ / sde-dpmsolver, diffusers 0.38) and
// diffusers' from_config(config, **overrides) as make_scheduler's overrides.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/schedulers/scheduler.h"
#include "runtime/core/error.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::sched;

namespace {
nlohmann::json dpm_config() {
    return load_scheduler_config(test::data_path("fixtures/sched_dpmpp2m/scheduler_config.json"));
}

// alpha_t, sigma_t and lambda of a VP sigma, in double.
struct Point {
    double alpha, sigma, lambda;
};
Point at(double s) {
    const double a = 1 / std::sqrt(s * s + 1);
    return {a, s * a, std::log(a) - std::log(s * a)};
}
}  // namespace

TEST_CASE("DPM-Solver SDE: the coefficients of diffusers' first- and second-order SDE updates", "[schedulers]") {
    const std::string algorithm = GENERATE(as<std::string>{}, "sde-dpmsolver++", "sde-dpmsolver");
    const std::string solver = GENERATE(as<std::string>{}, "midpoint", "heun");
    INFO(algorithm << " " << solver);
    nlohmann::json c = dpm_config();
    c["algorithm_type"] = algorithm;
    c["solver_type"] = solver;
    c["final_sigmas_type"] = "sigma_min";  // sde-dpmsolver needs it; the last step then keeps a finite h
    c["lower_order_final"] = false;
    auto s = make_scheduler(c);
    CHECK(s->draws_noise());
    CHECK(s->step_noise_f32());
    const int n = 6;
    s->set_timesteps(n);
    const bool pp = algorithm == "sde-dpmsolver++";
    for (int i = 0; i < n; ++i) {
        INFO("step " << i);
        const StepCoefficients k = s->plan_step(i);
        const Point t = at(s->sigmas()[(size_t)i + 1]), s0 = at(s->sigmas()[(size_t)i]);
        const double h = t.lambda - s0.lambda;
        // float32 arithmetic of a dozen operations with exp/log: 1e-5 relative
        const double noise = pp ? t.sigma * std::sqrt(1 - std::exp(-2 * h)) : t.sigma * std::sqrt(std::exp(2 * h) - 1);
        CHECK(k.prev_noise == Approx(noise).epsilon(1e-5));
        CHECK(k.prev_sample == Approx(pp ? t.sigma / s0.sigma * std::exp(-h) : t.alpha / s0.alpha).epsilon(1e-5));
        double w0 = pp ? t.alpha * (1 - std::exp(-2 * h)) : -2 * t.sigma * (std::exp(h) - 1), w1 = 0;
        if (i > 0) {  // second order from step 1 on (lower_order_final off)
            const Point s1 = at(s->sigmas()[(size_t)i - 1]);
            const double r0 = (s0.lambda - s1.lambda) / h;
            double k1;
            if (pp)
                k1 = solver == "midpoint" ? 0.5 * t.alpha * (1 - std::exp(-2 * h))
                                          : t.alpha * ((1 - std::exp(-2 * h)) / (-2 * h) + 1);
            else
                k1 = solver == "midpoint" ? -t.sigma * (std::exp(h) - 1) : -2 * t.sigma * ((std::exp(h) - 1) / h - 1);
            w0 += k1 / r0;
            w1 = -k1 / r0;
            CHECK(k.history_used == 1);
        }
        // x0 (++) or epsilon (dpmsolver) of this step, and of the step before from the history. D1's weights divide
        // by r0 = h0 / h, a ratio of differences of float32 log-SNRs (each ~1e-7 absolute on |lambda| up to ~10),
        // which carries ~1e-5 relative into k1 / r0: 1e-4.
        CHECK(k.prev_x0 == Approx(w0).epsilon(1e-4));
        CHECK(k.prev_history[0] == Approx(w1).epsilon(1e-4).margin(1e-12));
    }
}

TEST_CASE("DPM-Solver SDE: needs the step's noise; what diffusers cannot run is named", "[schedulers]") {
    nlohmann::json c = dpm_config();
    c["algorithm_type"] = "sde-dpmsolver++";
    auto s = make_scheduler(c);
    s->set_timesteps(3);
    const std::vector<float> m = test::random_vec(8, 1), x = test::random_vec(8, 2), nz = test::random_vec(8, 3);
    CHECK_THROWS_WITH(s->step(m, 0, x), Catch::Contains("needs the step's noise"));
    CHECK(s->step(m, 0, x, &nz).size() == 8);
    c["solver_order"] = 3;
    CHECK_THROWS_WITH(make_scheduler(c), Catch::Contains("solver_order"));
    c["solver_order"] = 2;
    c["algorithm_type"] = "sde-dpmsolver";
    c["final_sigmas_type"] = "zero";
    CHECK_THROWS_WITH(make_scheduler(c), Catch::Contains("sde-dpmsolver; use sigma_min"));
    CHECK(!make_scheduler(dpm_config())->draws_noise());  // dpmsolver++: deterministic
}

TEST_CASE("scheduler overrides: diffusers' from_config(config, **kwargs), misspelt fields named", "[schedulers]") {
    const nlohmann::json c = dpm_config();
    nlohmann::json karras = c;
    karras["use_karras_sigmas"] = true;
    auto a = make_scheduler(karras), b = make_scheduler(c, "", {{"use_karras_sigmas", true}});
    a->set_timesteps(8);
    b->set_timesteps(8);
    CHECK(b->sigmas() == a->sigmas());
    CHECK(b->timesteps() == a->timesteps());
    auto plain = make_scheduler(c);
    plain->set_timesteps(8);
    CHECK(plain->sigmas() != b->sigmas());
    // With a class override the config is the model's, the overrides on top.
    auto e = make_scheduler(c, "euler", {{"timestep_spacing", "trailing"}});
    CHECK(e->name() == "EulerDiscreteScheduler");
    CHECK_THROWS_WITH(make_scheduler(c, "", {{"use_karas_sigmas", true}}),
                      Catch::Contains("'use_karas_sigmas' is not a field this scheduler reads") &&
                          Catch::Contains("use_karras_sigmas"));
    CHECK_THROWS_WITH(make_scheduler(c, "ddim", {{"solver_order", 3}}), Catch::Contains("DDIMScheduler"));
    CHECK_THROWS_WITH(make_scheduler(c, "", {{"_class_name", "DDIMScheduler"}}),
                      Catch::Contains("not a scheduler field"));
    CHECK_THROWS_WITH(make_scheduler(c, "", {{"use_karras_sigmas", "yes"}}), Catch::Contains("expected true or false"));
    CHECK_THROWS_WITH(make_scheduler(c, "", nlohmann::json::array({1})), Catch::Contains("JSON object"));
}

TEST_CASE("scheduler presets: a class with config fields under other front ends' sampler names", "[schedulers]") {
    const nlohmann::json c = dpm_config();
    auto preset = make_scheduler(c, "dpm++2m-sde-karras");
    auto spelled = make_scheduler(c, "DPMSolverMultistepScheduler",
                                  {{"algorithm_type", "sde-dpmsolver++"}, {"use_karras_sigmas", true}});
    preset->set_timesteps(7);
    spelled->set_timesteps(7);
    CHECK(preset->draws_noise());
    CHECK(preset->sigmas() == spelled->sigmas());
    for (int i = 0; i < 7; ++i) CHECK(preset->plan_step(i).prev_noise == spelled->plan_step(i).prev_noise);
    // The caller's overrides go on top of the preset's.
    auto undone = make_scheduler(c, "dpm++2m-karras", {{"use_karras_sigmas", false}}), plain = make_scheduler(c);
    undone->set_timesteps(7);
    plain->set_timesteps(7);
    CHECK(undone->sigmas() == plain->sigmas());
    auto ek = make_scheduler(c, "euler-karras");
    CHECK(ek->name() == "EulerDiscreteScheduler");
    CHECK_THROWS_WITH(make_scheduler(c, "dpm++2m-karras", {{"solver_ordr", 1}}), Catch::Contains("solver_ordr"));
}
