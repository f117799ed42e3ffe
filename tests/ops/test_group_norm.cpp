// group_norm on [B, C, H, W] (and rank 3), with and without affine. x in [2, 4] (a mean to remove).
// Sums over C/G * HW <= 8192 terms in 256 partials of <= 32 + a tree: ~40 * 2^-24 relative on the
// moments; |y| <= ~2 * 1.5 + 1: max-abs 2e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("group_norm matches the CPU reference", "[op:group_norm]") {
    auto [s, groups] = GENERATE(std::make_pair(Shape{1, 1, 1, 1}, 1), std::make_pair(Shape{1, 3, 5, 7}, 3),
                                std::make_pair(Shape{2, 6, 13}, 2), std::make_pair(Shape{2, 32, 16, 16}, 4),
                                std::make_pair(Shape{1, 8, 33, 31}, 1));
    bool affine = GENERATE(false, true);
    int64_t C = s[1];
    ir::Graph g;
    auto x = g.input("x", s);
    ir::Val w, b;
    if (affine) w = g.weight("w", {C}), b = g.weight("b", {C});
    g.output(g.group_norm(x, groups, w, b, 1e-6f), "y");
    std::map<std::string, Tensor> ws;
    if (affine) ws = {{"w", test::random_tensor({C}, 11, -1.5f, 1.5f)}, {"b", test::random_tensor({C}, 12)}};
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 10, 2.f, 4.f)}}, ws);
    CHECK(test::max_err(r.gpu, r.cpu) <= 2e-5);
}

TEST_CASE("group_norm rejects groups that do not divide C", "[op:group_norm][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 6, 4, 4});
    REQUIRE_THROWS_WITH(g.group_norm(x, 4, {}, {}, 1e-5f),
                        Catch::Contains("group_norm") && Catch::Contains("[2, 6, 4, 4]"));
    REQUIRE_THROWS_WITH(g.group_norm(x, 0, {}, {}, 1e-5f), Catch::Contains("group_norm"));
}
