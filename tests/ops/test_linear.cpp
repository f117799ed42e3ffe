// linear y = x W^T + b with W stored f32/f16/bf16 (the CPU gets the same rounded W, so only the
// accumulation order differs). f32 accumulation over K terms: |err| <= K 2^-24 sum|x_k w_k| with
// E|x w| = 1/4 for U(-1, 1) -> max-abs K^2 2^-24 / 4 (x2 margin), floor 1e-6; with random signs the
// typical error is sqrt(K) 2^-24 relative -> rel L2 1e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("linear matches the CPU reference", "[op:linear]") {
    auto [sx, N] =
        GENERATE(std::make_pair(Shape{1, 1}, 1), std::make_pair(Shape{3, 13}, 3), std::make_pair(Shape{2, 13, 127}, 67),
                 std::make_pair(Shape{65, 128}, 129), std::make_pair(Shape{2, 70, 36}, 64),
                 std::make_pair(Shape{1, 300}, 77), std::make_pair(Shape{8, 20}, 130), std::make_pair(Shape{9, 13}, 5));
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    bool bias = GENERATE(false, true);
    int64_t K = sx.back();
    CAPTURE(shape_str(sx), N, dtype_name(wt), bias);
    ir::Graph g;
    auto x = g.input("x", sx);
    auto w = g.weight("w", {N, K}, wt);
    ir::Val b = bias ? g.weight("b", {N}) : ir::Val{};
    g.output(g.linear(x, w, b), "y");
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, wt, 21)}};
    if (bias) ws["b"] = test::random_tensor({N}, 22);
    auto r = test::run_op(g, {{"x", test::random_tensor(sx, 20)}}, ws);
    CHECK(test::max_err(r.gpu, r.cpu) <= std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("linear rejects bad shapes and dtypes", "[op:linear][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 8});
    auto w = g.weight("w", {4, 7});
    REQUIRE_THROWS_WITH(g.linear(x, w, {}),
                        Catch::Contains("linear") && Catch::Contains("[2, 8]") && Catch::Contains("[4, 7]"));
    auto w2 = g.weight("w2", {4, 8});
    auto b = g.weight("b", {5});
    REQUIRE_THROWS_WITH(g.linear(x, w2, b), Catch::Contains("linear") && Catch::Contains("[5]"));
    // An i32 "weight" passes the IR (inputs may be i32) but has no shader variant.
    auto wi = g.input("wi", {4, 8}, DType::i32);
    auto y = g.linear(x, wi, {});
    REQUIRE_THROWS_WITH(vk::lower(g, g.nodes()[(size_t)g.value(y).producer]),
                        Catch::Contains("linear") && Catch::Contains("i32"));
}
