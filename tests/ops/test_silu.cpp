// silu on x in [-8, 8] (and -60, where exp(-x) overflows without care). exp ~1 ulp (mathf.glsl), the
// division 2.5 ulp (Vulkan spec): ~5 ulp of |y| <= 8 = 2.4e-6; max-abs 1e-5 leaves margin.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("silu matches the CPU reference", "[op:silu]") {
    Shape s = GENERATE(Shape{1}, Shape{3}, Shape{13, 127}, Shape{2, 5, 131});
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.silu(x), "y");
    Tensor t = test::random_tensor(s, 2, -8.f, 8.f);
    t.data<float>()[0] = s.size() > 1 ? -60.f : t.data<float>()[0];
    auto r = test::run_op(g, {{"x", t}});
    CHECK(test::max_err(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("silu rejects a non-f32 input", "[op:silu][bad]") {
    ir::Graph g;
    auto x = g.input("ids", {4}, DType::i32);
    REQUIRE_THROWS_WITH(g.silu(x), Catch::Contains("silu") && Catch::Contains("f32"));
}
