// div with numpy broadcasting. The CPU divides correctly rounded; Vulkan allows 2.5 ulp for f32 division, so
// the relative error per element is <= 2.5 * 2^-23 = 3e-7 (checked at 4e-7 against |y|). Denominators are kept
// in [0.5, 2] (away from 0) so the quotients are O(1).
#include <cmath>

#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("div matches the CPU reference", "[op:div]") {
    auto [sa, sb] = GENERATE(std::make_pair(Shape{1}, Shape{1}), std::make_pair(Shape{3, 13}, Shape{13}),
                             std::make_pair(Shape{2, 1, 127}, Shape{13, 1}), std::make_pair(Shape{1}, Shape{2, 3, 5}),
                             std::make_pair(Shape{2, 3, 1, 5, 1, 3}, Shape{3, 4, 1, 2, 1}));
    CAPTURE(shape_str(sa), shape_str(sb));
    ir::Graph g;
    auto a = g.input("a", sa), b = g.input("b", sb);
    g.output(g.div(a, b), "y");
    auto r = test::run_op(g, {{"a", test::random_tensor(sa, 140)}, {"b", test::random_tensor(sb, 141, 0.5f, 2.f)}});
    REQUIRE(r.gpu.size() == r.cpu.size());
    for (size_t i = 0; i < r.cpu.size(); ++i) REQUIRE(std::abs(r.gpu[i] - r.cpu[i]) <= 4e-7 * std::abs(r.cpu[i]));
}

TEST_CASE("div rejects shapes that do not broadcast", "[op:div][bad]") {
    ir::Graph g;
    auto a = g.input("a", {2, 3}), b = g.input("b", {4, 3});
    REQUIRE_THROWS_WITH(g.div(a, b), Catch::Contains("div") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 3]"));
}
