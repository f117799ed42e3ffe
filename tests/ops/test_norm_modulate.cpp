// norm_modulate = modulate(layer_norm(x) without affine, shift, scale), made by ir::fuse from the pair. The
// fused shader normalises with layer_norm.comp's code (layer_norm.glsl) and modulates with modulate.comp's
// expression, so fused and unfused Vulkan agree bitwise. Against the CPU: layer_norm's 3e-5 (test_layer_norm)
// times |1 + scale| <= 2, plus modulate's 2e-6: max-abs 7e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("norm_modulate equals layer_norm then modulate, bitwise", "[op:norm_modulate]") {
    Shape s = GENERATE(Shape{1, 1, 1}, Shape{1, 3, 13}, Shape{2, 13, 127}, Shape{3, 7, 64}, Shape{2, 5, 1152});
    CAPTURE(shape_str(s));
    Shape sb{s[0], s[2]};
    std::map<std::string, Tensor> in{{"x", test::random_tensor(s, 60, 2.f, 4.f)},
                                     {"shift", test::random_tensor(sb, 61)},
                                     {"scale", test::random_tensor(sb, 62)}};
    ir::Graph g;
    auto x = g.input("x", s), sh = g.input("shift", sb), sc = g.input("scale", sb);
    g.output(g.modulate(g.layer_norm(x, {}, {}, 1e-6f), sh, sc), "y");
    auto plain = test::run_vk(g, in, {}, exec::Mode::full, "0");
    auto fused = test::run_vk(g, in, {}, exec::Mode::full, "1");
    CHECK(fused.c.nodes_fused == 1);
    CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run - 1);
    CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);

    ir::Graph gf;
    auto xf = gf.input("x", s), shf = gf.input("shift", sb), scf = gf.input("scale", sb);
    gf.output(gf.norm_modulate(xf, shf, scf, 1e-6f), "y");
    auto r = test::run_op(gf, in);
    CHECK(test::max_err(r.gpu, r.cpu) <= 7e-5);
    CHECK(r.gpu == fused.out.at("y").to_f32());
    CHECK(r.cpu == cpu::run(g, in, {}).at("y").to_f32());
}

TEST_CASE("a norm with affine weights, or read twice, is not fused", "[op:norm_modulate]") {
    Shape s{2, 5, 16}, sb{2, 16};
    ir::Graph g;
    auto x = g.input("x", s), sh = g.input("shift", sb), sc = g.input("scale", sb);
    auto ln = g.layer_norm(x, {}, {}, 1e-6f);
    g.output(g.modulate(ln, sh, sc), "y");
    g.output(g.modulate(ln, sc, sh), "z");  // SD3.5's dual blocks modulate one norm twice
    auto w = g.weight("w", {16});
    g.output(g.modulate(g.layer_norm(x, w, {}, 1e-6f), sh, sc), "u");
    std::map<std::string, Tensor> in{
        {"x", test::random_tensor(s, 1)}, {"shift", test::random_tensor(sb, 2)}, {"scale", test::random_tensor(sb, 3)}};
    auto fused = test::run_vk(g, in, {{"w", test::random_tensor({16}, 4)}}, exec::Mode::full, "1");
    CHECK(fused.c.nodes_fused == 0);
}

TEST_CASE("norm_modulate rejects mismatched shapes", "[op:norm_modulate][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 3, 8}), sh = g.input("shift", {2, 7}), sc = g.input("scale", {2, 8});
    REQUIRE_THROWS_WITH(g.norm_modulate(x, sh, sc, 1e-6f),
                        Catch::Contains("norm_modulate") && Catch::Contains("[2, 7]"));
    REQUIRE_THROWS_WITH(g.norm_modulate(g.input("x2", {2, 8}), sc, sc, 1e-6f),
                        Catch::Contains("norm_modulate") && Catch::Contains("[B, N, C]"));
    REQUIRE_THROWS_WITH(g.norm_modulate(x, sc, sc, -1.f), Catch::Contains("eps"));
}
