// diffusers' set_timesteps(timesteps=...) (DPMSolverMultistepScheduler, EulerDiscreteScheduler) and Euler's
// set_timesteps(sigmas=...): the schedules the PixArt pipelines' `timesteps` and `sigmas` arguments set.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "models/schedulers/sched_math.h"
#include "models/schedulers/scheduler.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::sched;

namespace {

nlohmann::json config_of(const std::string& fixture) {
    const std::string flat = test::data_path("fixtures/" + fixture + "/scheduler_config.json");
    const std::string nested = test::data_path("fixtures/" + fixture + "/scheduler/scheduler_config.json");
    return load_scheduler_config(std::ifstream(flat) ? flat : nested);
}

// Every step's coefficients of two schedulers, planned in order.
void check_same_steps(Scheduler& a, Scheduler& b) {
    REQUIRE(a.num_inference_steps() == b.num_inference_steps());
    for (int i = 0; i < a.num_inference_steps(); ++i) {
        INFO("step " << i);
        const StepCoefficients ca = a.plan_step(i), cb = b.plan_step(i);
        CHECK(ca.x0_sample == cb.x0_sample);
        CHECK(ca.x0_model == cb.x0_model);
        CHECK(ca.prev_sample == cb.prev_sample);
        CHECK(ca.prev_model == cb.prev_model);
        CHECK(ca.prev_x0 == cb.prev_x0);
        CHECK(ca.prev_history == cb.prev_history);
        CHECK(ca.history_used == cb.history_used);
        CHECK(a.model_input_divisor(i) == b.model_input_divisor(i));
    }
}

// The training sigmas sqrt((1 - a) / a) in float32, from the fixture's alphas_cumprod as diffusers computed them.
std::vector<float> train_sigmas(const std::string& fixture) {
    const auto ac =
        SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors")).read("alphas_cumprod").to_f32();
    std::vector<float> s;
    for (float a : ac) s.push_back(std::sqrt((1.0f - a) / a));
    return s;
}

}  // namespace

TEST_CASE("custom timesteps: the scheduler's own spacing given back is the same schedule, bit for bit",
          "[schedulers]") {
    // diffusers interpolates the sigmas at the given timesteps exactly as at its spaced ones, so set_timesteps(
    // timesteps=s.timesteps) reproduces set_timesteps(n); and the fixtures hold diffusers' own sigmas for n.
    const std::string fixture = GENERATE(as<std::string>{}, "sched_dpmpp2m", "sched_euler", "pixart_pipeline");
    const int n = GENERATE(4, 20);
    INFO(fixture << " n " << n);
    const auto config = config_of(fixture);
    auto spaced = make_scheduler(config), custom = make_scheduler(config);
    spaced->set_timesteps(n);
    custom->set_custom_timesteps(spaced->timesteps());
    CHECK(custom->timesteps() == spaced->timesteps());
    CHECK(custom->sigmas() == spaced->sigmas());
    CHECK(custom->init_noise_sigma() == spaced->init_noise_sigma());
    check_same_steps(*spaced, *custom);
    if (fixture != "pixart_pipeline") {
        const auto st = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
        const auto ref = st.read("n" + std::to_string(n) + "_sigmas").to_f32();
        REQUIRE(custom->sigmas().size() == ref.size());
        for (size_t i = 0; i < ref.size(); ++i) CHECK(std::fabs(custom->sigmas()[i] - ref[i]) <= 1e-6 * ref[i]);
    }
}

TEST_CASE("custom timesteps: sigmas are the training sigmas at those timesteps", "[schedulers]") {
    // At integer timesteps np.interp returns the training sigma itself; the last sigma is final_sigmas_type's.
    for (const char* fixture : {"sched_dpmpp2m", "sched_euler"}) {
        INFO(fixture);
        const std::vector<float> ts = train_sigmas(fixture);
        auto s = make_scheduler(config_of(fixture));
        const std::vector<double> t = {999, 731, 500, 77, 3};
        s->set_custom_timesteps(t);
        CHECK(s->timesteps() == t);
        REQUIRE(s->sigmas().size() == t.size() + 1);
        for (size_t i = 0; i < t.size(); ++i) CHECK(s->sigmas()[i] == (double)ts[(size_t)t[i]]);
        CHECK(s->sigmas().back() == 0.0);  // both fixtures: final_sigmas_type "zero"
        // A step still runs: 5 steps, finite.
        std::vector<float> x = test::random_vec(32, 3);
        for (float& v : x) v *= (float)s->init_noise_sigma();
        for (int i = 0; i < 5; ++i) {
            std::vector<float> mi = x;
            s->scale_model_input(mi, i);
            x = s->step(mi, i, x);
        }
        for (float v : x) CHECK(std::isfinite(v));
    }
    // Euler keeps fractional timesteps (float32) and interpolates linearly between the training sigmas.
    const std::vector<float> ts = train_sigmas("sched_euler");
    auto e = make_scheduler(config_of("sched_euler"));
    e->set_custom_timesteps({998.5, 10.25});
    CHECK(e->timesteps() == std::vector<double>{998.5, 10.25});
    // numpy's interp: slope * (x - x_j) + y_j in float64, then the float32 cast of the sigmas.
    CHECK(e->sigmas()[0] == (double)(float)(((double)ts[999] - ts[998]) * 0.5 + ts[998]));
    CHECK(e->sigmas()[1] == (double)(float)(((double)ts[11] - ts[10]) * 0.25 + ts[10]));
}

