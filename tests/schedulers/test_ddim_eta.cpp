// DDIMScheduler's eta (diffusers' step(eta=...)): DDPM's variance between DDIM's deterministic steps, its noise
// supplied by the caller.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/schedulers/scheduler.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::sched;

TEST_CASE("DDIM eta: std_dev_t = eta * sqrt(variance) weighs the noise, the direction shrinks to match",
          "[schedulers]") {
    const std::string dir = test::data_path("fixtures/sched_ddim/");
    const nlohmann::json config = load_scheduler_config(dir + "scheduler_config.json");
    REQUIRE(config.value("prediction_type", "epsilon") == "epsilon");
    const auto ac = SafeTensors::open(dir + "io.safetensors").read("alphas_cumprod").to_f32();
    const bool alpha_one = config.value("set_alpha_to_one", true);
    const int n = 10;
    auto plain = make_scheduler(config), zero = make_scheduler(config), one = make_scheduler(config),
         half = make_scheduler(config);
    zero->set_eta(0);
    one->set_eta(1);
    half->set_eta(0.5);
    CHECK(!zero->draws_noise());
    CHECK(one->draws_noise());
    for (auto* s : {plain.get(), zero.get(), one.get(), half.get()}) s->set_timesteps(n);
    for (int i = 0; i < n; ++i) {
        INFO("step " << i);
        const StepCoefficients cp = plain->plan_step(i), c0 = zero->plan_step(i), c1 = one->plan_step(i),
                               ch = half->plan_step(i);
        // eta 0 is the deterministic step, bit for bit
        CHECK(c0.prev_model == cp.prev_model);
        CHECK(c0.prev_sample == cp.prev_sample);
        CHECK(c0.prev_x0 == cp.prev_x0);
        CHECK(c0.prev_noise == 0);
        // DDPM's posterior variance (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev), in double here; the scheduler
        // computes it in float32 as diffusers does (a few ulps: 1e-6 relative).
        const int t = (int)one->timesteps()[(size_t)i], prev_t = t - 1000 / n;
        const double a_t = ac[(size_t)t], a_prev = prev_t >= 0 ? ac[(size_t)prev_t] : alpha_one ? 1.0 : ac[0];
        const double var = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev);
        CHECK(c1.prev_noise == Approx(std::sqrt(var)).epsilon(1e-6).margin(1e-12));
        CHECK(ch.prev_noise == Approx(0.5 * std::sqrt(var)).epsilon(1e-6).margin(1e-12));
        // epsilon prediction: prev = sqrt(a_prev) x0 + sqrt(1 - a_prev - std^2) eps + std noise. 1 - a_prev - var
        // cancels (var approaches 1 - a_prev): the float32 roundings of a_prev and var (~1e-7 absolute) give 1e-6
        // absolute under the sqrt; 1e-5 relative elsewhere.
        CHECK(c1.prev_model == Approx(std::sqrt(1 - a_prev - var)).epsilon(1e-5).margin(1e-6));
        CHECK(ch.prev_model == Approx(std::sqrt(1 - a_prev - 0.25 * var)).epsilon(1e-5).margin(1e-6));
        CHECK(c1.prev_x0 == cp.prev_x0);
        CHECK(c1.x0_sample == cp.x0_sample);
        CHECK(c1.x0_model == cp.x0_model);
        if (prev_t < 0 && alpha_one) CHECK(c1.prev_noise == 0);  // the last step: a_prev = 1, no variance
    }
}

TEST_CASE("DDIM eta: the step adds prev_noise * noise, and needs the noise", "[schedulers]") {
    const nlohmann::json config = load_scheduler_config(test::data_path("fixtures/sched_ddim/scheduler_config.json"));
    auto s = make_scheduler(config);
    s->set_eta(1);
    s->set_timesteps(4);
    const StepCoefficients c = s->plan_step(0);
    REQUIRE(c.prev_noise > 0);
    const std::vector<float> m = test::random_vec(64, 1), x = test::random_vec(64, 2), nz = test::random_vec(64, 3);
    const std::vector<float> zeros(64, 0.f);
    const auto with = apply_step(c, m, x, {}, nullptr, &nz), without = apply_step(c, m, x, {}, nullptr, &zeros);
    for (size_t i = 0; i < nz.size(); ++i)
        CHECK(with[i] - without[i] ==
              Approx((float)c.prev_noise * nz[i]).margin(2e-7 * (std::fabs(with[i]) + std::fabs(without[i]))));
    CHECK_THROWS_WITH(apply_step(c, m, x, {}, nullptr, nullptr), Catch::Contains("needs the step's noise"));
    s->set_timesteps(4);
    CHECK_THROWS_WITH(s->step(m, 0, x), Catch::Contains("needs the step's noise"));
    CHECK(s->step(m, 0, x, &nz) == with);  // the failed call planned nothing: step 0 is still next

    CHECK_THROWS_WITH(s->set_eta(-0.5), Catch::Contains("eta -0.5"));
    CHECK_THROWS_WITH(s->set_eta(NAN), Catch::Contains("finite"));
    auto dpm = make_scheduler(load_scheduler_config(test::data_path("fixtures/sched_dpmpp2m/scheduler_config.json")));
    CHECK(!dpm->takes_eta());
    dpm->set_eta(0);  // what diffusers' pipelines pass by default
    CHECK_THROWS_WITH(dpm->set_eta(1), Catch::Contains("applies to DDIMScheduler only"));
}
