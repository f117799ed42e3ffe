// layer_norm over the last dim, with and without weight/bias. x in [-1, 1] + 3 (a mean to remove).
// f32 sums over <= 5000 terms in 64 partials: mean/var relative error ~100 * 2^-24 ~ 6e-6, output
// |y| <= ~2 * |w| + |b| <= 5: max-abs 3e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("layer_norm matches the CPU reference", "[op:layer_norm]") {
    Shape s = GENERATE(Shape{1, 1}, Shape{3, 13}, Shape{2, 7, 127}, Shape{4, 1152}, Shape{1, 5000});
    bool affine = GENERATE(false, true);
    int64_t C = s.back();
    ir::Graph g;
    auto x = g.input("x", s);
    ir::Val w, b;
    if (affine) w = g.weight("w", {C}), b = g.weight("b", {C});
    g.output(g.layer_norm(x, w, b, 1e-6f), "y");
    std::map<std::string, Tensor> ws;
    if (affine) ws = {{"w", test::random_tensor({C}, 6, -1.5f, 1.5f)}, {"b", test::random_tensor({C}, 7)}};
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 5, 2.f, 4.f)}}, ws);
    CHECK(test::max_err(r.gpu, r.cpu) <= 3e-5);
}

TEST_CASE("layer_norm rejects mismatched weight", "[op:layer_norm][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 8});
    auto w = g.weight("w", {7});
    REQUIRE_THROWS_WITH(g.layer_norm(x, w, {}, 1e-5f),
                        Catch::Contains("layer_norm") && Catch::Contains("[7]") && Catch::Contains("[2, 8]"));
    REQUIRE_THROWS_WITH(g.layer_norm(x, {}, {}, -1.f), Catch::Contains("layer_norm") && Catch::Contains("eps"));
}
