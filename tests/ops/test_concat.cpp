// concat of two inputs along any axis: pure data movement, exact.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("concat matches the CPU reference", "[op:concat]") {
    auto [sa, sb, axis] = GENERATE(
        std::make_tuple(Shape{1}, Shape{1}, 0), std::make_tuple(Shape{3, 13}, Shape{3, 2}, 1),
        std::make_tuple(Shape{2, 13, 127}, Shape{2, 3, 127}, 1), std::make_tuple(Shape{2, 5, 7}, Shape{1, 5, 7}, 0),
        std::make_tuple(Shape{2, 3, 5, 7}, Shape{2, 3, 5, 1}, -1));
    ir::Graph g;
    auto a = g.input("a", sa), b = g.input("b", sb);
    g.output(g.concat(a, b, axis), "y");
    auto r = test::run_op(g, {{"a", test::random_tensor(sa, 100)}, {"b", test::random_tensor(sb, 101)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("concat rejects mismatched shapes", "[op:concat][bad]") {
    ir::Graph g;
    auto a = g.input("a", {2, 3}), b = g.input("b", {3, 3}), c = g.input("c", {2, 3, 1});
    REQUIRE_THROWS_WITH(g.concat(a, b, 1),
                        Catch::Contains("concat") && Catch::Contains("[2, 3]") && Catch::Contains("[3, 3]"));
    REQUIRE_THROWS_WITH(g.concat(a, c, 0), Catch::Contains("concat") && Catch::Contains("[2, 3, 1]"));
    REQUIRE_THROWS_WITH(g.concat(a, a, 2), Catch::Contains("concat") && Catch::Contains("out of range"));
}
