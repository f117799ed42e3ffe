// The Sana pipelines' schedulers alone against diffusers' own runs (tests/data/fixtures/sana_pipeline,
// sana_sprint_pipeline): each step is fed the model output diffusers computed at that step, so the scheduler's
// schedule and update are checked exactly, independently of the transformer.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/schedulers/scheduler.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::sched;

namespace {

std::vector<float> read_f32(const SafeTensors& st, const std::string& name) { return st.read(name).to_f32(); }

// Largest |a - b| / (1 + |b|): absolute near 0, relative for large values.
double max_err(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i)
        m = std::max(m, std::fabs((double)a[i] - (double)b[i]) / (1.0 + std::fabs((double)b[i])));
    return m;
}

}  // namespace

TEST_CASE("Sana flow DPM-Solver++ matches diffusers step by step", "[schedulers][sana]") {
    const std::string dir = test::data_path("fixtures/sana_pipeline/");
    const SafeTensors st = SafeTensors::open(dir + "io.safetensors");
    auto sched = make_scheduler(load_scheduler_config(dir + "scheduler/scheduler_config.json"));
    CHECK(sched->name() == "DPMSolverMultistepScheduler");
    sched->set_timesteps(4);

    // timesteps: int64(sigma * 1000), truncated ([999, 899, 749, 499] for shift 3): exact.
    const Tensor ts = st.read("timesteps");
    REQUIRE(ts.numel() == 4);
    for (int i = 0; i < 4; ++i) CHECK(sched->timesteps()[(size_t)i] == (double)ts.data<int64_t>()[i]);
    // sigmas: float32 of the float64 schedule, then the final 0: exact.
    const auto sg = read_f32(st, "sigmas");
    REQUIRE(sched->sigmas().size() == sg.size());
    for (size_t i = 0; i < sg.size(); ++i) CHECK((float)sched->sigmas()[i] == sg[i]);
    CHECK(sched->sigmas().back() == 0.0);

    // The loop on diffusers' own noise_pred (guidance applied): 2M midpoint with a first-order first and last step.
    // The coefficients are the float32 scalars diffusers computes, applied in one fused expression instead of
    // torch's sequence of float32 tensor ops: each element differs by a few roundings of O(|x|) terms, and the
    // multistep history carries them one step further: 1e-5 relative to (1 + |x|) covers |x| <= 10 by a wide
    // margin over the ~4 * 6e-8 * 10 seen.
    std::vector<float> x = read_f32(st, "latents_init");
    for (int i = 0; i < 4; ++i) {
        INFO("step " << i);
        const auto v = read_f32(st, "step" + std::to_string(i) + "_noise_pred");
        x = sched->step(v, i, x);
        const auto want = read_f32(st, "step" + std::to_string(i) + "_latents");
        CHECK(max_err(x, want) < 1e-5);
        x = want;  // each step from diffusers' own sample: an error is the step's, not carried
    }
}

