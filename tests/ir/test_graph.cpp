// The IR builder: shape inference, clear errors naming op and shapes, and the compositions.
#include <catch2/catch.hpp>

#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"
#include "runtime/ir/graph.h"
#include "tests/support/test_support.h"

using namespace kiln;

TEST_CASE("shape inference and errors that name the op and the shapes", "[ir]") {
    ir::Graph g;
    auto x = g.input("x", {2, 5, 8});
    auto w = g.weight("w", {16, 8}, DType::f16);
    CHECK(g.shape(g.linear(x, w, {})) == Shape{2, 5, 16});
    CHECK(g.shape(g.add(x, g.input("b", {1, 5, 1}))) == Shape{2, 5, 8});
    CHECK_THROWS_WITH(g.add(x, g.input("c", {3, 8})), Catch::Contains("add") && Catch::Contains("[2, 5, 8]"));
    CHECK_THROWS_WITH(g.linear(x, g.weight("w2", {16, 7}), {}),
                      Catch::Contains("linear") && Catch::Contains("[16, 7]"));
    CHECK_THROWS_WITH(g.attention(x, x, x, 3), Catch::Contains("heads"));
    CHECK_THROWS_WITH(g.reshape(x, {3, -1}), Catch::Contains("reshape"));
    CHECK_THROWS_WITH(g.slice(x, 2, 6, 4), Catch::Contains("out of range"));
    CHECK_THROWS_WITH(g.group_norm(g.input("img", {1, 6, 4, 4}), 4, {}, {}, 1e-5f), Catch::Contains("groups"));
    CHECK_THROWS_AS(g.input("bad", {2}, DType::bf16), Error);
    CHECK_THROWS_WITH(g.add(x, w), Catch::Contains("must be f32"));
}

TEST_CASE("patchify and unpatchify are inverse and lay features out as diffusers does", "[ir]") {
    ir::Graph g;
    auto x = g.input("x", {2, 3, 4, 6});
    auto p = g.patchify(x, 2);  // [2, 6, 12] features (c, py, px)
    CHECK(g.shape(p) == Shape{2, 6, 12});
    g.output(p, "p");
    Tensor in = test::random_tensor({2, 3, 4, 6}, 3);
    auto out = cpu::run(g, {{"x", in}}, [](const ir::Value&) { return Tensor(); });
    const float* src = in.data<float>();
    const float* pp = out["p"].data<float>();
    // token (i, j) of batch 1, feature (c=2, py=1, px=0) = x[1, 2, 2i+1, 2j]
    int i = 1, j = 2;
    CHECK(pp[(1 * 6 + i * 3 + j) * 12 + 2 * 4 + 1 * 2 + 0] == src[((1 * 3 + 2) * 4 + 2 * i + 1) * 6 + 2 * j]);
    // unpatchify (DiT's einsum nhwpqc->nchpwq) of a (py, px, c)-ordered token grid
    ir::Graph h;
    auto t = h.input("t", {1, 6, 12});
    h.output(h.unpatchify(t, 2, 3, 2, 3), "img");
    Tensor tin = test::random_tensor({1, 6, 12}, 4);
    auto img = cpu::run(h, {{"t", tin}}, [](const ir::Value&) { return Tensor(); })["img"];
    CHECK(img.shape == Shape{1, 3, 4, 6});
    // pixel (c=1, y=3, x=4) = token (h=1, w=2), feature (p=1, q=0, c=1)
    CHECK(img.data<float>()[(1 * 4 + 3) * 6 + 4] == tin.data<float>()[(1 * 3 + 2) * 12 + (1 * 2 + 0) * 3 + 1]);
}
