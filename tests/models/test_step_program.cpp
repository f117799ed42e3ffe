// models::StepProgram, the denoising loop on the device, on a toy "transformer" (sample = hidden * t + hidden
// [, -hidden] + bias: rows differ, so guidance matters) at awkward sizes: every step's transformer inputs and
// latents against the host's float arithmetic (sched::apply_step and the pipelines' guidance), bit for bit; the
// same final latents with 1, 2 or 3 steps in flight; the final scaling; the float-division variant's bound; and row
// chunks (an activation over the binding limit) inside the loop.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "models/loop/step_program.h"
#include "runtime/core/error.h"
#include "runtime/vulkan/context.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

struct Case {
    int rows;
    uint32_t row_lat;
    bool learned, cfg, cond_first, in_place;
};

// The per-step table: awkward divisors (Euler-like), clipping, the DPM-style history ring, no-x0 steps.
std::vector<params::LoopStep> table() {
    std::vector<params::LoopStep> t(5);
    const float div[5] = {1.0f, 1.37f, 3.0f, 0.7f, 1.0f};
    for (int i = 0; i < 5; ++i) {
        auto& s = t[(size_t)i];
        s.timestep = 0.9f - 0.17f * (float)i;
        s.divisor = div[i];
        s.x0_sample = 1.1f + 0.1f * (float)i, s.x0_model = -0.31f - 0.05f * (float)i;
        s.x0_clip = i == 1 ? 1.0f : (i == 4 ? 0.5f : 0.0f);
        s.prev_sample = 0.93f, s.prev_model = 0.11f * (float)(i + 1), s.prev_x0 = i == 3 ? 0.0f : 0.29f;
        s.prev_h0 = -0.13f, s.prev_h1 = 0.07f;
        s.want_x0 = i != 3;
        s.history_used = (uint32_t)std::min(i, 2);
        if (i == 4) s.history_used = 1;
        s.keep_x0 = i != 3;
    }
    return t;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}
std::vector<float> floats(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }
int64_t ulps(float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return std::llabs((int64_t)ia - (int64_t)ib);
}
}  // namespace

