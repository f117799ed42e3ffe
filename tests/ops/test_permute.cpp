// permute: pure data movement, exact. Includes patchify/unpatchify compositions (rank 6).
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("permute matches the CPU reference", "[op:permute]") {
    auto [s, perm] =
        GENERATE(std::make_pair(Shape{1}, std::vector<int>{0}), std::make_pair(Shape{3, 13}, std::vector<int>{1, 0}),
                 std::make_pair(Shape{2, 3, 5, 7}, std::vector<int>{0, 2, 3, 1}),
                 std::make_pair(Shape{2, 3, 4, 2, 5, 3}, std::vector<int>{0, 5, 1, 3, 2, 4}),
                 std::make_pair(Shape{2, 13, 127}, std::vector<int>{2, 0, 1}));
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.permute(x, perm), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 90)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("patchify and unpatchify round-trip on the GPU", "[op:permute]") {
    ir::Graph g;
    Shape s{2, 3, 8, 6};
    auto x = g.input("x", s);
    auto p = g.patchify(x, 2);  // [2, 12, 12]
    g.output(g.unpatchify(g.scale(p, 1.f), 2, 3, 4, 3), "y");
    Tensor xt = test::random_tensor(s, 91);
    auto r = test::run_op(g, {{"x", xt}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("permute rejects bad permutations", "[op:permute][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 3, 4});
    REQUIRE_THROWS_WITH(g.permute(x, {0, 1}), Catch::Contains("permute") && Catch::Contains("[2, 3, 4]"));
    REQUIRE_THROWS_WITH(g.permute(x, {0, 1, 1}), Catch::Contains("permute") && Catch::Contains("repeated"));
    REQUIRE_THROWS_WITH(g.permute(x, {0, 1, 3}), Catch::Contains("permute") && Catch::Contains("out of range"));
}
