// modulate x (1 + scale) + shift: two f32 ops per element, possibly fused on the GPU: <= 2 ulp of
// |y| <= 5: max-abs 2e-6.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("modulate matches the CPU reference", "[op:modulate]") {
    Shape s = GENERATE(Shape{1, 1, 1}, Shape{1, 3, 13}, Shape{2, 13, 127}, Shape{3, 7, 64});
    ir::Graph g;
    Shape sb{s[0], s[2]};
    auto x = g.input("x", s), sh = g.input("shift", sb), sc = g.input("scale", sb);
    g.output(g.modulate(x, sh, sc), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 50, -2.f, 2.f)},
                              {"shift", test::random_tensor(sb, 51)},
                              {"scale", test::random_tensor(sb, 52)}});
    CHECK(test::max_err(r.gpu, r.cpu) <= 2e-6);
}

TEST_CASE("modulate rejects mismatched shift/scale", "[op:modulate][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 3, 4}), sh = g.input("shift", {2, 5}), sc = g.input("scale", {2, 4});
    REQUIRE_THROWS_WITH(g.modulate(x, sh, sc),
                        Catch::Contains("modulate") && Catch::Contains("[2, 5]") && Catch::Contains("[2, 3, 4]"));
}
