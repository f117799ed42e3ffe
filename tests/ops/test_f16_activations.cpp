// f16 activation storage (ir::store_f16, KILN_ACT_F16=1): a value written by a linear and read only by linears
// (an MLP's hidden between fc1(+GELU) and fc2) is stored as f16, rounded once at the producer's store; readers
// convert it back and accumulate in f32.
// Bound, per output element j of the reading linear y = W h + b: the stored h_k carries a relative error of at
// most u = 2^-10 (one f16 ulp at h_k's binade: Vulkan lets f32 -> f16 conversion round to nearest (2^-11) or
// toward zero (2^-10), so the larger), hence |y16_j - y32_j| <= u * sum_k |W_jk| |h_k|, plus the f32 summation
// difference of the two runs (test_linear's bound: 1e-5 relative to sum_k |W_jk| |h_k| here).
#include "runtime/ir/fuse.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
struct Mlp {
    int64_t M, D, H;
};

// Checks y16 (the reading linear y = W h + b, h stored f16) per element against the CPU reference ref and the
// all-f32 run y32: |difference| <= (u + 1e-5) * sum_k |W_jk| |h_k| + 1e-6 (the bound above). W is [N, K], h
// [M, K] in f32. Returns {elements over the bound, elements that differ from y32}.
std::pair<int, int> check_bound(const std::vector<float>& y16, const std::vector<float>& y32,
                                const std::vector<float>& ref, const std::vector<float>& W, const std::vector<float>& h,
                                int64_t M, int64_t N, int64_t K) {
    const double u = std::ldexp(1.0, -10);
    int over = 0, changed = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < N; ++j) {
            double mag = 0;
            for (int64_t k = 0; k < K; ++k)
                mag += std::fabs(W[(size_t)(j * K + k)]) * std::fabs(h[(size_t)(m * K + k)]);
            const size_t i = (size_t)(m * N + j);
            const double bound = (u + 1e-5) * mag + 1e-6;
            over += std::fabs(y16[i] - ref[i]) > bound;
            over += std::fabs(y16[i] - y32[i]) > bound;
            changed += y16[i] != y32[i];
        }
    return {over, changed};
}

ir::Graph mlp(const Mlp& s, DType wdt, bool gelu) {
    ir::Graph g;
    auto x = g.input("x", {s.M, s.D});
    auto h = g.linear(x, g.weight("w1", {s.H, s.D}, wdt), g.weight("b1", {s.H}));
    if (gelu) h = g.gelu(h, true);
    g.output(g.linear(h, g.weight("w2", {s.D, s.H}, wdt), g.weight("b2", {s.D})), "y");
    return g;
}
}  // namespace

