// EulerAncestralDiscreteScheduler: Euler's schedule, each step down to sigma_down plus sigma_up times the caller's
// noise (diffusers 0.38, scheduling_euler_ancestral_discrete.py).
#include <catch2/catch.hpp>
#include <cmath>

#include "models/schedulers/scheduler.h"
#include "runtime/core/error.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::sched;

TEST_CASE("Euler ancestral: Euler's schedule; sigma_up and sigma_down split the next sigma", "[schedulers]") {
    nlohmann::json config = load_scheduler_config(test::data_path("fixtures/sched_euler/scheduler_config.json"));
    const std::string spacing = GENERATE(as<std::string>{}, "linspace", "leading", "trailing");
    config["timestep_spacing"] = spacing;
    INFO(spacing);
    auto euler = make_scheduler(config), ancestral = make_scheduler(config, "euler_a");
    CHECK(ancestral->name() == "EulerAncestralDiscreteScheduler");
    CHECK(ancestral->draws_noise());
    CHECK(!euler->draws_noise());
    const int n = 12;
    euler->set_timesteps(n);
    ancestral->set_timesteps(n);
    // The sched_euler fixture's config has no karras/exponential sigmas: Euler's schedule is the same computation.
    CHECK(ancestral->timesteps() == euler->timesteps());
    CHECK(ancestral->sigmas() == euler->sigmas());
    CHECK(ancestral->init_noise_sigma() == euler->init_noise_sigma());
    for (int i = 0; i < n; ++i) {
        INFO("step " << i);
        CHECK(ancestral->model_input_divisor(i) == euler->model_input_divisor(i));
        const StepCoefficients c = ancestral->plan_step(i), e = euler->plan_step(i);
        const double from = ancestral->sigmas()[(size_t)i], to = ancestral->sigmas()[(size_t)i + 1];
        const double up = std::sqrt(to * to * (from * from - to * to) / (from * from));
        const double down = std::sqrt(to * to - up * up);
        // float32 arithmetic as diffusers' (a few ulps of sigma: 1e-6 relative, 1e-6 of `to` absolute for the
        // cancellation in down)
        CHECK(c.prev_noise == Approx(up).epsilon(1e-6).margin(1e-9));
        CHECK(c.prev_model == Approx(down - from).epsilon(1e-6).margin(1e-6 * to));
        CHECK(c.prev_sample == 1);  // epsilon: prev = sample + dt * model_output + sigma_up * noise
        if (i < n - 1) {
            CHECK(c.prev_model < e.prev_model);  // further down than Euler's (down < to); the noise adds up back
        } else {                                 // the last step, to sigma 0: Euler's, with no noise
            CHECK(c.prev_noise == 0);
            CHECK(c.prev_model == e.prev_model);
        }
    }
}

TEST_CASE("Euler ancestral: the step needs its noise; prediction types", "[schedulers]") {
    nlohmann::json config = load_scheduler_config(test::data_path("fixtures/sched_euler/scheduler_config.json"));
    auto s = make_scheduler(config, "EulerAncestralDiscreteScheduler");
    s->set_timesteps(4);
    const std::vector<float> m = test::random_vec(16, 1), x = test::random_vec(16, 2), nz = test::random_vec(16, 3);
    CHECK_THROWS_WITH(s->step(m, 0, x), Catch::Contains("needs the step's noise"));
    const std::vector<float> noisy = s->step(m, 0, x, &nz);  // the failed call planned nothing
    s->set_timesteps(4);
    const std::vector<float> zeros(16, 0.f);
    CHECK(noisy != s->step(m, 0, x, &zeros));
    config["prediction_type"] = "sample";
    CHECK_THROWS_WITH(make_scheduler(config, "euler_a"), Catch::Contains("prediction_type"));
    // v_prediction: the same noise weight, another deterministic part.
    auto eps =
        make_scheduler(load_scheduler_config(test::data_path("fixtures/sched_euler/scheduler_config.json")), "euler_a");
    config["prediction_type"] = "v_prediction";
    auto v = make_scheduler(config, "euler_a");
    v->set_timesteps(4);
    eps->set_timesteps(4);
    const StepCoefficients cv = v->plan_step(0), ce = eps->plan_step(0);
    CHECK(cv.prev_noise == ce.prev_noise);
    CHECK(cv.prev_sample != ce.prev_sample);
}