TEST_CASE("Euler custom sigmas: the whole schedule, timesteps by _sigma_to_t", "[schedulers]") {
    // Training sigmas at integer timesteps map back to those timesteps exactly (_sigma_to_t's weight is 0 or 1).
    const std::vector<float> ts = train_sigmas("sched_euler");
    auto s = make_scheduler(config_of("sched_euler"));
    s->set_sigmas({ts[999], ts[600], ts[250], ts[0], 0.0});
    CHECK(s->timesteps() == std::vector<double>{999, 600, 250, 0});
    CHECK(s->sigmas() == std::vector<double>{ts[999], ts[600], ts[250], ts[0], 0.0});
    CHECK(s->num_inference_steps() == 4);
    CHECK(s->init_noise_sigma() == (double)ts[999]);  // linspace spacing: the largest sigma
    // Between two training sigmas: linear in log-sigma.
    const float mid = std::sqrt(ts[400] * ts[401]);
    s->set_sigmas({mid, 0.0});
    CHECK(s->timesteps()[0] == Approx(400.5).margin(1e-3));
    CHECK_THROWS_WITH(s->set_sigmas({1.0}), Catch::Contains("at least 2"));
    CHECK_THROWS_WITH(s->set_sigmas({1.0, -1.0}), Catch::Contains("sigmas[1] is -1"));
    CHECK_THROWS_WITH(s->set_sigmas({1.0, 0.0}, 0.5), Catch::Contains("mu"));
}

TEST_CASE("custom timesteps that cannot be a schedule, or that the scheduler does not take, are named",
          "[schedulers]") {
    auto dpm = make_scheduler(config_of("sched_dpmpp2m"));
    CHECK_THROWS_WITH(dpm->set_custom_timesteps({}), Catch::Contains("at least one"));
    CHECK_THROWS_WITH(dpm->set_custom_timesteps({999, 500.5}),
                      Catch::Contains("timesteps[1] is 500.5") && Catch::Contains("integers"));
    CHECK_THROWS_WITH(dpm->set_custom_timesteps({1000, 5}), Catch::Contains("timesteps[0] is 1000"));
    CHECK_THROWS_WITH(dpm->set_custom_timesteps({5, -1}), Catch::Contains("timesteps[1] is -1"));
    CHECK_THROWS_WITH(dpm->set_custom_timesteps({500, 500}), Catch::Contains("decrease strictly"));
    CHECK_THROWS_WITH(dpm->set_custom_timesteps({100, 900}), Catch::Contains("decrease strictly"));
    CHECK_THROWS_WITH(dpm->set_custom_timesteps({NAN}), Catch::Contains("timesteps[0] is nan"));
    for (const char* field : {"use_karras_sigmas", "use_lu_lambdas", "use_exponential_sigmas", "use_flow_sigmas"}) {
        nlohmann::json c = config_of("sched_dpmpp2m");
        c[field] = true;
        CHECK_THROWS_WITH(make_scheduler(c)->set_custom_timesteps({999, 500}), Catch::Contains(field));
    }
    nlohmann::json k = config_of("sched_euler");
    k["use_karras_sigmas"] = true;
    CHECK_THROWS_WITH(make_scheduler(k)->set_custom_timesteps({999, 500}), Catch::Contains("use_karras_sigmas"));
    CHECK_THROWS_WITH(make_scheduler(config_of("sched_ddim"))->set_custom_timesteps({999, 500}),
                      Catch::Contains("DDIMScheduler: custom timesteps are not supported"));
    CHECK_THROWS_WITH(make_scheduler(config_of("sched_flowmatch"))->set_custom_timesteps({999, 500}),
                      Catch::Contains("custom timesteps are not supported"));
    // A failed call leaves nothing half set: the scheduler still runs its earlier schedule.
    dpm->set_timesteps(3);
    const auto before = dpm->sigmas();
    CHECK_THROWS(dpm->set_custom_timesteps({10, 20}));
    CHECK(dpm->sigmas() == before);
}