TEST_CASE("Sana-Sprint SCM scheduler matches diffusers step by step", "[schedulers][sana]") {
    const std::string dir = test::data_path("fixtures/sana_sprint_pipeline/");
    const SafeTensors st = SafeTensors::open(dir + "io.safetensors");
    auto sched = make_scheduler(load_scheduler_config(dir + "scheduler/scheduler_config.json"));
    CHECK(sched->name() == "SCMScheduler");
    CHECK(sched->draws_noise());
    sched->set_timesteps(2);

    // [max_timesteps, intermediate_timesteps, 0] as float32; the loop runs over the first two.
    const auto ts = read_f32(st, "timesteps");
    REQUIRE(ts.size() == 3);
    REQUIRE(sched->timesteps().size() == 2);
    for (size_t i = 0; i < 3; ++i) CHECK((float)sched->sigmas()[i] == ts[i]);

    // latents = latents_init * sigma_data (exact: sigma_data 0.5).
    std::vector<float> x = read_f32(st, "latents_init");
    for (float& v : x) v = v * (float)sched->init_noise_sigma();
    for (int i = 0; i < 2; ++i) {
        INFO("step " << i);
        const std::string si = "step" + std::to_string(i);
        // The transformer timestep sin(s)/(cos(s)+sin(s)) in float32: libm's and torch's sin/cos may differ by an
        // ulp each, the quotient by a few: 4 ulp relative (u ~ 1).
        const float u = *sched->transformer_timestep(i);
        CHECK(std::fabs(u - read_f32(st, si + "_transformer_timestep")[0]) <= 4 * 1.2e-7 * std::fabs(u));
        // scale_model_input gives the transformer's input x / sigma_data * r; here as x / (sigma_data / r): two
        // float32 roundings instead of one, 2 ulp of |x| <= 4.
        std::vector<float> xin = x;
        sched->scale_model_input(xin, i);
        CHECK(max_err(xin, read_f32(st, si + "_transformer_in")) < 1e-6);

        // The step on diffusers' raw transformer output. x0 = (cos s - sin s (1-2u)) x - sin s (1-2u+2u^2) sd/r out
        // regroups diffusers' sequence (x_in, v, then x0): each term is O(1) with a few float32 roundings, and
        // (1-2u+2u^2)/r ~ 1; 1e-5 relative to (1 + |x|) is ~10x the expected few-ulp differences.
        const auto out = read_f32(st, si + "_transformer_out");
        const auto noise = read_f32(st, "scm_noise_step" + std::to_string(i));
        const StepCoefficients c = sched->plan_step(i);
        std::vector<float> x0;
        std::vector<float> prev = apply_step(c, out, x, {}, &x0, &noise);
        CHECK(max_err(x0, read_f32(st, si + "_denoised")) < 1e-5);
        CHECK(max_err(prev, read_f32(st, si + "_latents")) < 1e-5);
        x = read_f32(st, si + "_latents");
    }
    // The last step's next angle is 0: prev = 1 * x0 + 0 * noise == x0, which is what diffusers decodes (after
    // / sigma_data); final_latents_scaled = x0 / sigma_data / scaling_factor.
    const float sf = 0.41407f;
    const auto fin = read_f32(st, "final_latents_scaled");
    std::vector<float> z = read_f32(st, "step1_denoised");
    for (float& v : z) v = v / (float)sched->final_latents_divisor() / sf;
    CHECK(max_err(z, fin) == 0);
}

TEST_CASE("SCM scheduler schedules and bad configs", "[schedulers][sana]") {
    const nlohmann::json cfg = {{"_class_name", "SCMScheduler"}, {"prediction_type", "trigflow"}, {"sigma_data", 0.5}};
    auto s = make_scheduler(cfg);
    // Other step counts: linspace(max_timesteps, 0, N + 1) (the intermediate angle applies to 2 steps only).
    s->set_timesteps(4);
    REQUIRE(s->sigmas().size() == 5);
    CHECK(s->sigmas()[0] == Approx(1.5708).epsilon(1e-6));
    CHECK(s->sigmas()[2] == Approx(0.7854).epsilon(1e-6));
    CHECK(s->sigmas()[4] == 0);
    s->set_timesteps(1);
    REQUIRE(s->timesteps().size() == 1);
    // One step: prev = cos(0) x0 + sin(0) sd noise = x0.
    const StepCoefficients c = s->plan_step(0);
    CHECK(c.prev_x0 == 1);
    CHECK(c.prev_noise == 0);
    // null intermediate: linspace even for 2 steps.
    auto lin = make_scheduler(with_overrides(cfg, {{"intermediate_timesteps", nullptr}}));
    lin->set_timesteps(2);
    CHECK(lin->sigmas()[1] == Approx(0.7854).epsilon(1e-6));
    // An explicit intermediate angle with 4 steps: diffusers raises; so does Kiln.
    auto inter = make_scheduler(with_overrides(cfg, {{"intermediate_timesteps", 1.1}}));
    CHECK_THROWS_WITH(inter->set_timesteps(4), Catch::Contains("intermediate_timesteps is only used with 2 steps"));
    CHECK_THROWS_WITH(make_scheduler(with_overrides(cfg, {{"prediction_type", "epsilon"}})),
                      Catch::Contains("prediction_type"));
    CHECK_THROWS_WITH(make_scheduler(with_overrides(cfg, {{"sigma_data", -1.0}})), Catch::Contains("sigma_data"));
}
