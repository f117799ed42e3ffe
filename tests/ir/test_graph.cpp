// The IR builder: shape inference, clear errors naming op and shapes, and the compositions.
#include <catch2/catch.hpp>

#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"
#include "runtime/ir/fuse.h"
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

TEST_CASE("fuse folds activations, norms and linears of one input, keeping value ids and regions", "[ir][fuse]") {
    ir::Graph g;
    auto x = g.input("x", {2, 4, 8}), sh = g.input("shift", {2, 8}), sc = g.input("scale", {2, 8});
    auto w = [&](const std::string& n, int64_t N) { return g.weight(n, {N, 8}); };
    ir::Val y = x;
    for (int i = 0; i < 2; ++i) {
        g.begin_region("block", i);
        auto n = g.modulate(g.layer_norm(y, {}, {}, 1e-6f), sh, sc);  // -> norm_modulate
        auto q = g.linear(n, w("q" + std::to_string(i), 8), {});      // q, k, v -> linear_multi
        auto k = g.linear(n, w("k" + std::to_string(i), 8), {});
        auto v = g.linear(n, w("v" + std::to_string(i), 8), {});
        auto a = g.attention(q, k, v, 2);
        auto h = g.gelu(g.linear(a, w("f" + std::to_string(i), 8), {}), true);  // -> linear with act
        y = g.add(y, h);
        g.end_region();
    }
    g.output(y, "y");
    ir::FuseStats st;
    ir::Graph f = ir::fuse(g, &st);
    CHECK(st.linear_act == 2);
    CHECK(st.norm_modulate == 2);
    CHECK(st.linear_multi == 2);
    CHECK(st.linears_grouped == 6);
    CHECK(st.nodes_removed == 8);
    REQUIRE(f.nodes().size() == g.nodes().size() - 8);
    CHECK(f.values().size() == g.values().size());
    REQUIRE(f.regions().size() == 2);
    CHECK(f.regions()[0].first == 0);
    CHECK(f.regions()[0].end == f.regions()[1].first);
    CHECK(f.regions()[1].end == (int)f.nodes().size());
    std::vector<ir::Op> ops;
    for (int n = f.regions()[0].first; n < f.regions()[0].end; ++n) ops.push_back(f.nodes()[(size_t)n].op);
    CHECK(ops == std::vector<ir::Op>{ir::Op::norm_modulate, ir::Op::linear_multi, ir::Op::attention, ir::Op::linear,
                                     ir::Op::add});
    for (size_t n = 0; n < f.nodes().size(); ++n)
        for (int o : ir::node_outputs(f.nodes()[n]))
            if (o >= 0) CHECK(f.value(o).producer == (int)n);
    const ir::Node& lm = f.nodes()[1];
    CHECK(lm.extra_out.size() == 3);
    CHECK(lm.extra_out[2] == -1);
    CHECK(std::get<ir::LinearAttrs>(f.nodes()[3].attrs).act == ir::Act::gelu_tanh);
    CHECK(f.outputs() == g.outputs());
}
