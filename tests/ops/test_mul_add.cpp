// mul_add = add(mul(a, b), c), made by ir::fuse (a gated residual: gate * h + x), and slices read in place
// (ir::InputView) by add/sub/mul/mul_add and as modulate's / norm_modulate's shift and scale.
// Arithmetic: the fused shader rounds the product to f32 before the sum (`precise`: no fused multiply-add), the
// two IEEE f32 operations mul.comp then add.comp perform, so fused equals unfused bitwise; the CPU reference does
// the same two f32 operations, so it agrees exactly too. A view reads the same f32 values the slice copied out:
// bitwise again.
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("mul_add equals mul then add, bitwise", "[op:mul_add]") {
    struct Case {
        Shape a, b, c;
    };
    const Case k =
        GENERATE(Case{{1}, {1}, {1}}, Case{{2, 1, 64}, {2, 13, 64}, {2, 13, 64}}, Case{{2, 13, 64}, {64}, {2, 13, 64}},
                 Case{{3, 7, 5}, {3, 7, 5}, {5}}, Case{{2, 1, 1152}, {2, 300, 1152}, {2, 300, 1152}});
    CAPTURE(shape_str(k.a), shape_str(k.b), shape_str(k.c));
    std::map<std::string, Tensor> in{{"a", test::random_tensor(k.a, 70, -3.f, 3.f)},
                                     {"b", test::random_tensor(k.b, 71, -3.f, 3.f)},
                                     {"c", test::random_tensor(k.c, 72, -3.f, 3.f)}};
    for (bool mul_first : {true, false}) {  // add(mul, c) and add(c, mul)
        ir::Graph g;
        auto a = g.input("a", k.a), b = g.input("b", k.b), c = g.input("c", k.c);
        auto m = g.mul(a, b);
        g.output(mul_first ? g.add(m, c) : g.add(c, m), "y");
        auto plain = test::run_vk(g, in, {}, exec::Mode::full, "0");
        auto fused = test::run_vk(g, in, {}, exec::Mode::full, "1");
        CHECK(fused.c.nodes_fused == 1);
        CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run - 1);
        CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
        CHECK(fused.out.at("y").to_f32() == cpu::run(g, in, {}).at("y").to_f32());
    }
    ir::Graph gf;
    gf.output(gf.mul_add(gf.input("a", k.a), gf.input("b", k.b), gf.input("c", k.c)), "y");
    auto r = test::run_op(gf, in);
    CHECK(r.gpu == r.cpu);
}

TEST_CASE("a product read twice is not fused into mul_add", "[op:mul_add]") {
    ir::Graph g;
    auto a = g.input("a", {4, 8}), b = g.input("b", {4, 8});
    auto m = g.mul(a, b);
    g.output(g.add(m, a), "y");
    g.output(m, "z");
    std::map<std::string, Tensor> in{{"a", test::random_tensor({4, 8}, 1)}, {"b", test::random_tensor({4, 8}, 2)}};
    CHECK(test::run_vk(g, in, {}, exec::Mode::full, "1").c.nodes_fused == 0);
}

// An adaLN-Zero block's use of its embedding: six chunks of [B, 6C], read as shift/scale, as a [B, 1, C] gate of a
// residual and by a plain add. With fusion no chunk is copied out.
TEST_CASE("slices of an embedding are read in place, bitwise", "[op:mul_add][view]") {
    const int64_t B = GENERATE(1, 2), N = 7, C = GENERATE(16, 33);
    CAPTURE(B, C);
    std::map<std::string, Tensor> in{{"x", test::random_tensor({B, N, C}, 80, 2.f, 4.f)},
                                     {"h", test::random_tensor({B, N, C}, 81)},
                                     {"e", test::random_tensor({B, 6 * C}, 82)}};
    ir::Graph g;
    auto x = g.input("x", {B, N, C}), h = g.input("h", {B, N, C}), e = g.input("e", {B, 6 * C});
    auto m = g.chunk(e, 1, 6);
    auto n1 = g.modulate(g.layer_norm(x, {}, {}, 1e-6f), m[0], m[1]);  // -> norm_modulate
    auto r = g.add(g.mul(g.reshape(m[2], {B, 1, C}), n1), x);          // -> mul_add, gate in place
    auto u = g.modulate(h, m[3], m[4]);                                // modulate, shift/scale in place
    g.output(g.add(g.sub(r, u), g.reshape(m[5], {B, 1, C})), "y");     // add of a slice
    auto plain = test::run_vk(g, in, {}, exec::Mode::full, "0");
    auto fused = test::run_vk(g, in, {}, exec::Mode::full, "1");
    INFO("dispatches: " << plain.c.dispatches_per_run << " unfused, " << fused.c.dispatches_per_run << " fused");
    // Removed: 6 slices (the reshapes were no dispatches), the layer_norm and the mul.
    CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run - 8);
    CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
    auto eager_fused = test::run_vk(g, in, {}, exec::Mode::eager, "all");
    CHECK(eager_fused.out.at("y").bytes == plain.out.at("y").bytes);

    // Over the binding limit ([B, N, C] over it, the embedding not) the ops are split into row chunks, which read
    // slices copied out: still bitwise. (C = 33: a batch of x would not start 16-byte aligned, which row chunks
    // with per-batch operands need.)
    if (C % 4 != 0) return;
    ::setenv("KILN_MAX_BINDING_RANGE", std::to_string(B * 6 * C * 4 + 16).c_str(), 1);
    auto split = test::run_vk(g, in, {}, exec::Mode::full, "1");
    ::unsetenv("KILN_MAX_BINDING_RANGE");
    CHECK(split.c.split_ops > 0);
    CHECK(split.out.at("y").bytes == plain.out.at("y").bytes);
}

TEST_CASE("a slice read twice, or not along the last axis, is copied out", "[op:mul_add][view]") {
    ir::Graph g;
    auto x = g.input("x", {2, 3, 8}), e = g.input("e", {2, 16}), f = g.input("f", {4, 8});
    auto s = g.slice(e, 1, 8, 8);
    g.output(g.modulate(x, s, s), "y");  // read twice by one node: one reader count per input
    g.output(g.add(g.slice(f, 0, 1, 2), g.input("z", {2, 8})), "w");  // axis 0
    std::map<std::string, Tensor> in{{"x", test::random_tensor({2, 3, 8}, 1)},
                                     {"e", test::random_tensor({2, 16}, 2)},
                                     {"f", test::random_tensor({4, 8}, 3)},
                                     {"z", test::random_tensor({2, 8}, 4)}};
    auto plain = test::run_vk(g, in, {}, exec::Mode::full, "0");
    auto fused = test::run_vk(g, in, {}, exec::Mode::full, "1");
    CHECK(fused.c.nodes_fused == 0);
    CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
}

TEST_CASE("mul_add rejects shapes that do not broadcast", "[op:mul_add][bad]") {
    ir::Graph g;
    auto a = g.input("a", {2, 3}), b = g.input("b", {2, 3}), c = g.input("c", {4, 3});
    REQUIRE_THROWS_WITH(g.mul_add(a, b, c), Catch::Contains("mul_add") && Catch::Contains("[4, 3]"));
}
