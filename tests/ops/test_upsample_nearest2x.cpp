// upsample_nearest2x: pure data movement, exact.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("upsample_nearest2x matches the CPU reference", "[op:upsample_nearest2x]") {
    Shape s = GENERATE(Shape{1, 1, 1, 1}, Shape{1, 3, 13, 7}, Shape{2, 5, 17, 33});
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.upsample_nearest2x(x), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 80)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("upsample_nearest2x rejects a non-4D input", "[op:upsample_nearest2x][bad]") {
    ir::Graph g;
    auto x = g.input("x", {3, 4, 5});
    REQUIRE_THROWS_WITH(g.upsample_nearest2x(x), Catch::Contains("upsample_nearest2x") && Catch::Contains("[3, 4, 5]"));
}
