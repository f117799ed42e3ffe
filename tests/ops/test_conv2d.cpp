// conv2d NCHW with W stored f32/f16/bf16 (CPU gets the same rounded W). f32 accumulation over
// K = C kh kw terms of |x w| <= 1: max-abs K^2 2^-24 / 4 (x2 margin), floor 1e-6; rel L2 1e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
struct ConvCase {
    Shape x;
    int64_t O, kh, kw;
    ir::Conv2dAttrs a;
};
}  // namespace

TEST_CASE("conv2d matches the CPU reference", "[op:conv2d]") {
    ConvCase c =
        GENERATE(ConvCase{{1, 1, 1, 1}, 1, 1, 1, {}}, ConvCase{{1, 3, 13, 13}, 5, 3, 3, {1, 1, 1, 1}},
                 ConvCase{{2, 4, 9, 11}, 7, 3, 3, {2, 2, 1, 1}}, ConvCase{{1, 5, 8, 8}, 6, 2, 2, {2, 2, 0, 0}},
                 ConvCase{{1, 3, 7, 17}, 3, 1, 5, {1, 3, 0, 2}}, ConvCase{{2, 16, 6, 5}, 9, 1, 1, {}},
                 ConvCase{{1, 2, 6, 19}, 3, 2, 2, {1, 1, 1, 1}}, ConvCase{{1, 3, 5, 9}, 2, 3, 1, {1, 1, 1, 0}});
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    bool bias = GENERATE(false, true);
    CAPTURE(shape_str(c.x), c.O, c.kh, c.kw, dtype_name(wt), bias);
    Shape sw{c.O, c.x[1], c.kh, c.kw};
    ir::Graph g;
    auto x = g.input("x", c.x);
    auto w = g.weight("w", sw, wt);
    ir::Val b = bias ? g.weight("b", {c.O}) : ir::Val{};
    g.output(g.conv2d(x, w, b, c.a), "y");
    std::map<std::string, Tensor> ws{{"w", test::random_weight(sw, wt, 71)}};
    if (bias) ws["b"] = test::random_tensor({c.O}, 72);
    auto r = test::run_op(g, {{"x", test::random_tensor(c.x, 70)}}, ws);
    double K = (double)(c.x[1] * c.kh * c.kw);
    CHECK(test::max_err(r.gpu, r.cpu) <= std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

// Grouped (depthwise 3x3 and 5x5 as Sana's GLUMBConv and DC-AE's multiscale attention, grouped 1x1 with 3 channels
// per group, a strided one): K = (C / groups) kh kw terms, the same bound as above.
TEST_CASE("grouped conv2d matches the CPU reference", "[op:conv2d][groups]") {
    struct G {
        ConvCase c;
        int groups;
    };
    G t = GENERATE(G{{{1, 6, 7, 9}, 6, 3, 3, {1, 1, 1, 1}}, 6}, G{{{2, 4, 5, 5}, 8, 5, 5, {1, 1, 2, 2}}, 4},
                   G{{{1, 12, 4, 6}, 12, 1, 1, {}}, 4}, G{{{1, 6, 9, 8}, 9, 3, 3, {2, 2, 1, 1}}, 3});
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    bool bias = GENERATE(false, true);
    ConvCase c = t.c;
    c.a.groups = t.groups;
    CAPTURE(shape_str(c.x), c.O, c.kh, c.kw, t.groups, dtype_name(wt), bias);
    Shape sw{c.O, c.x[1] / t.groups, c.kh, c.kw};
    ir::Graph g;
    auto x = g.input("x", c.x);
    auto w = g.weight("w", sw, wt);
    ir::Val b = bias ? g.weight("b", {c.O}) : ir::Val{};
    g.output(g.conv2d(x, w, b, c.a), "y");
    std::map<std::string, Tensor> ws{{"w", test::random_weight(sw, wt, 73)}};
    if (bias) ws["b"] = test::random_tensor({c.O}, 74);
    auto r = test::run_op(g, {{"x", test::random_tensor(c.x, 75)}}, ws);
    double K = (double)(sw[1] * c.kh * c.kw);
    CHECK(test::max_err(r.gpu, r.cpu) <= std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("conv2d rejects bad shapes and attributes", "[op:conv2d][bad]") {
    ir::Graph g;
    auto x = g.input("x", {1, 3, 8, 8});
    auto w = g.weight("w", {4, 2, 3, 3});
    REQUIRE_THROWS_WITH(g.conv2d(x, w, {}, {}), Catch::Contains("conv2d") && Catch::Contains("[1, 3, 8, 8]") &&
                                                    Catch::Contains("[4, 2, 3, 3]"));
    auto w2 = g.weight("w2", {4, 3, 3, 3});
    REQUIRE_THROWS_WITH(g.conv2d(x, w2, {}, {0, 1, 0, 0}), Catch::Contains("conv2d") && Catch::Contains("stride"));
    ir::Conv2dAttrs grouped;
    grouped.groups = 3;
    auto wg = g.weight("wg", {4, 1, 3, 3});  // O = 4 is not a multiple of 3 groups
    REQUIRE_THROWS_WITH(g.conv2d(x, wg, {}, grouped), Catch::Contains("conv2d") && Catch::Contains("groups 3"));
    auto w3 = g.weight("w3", {4, 3, 11, 3});
    REQUIRE_THROWS_WITH(g.conv2d(x, w3, {}, {}), Catch::Contains("conv2d") && Catch::Contains("larger"));
}

TEST_CASE("conv2d through texel buffers equals the storage-buffer shader bitwise", "[op:conv2d][tex]") {
    if (!test::op_ctx().info().texel_formats) {
        WARN("skipped: no uniform texel buffers of the needed formats on this device");
        return;
    }
    ConvCase c =
        GENERATE(ConvCase{{1, 1, 1, 1}, 1, 1, 1, {}}, ConvCase{{1, 3, 13, 13}, 5, 3, 3, {1, 1, 1, 1}},
                 ConvCase{{2, 4, 9, 11}, 7, 3, 3, {2, 2, 1, 1}}, ConvCase{{1, 3, 7, 17}, 3, 1, 5, {1, 3, 0, 2}},
                 ConvCase{{2, 16, 6, 5}, 9, 1, 1, {}}, ConvCase{{1, 8, 20, 20}, 12, 3, 3, {1, 1, 1, 1}});
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    CAPTURE(shape_str(c.x), c.O, c.kh, c.kw, dtype_name(wt));
    Shape sw{c.O, c.x[1], c.kh, c.kw};
    ir::Graph g;
    g.output(g.conv2d(g.input("x", c.x), g.weight("w", sw, wt), g.weight("b", {c.O}), c.a), "y");
    std::map<std::string, Tensor> in{{"x", test::random_tensor(c.x, 73)}};
    std::map<std::string, Tensor> ws{{"w", test::random_weight(sw, wt, 74)}, {"b", test::random_tensor({c.O}, 75)}};
    const auto buf = test::run_vk_env("KILN_CONV2D", "buf", g, in, ws),
               tex = test::run_vk_env("KILN_CONV2D", "tex", g, in, ws);
    CHECK(buf.c.texel_dispatches == 0);
    CHECK(tex.c.texel_dispatches == 1);
    CHECK(tex.out.at("y").bytes == buf.out.at("y").bytes);
}