TEST_CASE("an MLP hidden stored as f16 stays within its rounding bound", "[op:f16act]") {
    const Mlp s = GENERATE(Mlp{13, 32, 128}, Mlp{64, 48, 192}, Mlp{5, 36, 144}, Mlp{7, 30, 120}, Mlp{2, 8, 32});
    const DType wdt = GENERATE(DType::f32, DType::f16);
    const bool gelu = GENERATE(true, false);
    CAPTURE(s.M, s.D, s.H, dtype_name(wdt), gelu);
    std::map<std::string, Tensor> in{{"x", test::random_tensor({s.M, s.D}, 90, -2.f, 2.f)}};
    std::map<std::string, Tensor> w{{"w1", test::random_weight({s.H, s.D}, wdt, 91)},
                                    {"b1", test::random_tensor({s.H}, 92)},
                                    {"w2", test::random_weight({s.D, s.H}, wdt, 93)},
                                    {"b2", test::random_tensor({s.D}, 94)}};
    const ir::Graph g = mlp(s, wdt, gelu);
    auto plain = test::run_vk(g, in, w, exec::Mode::full, "1");
    ::setenv("KILN_ACT_F16", "1", 1);
    auto half = test::run_vk(g, in, w, exec::Mode::full, "1");
    auto eager = test::run_vk(g, in, w, exec::Mode::eager, "0");  // unfused: GELU between the linears
    ::unsetenv("KILN_ACT_F16");
    CHECK(plain.c.f16_activations == 0);
    CHECK(half.c.f16_activations == 1);
    CHECK(half.c.f16_activation_bytes_saved == (uint64_t)(s.M * s.H * 2));
    CHECK(half.c.activation_bytes_planned <= plain.c.activation_bytes_planned);
    if (s.M * s.H * 4 >= 4096)  // smaller: both round up to the same 256-byte-aligned arena
        CHECK(half.c.activation_bytes_planned < plain.c.activation_bytes_planned);
    CHECK(eager.c.f16_activations == (gelu ? 0 : 1));

    // The hidden in f32 on the CPU, for the bound.
    ir::Graph gh;
    auto hx = gh.input("x", {s.M, s.D});
    auto hh = gh.linear(hx, gh.weight("w1", {s.H, s.D}, wdt), gh.weight("b1", {s.H}));
    gh.output(gelu ? gh.gelu(hh, true) : hh, "y");
    auto wcpu = [&](const ir::Value& v) { return w.at(v.name); };
    const auto h = cpu::run(gh, in, wcpu).at("y").to_f32();
    const auto ref = cpu::run(g, in, wcpu).at("y").to_f32();
    const auto w2 = w.at("w2").to_f32();
    auto [over, changed] =
        check_bound(half.out.at("y").to_f32(), plain.out.at("y").to_f32(), ref, w2, h, s.M, s.D, s.H);
    CHECK(over == 0);
    CHECK(changed > 0);  // the storage really is f16

    // Over the binding limit the f16 hidden is split into row chunks: bitwise the unsplit f16 run.
    ::setenv("KILN_ACT_F16", "1", 1);
    ::setenv("KILN_MAX_BINDING_RANGE", std::to_string(std::max<int64_t>(s.M * s.H, 2048)).c_str(), 1);
    auto split = test::run_vk(g, in, w, exec::Mode::full, "1");
    ::unsetenv("KILN_MAX_BINDING_RANGE");
    ::unsetenv("KILN_ACT_F16");
    if (s.M * s.H * 2 > std::max<int64_t>(s.M * s.H, 2048) && s.M >= 4) CHECK(split.c.split_ops > 0);
    CHECK(split.out.at("y").bytes == half.out.at("y").bytes);
}

TEST_CASE("f16 storage applies only to linear-to-linear values", "[op:f16act]") {
    ir::Graph g;
    auto x = g.input("x", {4, 8});
    auto a = g.linear(x, g.weight("w1", {8, 8}), {});
    auto b = g.linear(a, g.weight("w2", {8, 8}), {});
    g.output(g.add(a, b), "y");                              // a: also read by add -> f32
    g.output(g.linear(b, g.weight("w3", {8, 8}), {}), "z");  // b: read by add too -> f32
    auto c = g.linear(x, g.weight("w4", {8, 8}), {});
    g.output(c, "c");  // a graph output -> f32
    uint64_t saved = 0;
    CHECK(ir::store_f16(g, &saved) == 0);
    CHECK(saved == 0);
    ir::Graph g2;
    auto x2 = g2.input("x", {4, 8});
    auto h = g2.linear(x2, g2.weight("w1", {8, 8}), {});
    g2.output(g2.linear(h, g2.weight("w2", {8, 8}), {}), "y");
    g2.output(g2.linear(h, g2.weight("w3", {8, 8}), {}), "z");  // two linear readers -> f16
    CHECK(ir::store_f16(g2, &saved) == 1);
    CHECK(saved == 4 * 8 * 2);
    CHECK(g2.value(h).dtype == DType::f16);
}

namespace {
// Flux's single block, reduced: h = concat(silu(x) (an f32 producer), gelu(linear(x))) on the last axis, then
// y = linear(h). The linear's GELU'd output and the concat are stored f16.
ir::Graph concat_mlp(const Mlp& s, DType wdt) {
    ir::Graph g;
    auto x = g.input("x", {s.M, s.D});
    auto a = g.silu(x);
    auto m = g.gelu(g.linear(x, g.weight("w1", {s.H, s.D}, wdt), g.weight("b1", {s.H})), true);
    g.output(g.linear(g.concat(a, m, -1), g.weight("w2", {s.D, s.D + s.H}, wdt), g.weight("b2", {s.D})), "y");
    return g;
}
}  // namespace

