// matmul [B, M, K] @ [B|1, K, N]. Same bound as linear: f32 accumulation over K terms of |a b| <= 1,
// max-abs K^2 2^-24 / 4 (x2 margin), floor 1e-6; rel L2 1e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("matmul matches the CPU reference", "[op:matmul]") {
    auto [sa, sb] = GENERATE(
        std::make_pair(Shape{1, 1, 1}, Shape{1, 1, 1}), std::make_pair(Shape{1, 3, 13}, Shape{1, 13, 3}),
        std::make_pair(Shape{2, 13, 127}, Shape{2, 127, 67}), std::make_pair(Shape{3, 65, 31}, Shape{1, 31, 129}),
        std::make_pair(Shape{2, 64, 64}, Shape{2, 64, 64}),
        std::make_pair(Shape{2, 67, 36}, Shape{1, 36, 132}),  // 4-vector variant, edges
        std::make_pair(Shape{1, 5, 8}, Shape{1, 8, 4}), std::make_pair(Shape{2, 3, 12}, Shape{2, 12, 6}));
    CAPTURE(shape_str(sa), shape_str(sb));
    int64_t K = sa[2];
    ir::Graph g;
    auto a = g.input("a", sa);
    auto b = g.input("b", sb);
    g.output(g.matmul(a, b), "y");
    auto r = test::run_op(g, {{"a", test::random_tensor(sa, 30)}, {"b", test::random_tensor(sb, 31)}});
    CHECK(test::max_err(r.gpu, r.cpu) <= std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("matmul rejects mismatched shapes", "[op:matmul][bad]") {
    ir::Graph g;
    auto a = g.input("a", {2, 3, 4});
    auto b = g.input("b", {3, 4, 5});
    REQUIRE_THROWS_WITH(g.matmul(a, b),
                        Catch::Contains("matmul") && Catch::Contains("[2, 3, 4]") && Catch::Contains("[3, 4, 5]"));
}
