// softmax over the last dim, cols 1..5000, x in [-5, 5]. Per element: exp error 3 + 2|x - max| <= 23 ulp
// (Vulkan spec) ~1.4e-6, the row sum over <= 5000 terms in 64 partial sums (~80 terms each) plus a
// tree: ~90 * 2^-24 ~ 5.4e-6 relative. Max relative error per element 1e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("softmax matches the CPU reference", "[op:softmax]") {
    Shape s = GENERATE(Shape{1, 1}, Shape{3, 13}, Shape{2, 7, 127}, Shape{5, 1000}, Shape{2, 5000},
                       Shape{66000, 3});  // > 65535 rows: workgroups spill into y
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.softmax(x), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 4, -5.f, 5.f)}});
    CHECK(test::max_rel_err(r.gpu, r.cpu, 1e-30) <= 1e-5);
}

TEST_CASE("softmax rejects a non-f32 input", "[op:softmax][bad]") {
    ir::Graph g;
    auto x = g.input("ids", {4}, DType::i32);
    REQUIRE_THROWS_WITH(g.softmax(x), Catch::Contains("softmax"));
}
