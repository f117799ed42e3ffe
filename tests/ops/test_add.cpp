// add with numpy broadcasting (leading, inner and both-sided broadcast dims, rank up to 6). One f32
// operation per element, correctly rounded on both sides: exact.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("add matches the CPU reference", "[op:add]") {
    auto [sa, sb] = GENERATE(std::make_pair(Shape{1}, Shape{1}), std::make_pair(Shape{3, 13}, Shape{13}),
                             std::make_pair(Shape{2, 1, 127}, Shape{13, 1}), std::make_pair(Shape{1}, Shape{2, 3, 5}),
                             std::make_pair(Shape{2, 3, 1, 5, 1, 3}, Shape{3, 4, 1, 2, 1}));
    CAPTURE(shape_str(sa), shape_str(sb));
    ir::Graph g;
    auto a = g.input("a", sa), b = g.input("b", sb);
    g.output(g.add(a, b), "y");
    auto r = test::run_op(g, {{"a", test::random_tensor(sa, 130)}, {"b", test::random_tensor(sb, 131)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("add rejects shapes that do not broadcast", "[op:add][bad]") {
    ir::Graph g;
    auto a = g.input("a", {2, 3}), b = g.input("b", {4, 3});
    REQUIRE_THROWS_WITH(g.add(a, b), Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 3]"));
}