TEST_CASE("step program: the device loop is the host's arithmetic, bit for bit", "[models][loop][vulkan]") {
    const Case c = GENERATE(Case{1, 13, false, false, false, false}, Case{2, 127, true, true, true, true},
                            Case{3, 3, false, true, false, false}, Case{1, 300, true, true, false, true});
    CAPTURE(c.rows, c.row_lat, c.learned, c.cfg, c.cond_first, c.in_place);
    const int BB = c.rows * (c.cfg ? 2 : 1);
    const uint32_t row_out = c.learned ? 2 * c.row_lat : c.row_lat;
    ir::Graph g;
    ir::Val h = g.input("hidden_states", {BB, c.row_lat});
    ir::Val t = g.input("timestep", {BB});
    ir::Val bias = g.weight("bias", {BB, row_out});
    ir::Val a = g.add(g.mul(h, g.reshape(t, {BB, 1})), h);
    if (c.learned) a = g.concat(a, g.scale(h, -1.f), 1);
    g.output(g.add(a, bias), "sample");
    g.output(h, "hidden_copy");
    g.output(t, "timestep_copy");
    const Tensor bias_t = test::random_tensor({BB, row_out}, 7);
    exec::Executor ex(context(), g,
                      [&](const ir::Value&, void* dst, size_t n) { std::memcpy(dst, bias_t.bytes.data(), n); });
    models::StepLoopSpec spec;
    spec.rows = c.rows, spec.row_lat = c.row_lat, spec.row_out = row_out;
    spec.cfg = c.cfg, spec.cond_first = c.cond_first, spec.scale_in_place = c.in_place, spec.guidance = 4.5f;
    REQUIRE(models::StepProgram::supported(ex, spec));
    const auto steps = table();
    const size_t n = (size_t)c.rows * c.row_lat;
    const std::vector<float> x_init = floats(test::random_tensor({(int64_t)n}, 3, -2.f, 2.f));

    // The host loop, step by step from the device's transformer output (read back in observe).
    std::vector<float> x = x_init, hist(3 * n, 0.f);
    models::StepProgram prog(context(), ex, spec, steps);
    int observed = 0;
    prog.run(x_init, {}, [&](int i) {
        const auto& st = steps[(size_t)i];
        std::vector<float> s(n);
        for (size_t k = 0; k < n; ++k) s[k] = st.divisor != 1.0f ? x[k] / st.divisor : x[k];
        if (c.in_place) x = s;
        std::vector<float> hidden;
        for (int r = 0; r < BB / c.rows; ++r) hidden.insert(hidden.end(), s.begin(), s.end());
        CHECK(same(floats(ex.output("hidden_copy")), hidden));
        CHECK(same(floats(ex.output("timestep_copy")), std::vector<float>((size_t)BB, st.timestep)));
        const std::vector<float> out = floats(ex.output("sample"));
        for (size_t k = 0; k < n; ++k) {
            const size_t b = k / c.row_lat, j = k % c.row_lat;
            float m = out[b * row_out + j];
            if (c.cfg) {
                const float first = m, second = out[(b + (size_t)c.rows) * row_out + j];
                const float cond = c.cond_first ? first : second, unc = c.cond_first ? second : first;
                m = unc + spec.guidance * (cond - unc);
            }
            const float sv = x[k];
            float x0 = 0;
            if (st.want_x0) {
                x0 = st.x0_sample * sv + st.x0_model * m;
                if (st.x0_clip > 0) x0 = std::clamp(x0, -st.x0_clip, st.x0_clip);
            }
            float p = st.prev_sample * sv + st.prev_model * m + st.prev_x0 * x0;
            if (st.history_used > 0) p += st.prev_h0 * hist[(size_t)((i + 2) % 3) * n + k];
            if (st.history_used > 1) p += st.prev_h1 * hist[(size_t)((i + 1) % 3) * n + k];
            x[k] = p;
            if (st.keep_x0) hist[(size_t)(i % 3) * n + k] = x0;
        }
        CHECK(same(prog.latents(), x));
        ++observed;
    });
    CHECK(observed == 5);
    // The final scaling, as the pipelines do it on the host.
    std::vector<float> z0(n), z1(n), z2(n);
    const float sf = 0.18215f, shift = 0.0609f, inv = (float)(1.0 / 0.18215);
    for (size_t k = 0; k < n; ++k) z0[k] = inv * x[k], z1[k] = x[k] / sf, z2[k] = x[k] / sf + shift;
    CHECK(same(prog.latents(0, inv), z0));
    CHECK(same(prog.latents(1, sf), z1));
    CHECK(same(prog.latents(2, sf, shift), z2));

    // Steps in flight, no read-back: the same latents; the program runs again from new latents.
    for (int depth : {1, 2, 3}) {
        CAPTURE(depth);
        spec.in_flight = depth;
        models::StepProgram q(context(), ex, spec, steps);
        std::vector<int> seen;
        q.run(x_init, [&](int step, int total) {
            CHECK(total == 5);
            seen.push_back(step);
        });
        CHECK(seen == std::vector<int>{1, 2, 3, 4, 5});
        CHECK(same(q.latents(), x));
        q.run(x_init);
        CHECK(same(q.latents(), x));
    }

    // Each division variant: i64 and f64 exactly the host's quotient (every step divides but the first and the
    // last); f32 (devices with neither) within Vulkan's 2.5 ulp of OpFDiv, so at most 3 apart at the final scaling.
    using D = models::StepLoopSpec::Division;
    for (D dv : {D::i64, D::f64, D::f32}) {
        if ((dv == D::i64 && !context().info().int64) || (dv == D::f64 && !context().info().fp64)) continue;
        CAPTURE((int)dv);
        spec.division = dv;
        models::StepProgram f(context(), ex, spec, steps);
        f.run(x_init);
        const std::vector<float> xf = f.latents(), zf = f.latents(1, sf);
        if (dv != D::f32) {
            CHECK(same(xf, x));
            CHECK(same(zf, z1));
            continue;
        }
        int64_t worst = 0;
        for (size_t k = 0; k < n; ++k) worst = std::max(worst, ulps(zf[k], xf[k] / sf));
        INFO("float division: " << worst << " ulp");
        CHECK(worst <= 3);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("step program: what it refuses", "[models][loop][bad][vulkan]") {
    ir::Graph g;
    ir::Val h = g.input("hidden_states", {2, 8});
    ir::Val t = g.input("timestep", {2});
    g.output(g.mul(h, g.reshape(t, {2, 1})), "sample");
    auto none = [](const ir::Value&, void*, size_t) {};
    models::StepLoopSpec spec;
    spec.rows = 2, spec.row_lat = 8, spec.row_out = 8;
    std::string why;
    exec::Executor eager(context(), g, none, exec::Mode::eager);
    CHECK(!models::StepProgram::supported(eager, spec, &why));
    CHECK(why.find("eager") != std::string::npos);
    exec::Executor full(context(), g, none, exec::Mode::full);
    CHECK(models::StepProgram::supported(full, spec));
    spec.cfg = true;  // a guidance batch would be 4 rows
    CHECK(!models::StepProgram::supported(full, spec, &why));
    CHECK(why.find("hidden_states") != std::string::npos);
    CHECK_THROWS_AS(models::StepProgram(context(), full, spec, {params::LoopStep{}}), Error);
    spec.cfg = false;
    models::StepProgram p(context(), full, spec, {params::LoopStep{}});
    CHECK_THROWS_AS(p.run(std::vector<float>(3)), Error);  // 16 latents expected
}

TEST_CASE("step program: division variants on floats of every magnitude", "[models][loop][vulkan]") {
    // An identity step (prev = 1 * x + 0 * m + 0 * 0), then loop_finalize's x / a against the host's x / a.
    const int64_t n = 1 << 16;
    ir::Graph g;
    ir::Val h = g.input("hidden_states", {1, n});
    ir::Val t = g.input("timestep", {1});
    g.output(g.mul(h, g.reshape(t, {1, 1})), "sample");
    exec::Executor ex(
        context(), g, [](const ir::Value&, void*, size_t) {}, exec::Mode::full);
    models::StepLoopSpec spec;
    spec.rows = 1, spec.row_lat = (uint32_t)n, spec.row_out = (uint32_t)n;
    params::LoopStep id{};
    id.timestep = 1.0f, id.divisor = 1.0f, id.prev_sample = 1.0f;
    std::vector<float> x((size_t)n);
    uint32_t state = 12345;
    for (auto& v : x) {  // random significands and signs, exponents 2^-60 .. 2^60
        state = state * 1664525u + 1013904223u;
        const uint32_t mant = state >> 9;
        state = state * 1664525u + 1013904223u;
        const uint32_t e = 67 + (state >> 8) % 121, sign = (state & 1) << 31;
        const uint32_t bits = sign | (e << 23) | mant;
        std::memcpy(&v, &bits, 4);
    }
    using D = models::StepLoopSpec::Division;
    for (D dv : {D::i64, D::f64, D::f32}) {
        if ((dv == D::i64 && !context().info().int64) || (dv == D::f64 && !context().info().fp64)) continue;
        spec.division = dv;
        models::StepProgram p(context(), ex, spec, {id});
        p.run(x);
        REQUIRE(same(p.latents(), x));
        for (float a : {3.0f, 0.7f, 1.37f, 0.18215f, 1.5305f, 1e-3f, 7.3e5f, -2.9f}) {
            CAPTURE((int)dv, a);
            const std::vector<float> z = p.latents(1, a);
            int64_t worst = 0, differ = 0;
            for (size_t k = 0; k < x.size(); ++k) {
                const int64_t u = ulps(z[k], x[k] / a);
                worst = std::max(worst, u);
                differ += u != 0;
            }
            INFO(differ << " quotients differ, by at most " << worst << " ulp");
            CHECK(worst <= (dv == D::f32 ? 3 : 0));
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("row chunks inside the device loop: the same latents", "[models][split][loop]") {
    // A toy transformer with guidance: hidden [2, 2048] (two 8 KiB rows) as [2, 64, 32] through linear and gelu, plus
    // the hidden value: under a 10 KiB limit the linear and gelu go in chunks of 80 rows, the add in rows of 1.
    ir::Graph g;
    ir::Val h = g.input("hidden_states", {2, 2048});
    g.input("timestep", {2});
    ir::Val x = g.reshape(h, {2, 64, 32});
    const Tensor w = test::random_tensor({32, 32}, 5, -0.3f, 0.3f), b = test::random_tensor({32}, 6);
    x = g.gelu(g.linear(x, g.weight("w", {32, 32}), g.weight("b", {32})), true);
    g.output(g.add(g.reshape(x, {2, 2048}), h), "sample");
    exec::WeightBytesFn bytes = [&](const ir::Value& v, void* dst, size_t n) {
        std::memcpy(dst, (v.name == "w" ? w : b).bytes.data(), n);
    };
    models::StepLoopSpec spec;
    spec.rows = 1, spec.row_lat = spec.row_out = 2048, spec.cfg = true, spec.guidance = 3.f;
    std::vector<params::LoopStep> steps(3);
    for (int i = 0; i < 3; ++i) {
        auto& st = steps[(size_t)i];
        st = {};
        st.timestep = 1.f - 0.3f * (float)i, st.divisor = 1.f, st.prev_sample = 0.9f, st.prev_model = 0.1f;
    }
    const std::vector<float> x0 = [] {
        Tensor t = test::random_tensor({2048}, 9);
        return std::vector<float>(t.data<float>(), t.data<float>() + 2048);
    }();
    auto latents = [&](bool split) {
        std::unique_ptr<test::BindingLimit> limit;
        if (split) limit = std::make_unique<test::BindingLimit>(10 << 10);
        exec::Executor ex(context(), g, bytes, exec::Mode::regional);
        // linear, gelu and add split (linear + gelu are one op when fused)
        CHECK(ex.counters().split_ops == (split ? 3 - ex.counters().nodes_fused : 0));
        models::StepProgram prog(context(), ex, spec, steps);
        prog.run(x0);
        return prog.latents();
    };
    const std::vector<float> plain = latents(false), split = latents(true);
    CHECK(std::memcmp(plain.data(), split.data(), plain.size() * 4) == 0);
    CHECK(vk::Context::validation_errors() == 0);
}

// own_memory: an executor kept resident between calls (TransformerCache) lends the loop none of its memory, so many
// calls leave its allocator as they found it; without it each program's buffers stay in the executor's blocks.
TEST_CASE("step program: own_memory leaves the executor's allocator untouched", "[models][loop][vulkan]") {
    ir::Graph g;
    ir::Val h = g.input("hidden_states", {2, 64});
    ir::Val t = g.input("timestep", {2});
    g.output(g.mul(h, g.reshape(t, {2, 1})), "sample");
    exec::Executor ex(
        context(), g, [](const ir::Value&, void*, size_t) {}, exec::Mode::full);
    models::StepLoopSpec spec;
    spec.rows = 2, spec.row_lat = 64, spec.row_out = 64;
    const auto steps = table();
    const std::vector<float> x(128, 0.5f);
    auto run_once = [&](bool own) {
        spec.own_memory = own;
        models::StepProgram prog(context(), ex, spec, steps);
        prog.run(x);
        return prog.latents();
    };
    const uint64_t before = ex.allocator().used();
    const auto a = run_once(true);
    const auto b = run_once(true);
    CHECK(ex.allocator().used() == before);
    CHECK(same(a, b));
    const auto c = run_once(false);  // the same arithmetic in the executor's memory, which keeps it
    CHECK(same(a, c));
    CHECK(ex.allocator().used() > before);
}
