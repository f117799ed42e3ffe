// FlowMatchEulerDiscreteScheduler with stochastic_sampling (diffusers 0.38): x0 = x - sigma * v, then
// prev = (1 - sigma_next) * x0 + sigma_next * noise, the noise the caller's.
#include <catch2/catch.hpp>

#include "models/schedulers/scheduler.h"
#include "runtime/core/error.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::sched;

TEST_CASE("flow matching, stochastic_sampling: back to x0, then forward to the next sigma with fresh noise",
          "[schedulers]") {
    nlohmann::json c = load_scheduler_config(test::data_path("fixtures/sd3_pipeline/scheduler/scheduler_config.json"));
    auto plain = make_scheduler(c);
    CHECK(!plain->draws_noise());
    c["stochastic_sampling"] = true;
    auto s = make_scheduler(c);
    CHECK(s->draws_noise());
    CHECK(s->step_noise_f32());
    s->set_timesteps(4);
    const std::vector<float> m = test::random_vec(32, 1), x = test::random_vec(32, 2), nz = test::random_vec(32, 3);
    CHECK_THROWS_WITH(s->step(m, 0, x), Catch::Contains("needs the step's noise"));
    for (int i = 0; i < 4; ++i) {
        INFO("step " << i);
        const float sigma = (float)s->sigmas()[(size_t)i], next = (float)s->sigmas()[(size_t)i + 1];
        const std::vector<float> got = s->step(m, i, x, &nz);
        // diffusers' order of float32 operations, element by element: bitwise
        for (size_t k = 0; k < x.size(); ++k) {
            const float x0 = x[k] - sigma * m[k];
            CHECK(got[k] == (1.0f - next) * x0 + next * nz[k]);
        }
    }
}
