// slice along any axis (and split/chunk built on it): pure data movement, exact.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("slice matches the CPU reference", "[op:slice]") {
    auto [s, axis, start, len] =
        GENERATE(std::make_tuple(Shape{1}, 0, 0, 1), std::make_tuple(Shape{3, 13}, 1, 5, 7),
                 std::make_tuple(Shape{2, 13, 127}, 2, 1, 126), std::make_tuple(Shape{4, 3, 5}, 0, 3, 1),
                 std::make_tuple(Shape{2, 6, 5, 7}, -3, 2, 3));
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.slice(x, axis, start, len), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 110)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("chunk halves recombine through concat", "[op:slice]") {
    ir::Graph g;
    auto x = g.input("x", {2, 6, 13});
    auto parts = g.chunk(x, 1, 3);
    g.output(g.concat(parts[2], parts[0], 1), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor({2, 6, 13}, 111)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("slice rejects out-of-range bounds", "[op:slice][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 5});
    REQUIRE_THROWS_WITH(g.slice(x, 1, 3, 3), Catch::Contains("slice") && Catch::Contains("[2, 5]"));
    REQUIRE_THROWS_WITH(g.slice(x, 1, -1, 2), Catch::Contains("slice"));
    REQUIRE_THROWS_WITH(g.slice(x, 2, 0, 1), Catch::Contains("slice") && Catch::Contains("out of range"));
}
