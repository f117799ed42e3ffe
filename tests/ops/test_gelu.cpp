// gelu, exact and tanh, on x in [-6, 6]. Exact: erf to 1.5e-7 absolute (A-S 7.1.26) -> 0.5|x|1.5e-7
// <= 4.5e-7, plus a few ulp of |y| <= 6 (~5e-7 each): max-abs 2e-6. Tanh: exp ~1 ulp -> same bound.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("gelu matches the CPU reference", "[op:gelu]") {
    Shape s = GENERATE(Shape{1}, Shape{3}, Shape{13, 127}, Shape{2, 3, 301});
    bool tanh = GENERATE(false, true);
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.gelu(x, tanh), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 3, -6.f, 6.f)}});
    CHECK(test::max_err(r.gpu, r.cpu) <= 2e-6);
}

TEST_CASE("gelu rejects a non-f32 input", "[op:gelu][bad]") {
    ir::Graph g;
    auto x = g.input("ids", {4}, DType::i32);
    REQUIRE_THROWS_WITH(g.gelu(x, false), Catch::Contains("gelu") && Catch::Contains("f32"));
}
