// scale: alpha * x + beta vs the CPU reference. One f32 multiply-add: the GPU may fuse it, so
// results differ by at most 1 ulp of |y| <= 2: max-abs 1e-6.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("scale matches the CPU reference", "[op:scale]") {
    Shape s = GENERATE(Shape{1}, Shape{3}, Shape{13, 127}, Shape{2, 3, 257});
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.scale(x, 1.5f, -0.25f), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 1)}});
    CHECK(test::max_err(r.gpu, r.cpu) <= 1e-6);
}

TEST_CASE("scale rejects a non-f32 input", "[op:scale][bad]") {
    ir::Graph g;
    auto x = g.input("ids", {4}, DType::i32);
    REQUIRE_THROWS_WITH(g.scale(x, 2.f), Catch::Contains("scale") && Catch::Contains("f32"));
}
