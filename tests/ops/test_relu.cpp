// relu: a select, exact on both sides; tanh: exp ~1 ulp (mathf.glsl) and the division 2.5 ulp (Vulkan spec) give
// ~5 ulp of |y| <= 1 = 3e-7, so max-abs 1e-6; x = +-60 checks that exp(-2|x|) does not overflow.
#include <cmath>

#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("relu matches the CPU reference", "[op:relu]") {
    Shape s = GENERATE(Shape{1}, Shape{3}, Shape{13, 127}, Shape{2, 5, 131});
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.relu(x), "y");
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 5, -4.f, 4.f)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("tanh matches the CPU reference", "[op:tanh]") {
    Shape s = GENERATE(Shape{1}, Shape{13, 127}, Shape{2, 5, 131});
    ir::Graph g;
    auto x = g.input("x", s);
    g.output(g.tanh(x), "y");
    Tensor t = test::random_tensor(s, 6, -6.f, 6.f);
    if (s.size() > 1) t.data<float>()[0] = -60.f, t.data<float>()[1] = 60.f;
    auto r = test::run_op(g, {{"x", t}});
    CHECK(test::max_err(r.gpu, r.cpu) <= 1e-6);
    if (s.size() > 1) CHECK((r.gpu[0] == -1.f && r.gpu[1] == 1.f));
}

TEST_CASE("relu and tanh reject a non-f32 input", "[op:relu][op:tanh][bad]") {
    ir::Graph g;
    auto x = g.input("ids", {4}, DType::i32);
    REQUIRE_THROWS_WITH(g.relu(x), Catch::Contains("relu") && Catch::Contains("f32"));
    REQUIRE_THROWS_WITH(g.tanh(x), Catch::Contains("tanh") && Catch::Contains("f32"));
}
