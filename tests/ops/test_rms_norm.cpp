// rms_norm over the last dim, with and without weight. Sum of squares over <= 5000 terms in 64
// partials: ~100 * 2^-24 relative, halved by the sqrt; |y| <= ~2 * 1.5: max-abs 1e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("rms_norm matches the CPU reference", "[op:rms_norm]") {
    Shape s = GENERATE(Shape{1, 1}, Shape{3, 13}, Shape{2, 7, 127}, Shape{4, 1152}, Shape{1, 5000});
    bool weighted = GENERATE(false, true);
    int64_t C = s.back();
    ir::Graph g;
    auto x = g.input("x", s);
    ir::Val w;
    if (weighted) w = g.weight("w", {C});
    g.output(g.rms_norm(x, w, 1e-6f), "y");
    std::map<std::string, Tensor> ws;
    if (weighted) ws = {{"w", test::random_tensor({C}, 9, -1.5f, 1.5f)}};
    auto r = test::run_op(g, {{"x", test::random_tensor(s, 8)}}, ws);
    CHECK(test::max_err(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("rms_norm rejects mismatched weight", "[op:rms_norm][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 8});
    auto w = g.weight("w", {9});
    REQUIRE_THROWS_WITH(g.rms_norm(x, w, 1e-5f), Catch::Contains("rms_norm") && Catch::Contains("[9]"));
}
