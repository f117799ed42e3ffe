// timestep_embedding vs the reference's f32 math (diffusers get_timestep_embedding). The GPU follows
// the same f32 operation order with a corrected division, a ~1 ulp exp and range-reduced sin/cos, so
// freq can differ from libm's expf by ~1 ulp; arg = t * freq (t <= 1000, scale 1) then moves by
// ~1 ulp(arg) <= 6.1e-5, and sin/cos by as much. Tolerance per element: 2 ulp(|arg|) + 2e-7.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("timestep_embedding matches the CPU reference", "[op:timestep_embedding]") {
    auto [dim, flip, shift] =
        GENERATE(std::make_tuple(2, true, 0.f), std::make_tuple(5, false, 1.f), std::make_tuple(13, true, 1.f),
                 std::make_tuple(256, true, 0.f), std::make_tuple(320, false, 1.f), std::make_tuple(127, false, 0.f));
    std::vector<float> tv{0.f, 1.f, 999.f, 1000.f, 0.5f, 37.25f, 500.f, 981.f, 3.f};
    CAPTURE(dim, flip, shift);
    int64_t N = (int64_t)tv.size();
    ir::TimestepAttrs a;
    a.dim = dim;
    a.flip_sin_to_cos = flip;
    a.downscale_freq_shift = shift;
    ir::Graph g;
    auto t = g.input("t", {N});
    g.output(g.timestep_embedding(t, a), "y");
    auto r = test::run_op(g, {{"t", Tensor::from_f32({N}, tv)}});
    int half = dim / 2;
    double worst = 0;  // error in units of the tolerance
    for (int64_t i = 0; i < N; ++i)
        for (int c = 0; c < dim; ++c) {
            size_t e = (size_t)(i * dim + c);
            double arg = 0;
            if (c < 2 * half) {
                int k = c % half;
                float expo = -std::log(a.max_period) * (float)k / ((float)half - a.downscale_freq_shift);
                arg = std::abs(tv[(size_t)i] * std::exp(expo));
            }
            double tol = 2 * std::ldexp(1.0, std::ilogb(std::max(arg, 1e-30)) - 23) + 2e-7;
            worst = std::max(worst, std::abs((double)r.gpu[e] - r.cpu[e]) / tol);
        }
    CHECK(worst <= 1.0);
}

TEST_CASE("timestep_embedding with scale and max_period (Flux-style t in [0, 1], scale 1000)",
          "[op:timestep_embedding]") {
    std::vector<float> tv{0.f, 1.f, 0.999f, 0.5f, 0.0371f, 0.25f};
    int64_t N = (int64_t)tv.size();
    ir::TimestepAttrs a;
    a.dim = 256;
    a.scale = 1000.f;
    a.max_period = 5000.f;
    ir::Graph g;
    auto t = g.input("t", {N});
    g.output(g.timestep_embedding(t, a), "y");
    auto r = test::run_op(g, {{"t", Tensor::from_f32({N}, tv)}});
    double worst = 0;  // same tolerance as above, on |arg| = scale * t * freq <= 1000
    for (int64_t i = 0; i < N; ++i)
        for (int c = 0; c < a.dim; ++c) {
            int k = c % (a.dim / 2);
            float expo = -std::log(a.max_period) * (float)k / (float)(a.dim / 2);
            double arg = std::abs(a.scale * (tv[(size_t)i] * std::exp(expo)));
            double tol = 2 * std::ldexp(1.0, std::ilogb(std::max(arg, 1e-30)) - 23) + 2e-7;
            size_t e = (size_t)(i * a.dim + c);
            worst = std::max(worst, std::abs((double)r.gpu[e] - r.cpu[e]) / tol);
        }
    CHECK(worst <= 1.0);
}

TEST_CASE("timestep_embedding rejects bad dims", "[op:timestep_embedding][bad]") {
    ir::Graph g;
    auto t = g.input("t", {2, 3});
    ir::TimestepAttrs a;
    REQUIRE_THROWS_WITH(g.timestep_embedding(t, a), Catch::Contains("timestep_embedding") && Catch::Contains("[2, 3]"));
    auto t1 = g.input("t1", {2});
    a.dim = 1;
    REQUIRE_THROWS_WITH(g.timestep_embedding(t1, a), Catch::Contains("timestep_embedding") && Catch::Contains("dim"));
}

TEST_CASE("timestep_embedding rejects a zero frequency denominator", "[op:timestep_embedding][bad]") {
    ir::Graph g;
    auto t = g.input("t", {2});
    ir::TimestepAttrs a;
    a.dim = 4;
    a.downscale_freq_shift = 2.f;  // half - shift == 0
    auto y = g.timestep_embedding(t, a);
    REQUIRE_THROWS_WITH(vk::lower(g, g.nodes()[(size_t)g.value(y).producer]),
                        Catch::Contains("timestep_embedding") && Catch::Contains("division by zero"));
}
