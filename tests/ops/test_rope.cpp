// rope (interleaved pairs) against the CPU reference (f64). Each output is a*c +- b*s in f32,
// possibly fused on the GPU: <= 2 ulp of |a c| + |b s| <= 4 for |x| <= 2, |cos|, |sin| <= 1: max-abs 2e-6.
#include <cmath>

#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("rope matches the CPU reference", "[op:rope]") {
    // {B, S, H, D}: a 1x1 case, odd sequence lengths, a head dim of 2, Flux's 128.
    auto [B, S, H, D] = GENERATE(std::array<int64_t, 4>{1, 1, 1, 2}, std::array<int64_t, 4>{2, 13, 3, 16},
                                 std::array<int64_t, 4>{1, 127, 2, 6}, std::array<int64_t, 4>{2, 7, 3, 128});
    ir::Graph g;
    Shape s{B, S, H * D};
    auto x = g.input("x", s), c = g.input("cos", {S, D / 2}), sn = g.input("sin", {S, D / 2});
    g.output(g.rope(x, c, sn), "y");
    auto [tc, ts] = test::rope_tables(S, D / 2);
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 60, -2.f, 2.f)}, {"cos", tc}, {"sin", ts}});
    CHECK(test::max_err(r.gpu, r.cpu) <= 2e-6);
}

TEST_CASE("rope rotates pairs as diffusers apply_rotary_emb", "[op:rope]") {
    // One pair by a quarter turn: (x0, x1) -> (-x1, x0).
    ir::Graph g;
    auto x = g.input("x", {1, 1, 2}), c = g.input("cos", {1, 1}), sn = g.input("sin", {1, 1});
    g.output(g.rope(x, c, sn), "y");
    Tensor tx(DType::f32, {1, 1, 2}), tc(DType::f32, {1, 1}), ts(DType::f32, {1, 1});
    tx.data<float>()[0] = 3.f, tx.data<float>()[1] = 5.f, tc.data<float>()[0] = 0.f, ts.data<float>()[0] = 1.f;
    auto r = test::run_op(g, {{"x", tx}, {"cos", tc}, {"sin", ts}});
    CHECK(r.cpu == std::vector<float>{-5.f, 3.f});
    CHECK(r.gpu == std::vector<float>{-5.f, 3.f});
}

TEST_CASE("rope rejects tables that do not fit x", "[op:rope][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 5, 12});
    auto c = g.input("cos", {4, 3}), s = g.input("sin", {4, 3});
    REQUIRE_THROWS_WITH(g.rope(x, c, s),
                        Catch::Contains("rope") && Catch::Contains("[4, 3]") && Catch::Contains("[2, 5, 12]"));
    auto c5 = g.input("cos5", {5, 5}), s5 = g.input("sin5", {5, 5});  // head dim 10 does not divide 12
    REQUIRE_THROWS_WITH(g.rope(x, c5, s5), Catch::Contains("rope") && Catch::Contains("divide"));
}