TEST_CASE("a concat read only by linears is stored f16, with its linear-made input, within the same bound",
          "[op:f16act]") {
    const Mlp s = GENERATE(Mlp{13, 32, 128}, Mlp{5, 36, 144}, Mlp{7, 30, 120}, Mlp{2, 8, 32});
    const DType wdt = GENERATE(DType::f32, DType::f16);
    CAPTURE(s.M, s.D, s.H, dtype_name(wdt));
    const int64_t C = s.D + s.H;
    std::map<std::string, Tensor> in{{"x", test::random_tensor({s.M, s.D}, 70, -2.f, 2.f)}};
    std::map<std::string, Tensor> w{{"w1", test::random_weight({s.H, s.D}, wdt, 71)},
                                    {"b1", test::random_tensor({s.H}, 72)},
                                    {"w2", test::random_weight({s.D, C}, wdt, 73)},
                                    {"b2", test::random_tensor({s.D}, 74)}};
    const ir::Graph g = concat_mlp(s, wdt);
    auto plain = test::run_vk(g, in, w, exec::Mode::full, "1");
    ::setenv("KILN_ACT_F16", "1", 1);
    auto half = test::run_vk(g, in, w, exec::Mode::full, "1");
    auto eager = test::run_vk(g, in, w, exec::Mode::eager, "0");
    ::unsetenv("KILN_ACT_F16");
    CHECK(plain.c.f16_activations == 0);
    CHECK(half.c.f16_activations == 2);  // linear(+GELU) output and the concat
    CHECK(half.c.f16_activation_bytes_saved == (uint64_t)(s.M * (s.H + C) * 2));
    CHECK(eager.c.f16_activations == 1);  // unfused, GELU reads the linear: only the concat

    // h = concat(silu(x), gelu(linear(x))) in f32 on the CPU, for the bound on y = W2 h + b2.
    ir::Graph gh;
    auto hx = gh.input("x", {s.M, s.D});
    auto hm = gh.gelu(gh.linear(hx, gh.weight("w1", {s.H, s.D}, wdt), gh.weight("b1", {s.H})), true);
    gh.output(gh.concat(gh.silu(hx), hm, -1), "h");
    auto wcpu = [&](const ir::Value& v) { return w.at(v.name); };
    const auto h = cpu::run(gh, in, wcpu).at("h").to_f32();
    const auto ref = cpu::run(g, in, wcpu).at("y").to_f32();
    const auto w2 = w.at("w2").to_f32();
    for (const auto* run : {&half, &eager}) {
        auto [over, changed] =
            check_bound(run->out.at("y").to_f32(), plain.out.at("y").to_f32(), ref, w2, h, s.M, s.D, C);
        CHECK(over == 0);
        CHECK(changed > 0);
    }
    // Rounded once, whichever op rounds: the fused run (the linear rounds its half, the concat copies it) equals
    // the unfused one (the concat rounds both halves) bitwise.
    CHECK(half.out.at("y").bytes == eager.out.at("y").bytes);
    // Split into row chunks over the binding limit: bitwise the unsplit f16 run.
    ::setenv("KILN_ACT_F16", "1", 1);
    ::setenv("KILN_MAX_BINDING_RANGE", std::to_string(std::max<int64_t>(s.M * C, 2048)).c_str(), 1);
    auto split = test::run_vk(g, in, w, exec::Mode::full, "1");
    ::unsetenv("KILN_MAX_BINDING_RANGE");
    ::unsetenv("KILN_ACT_F16");
    CHECK(split.out.at("y").bytes == half.out.at("y").bytes);
}

TEST_CASE("a concat keeps f32 storage when anything but a linear reads it", "[op:f16act]") {
    ir::Graph g;
    auto x = g.input("x", {4, 8});
    auto a = g.linear(x, g.weight("w1", {8, 8}), {});
    auto c = g.concat(x, a, -1);
    g.output(g.linear(c, g.weight("w2", {8, 16}), {}), "y");
    g.output(g.silu(c), "z");  // c read by silu: c, and so a, stay f32
    CHECK(ir::store_f16(g) == 0);
    ir::Graph g2;
    auto x2 = g2.input("x", {4, 8});
    auto a2 = g2.linear(x2, g2.weight("w1", {8, 8}), {});
    auto c2 = g2.concat(x2, a2, -1);
    auto d2 = g2.concat(c2, a2, -1);  // a concat of a concat: all three f16
    g2.output(g2.linear(d2, g2.weight("w2", {8, 24}), {}), "y");
    CHECK(ir::store_f16(g2) == 3);
    CHECK(g2.value(a2).dtype == DType::f16);
    CHECK(g2.value(c2).dtype == DType::f16);
    CHECK(g2.value(d2).dtype == DType::f16);
    CHECK(g2.value(x2).dtype == DType::f32);  // an input: never
}
