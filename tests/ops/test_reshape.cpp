// reshape is a view (no shader): a reshape between two ops must read the same memory, exactly.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("reshape views its input", "[op:reshape]") {
    ir::Graph g;
    auto x = g.input("x", {2, 3, 13});
    auto t = g.reshape(g.scale(x, 2.f), {6, -1});
    g.output(g.scale(t, 0.5f), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor({2, 3, 13}, 120)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("reshape rejects element-count changes", "[op:reshape][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 3});
    REQUIRE_THROWS_WITH(g.reshape(x, {4, 2}), Catch::Contains("reshape") && Catch::Contains("[2, 3]"));
    REQUIRE_THROWS_WITH(g.reshape(x, {-1, -1}), Catch::Contains("reshape"));
}
