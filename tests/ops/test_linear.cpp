// linear y = x W^T + b with W stored f32/f16/bf16 (the CPU gets the same rounded W, so only the
// accumulation order differs). f32 accumulation over K terms: |err| <= K 2^-24 sum|x_k w_k| with
// E|x w| = 1/4 for U(-1, 1) -> max-abs K^2 2^-24 / 4 (x2 margin), floor 1e-6; with random signs the
// typical error is sqrt(K) 2^-24 relative -> rel L2 1e-5.
#include <tuple>

#include "runtime/core/quant.h"
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

// Quantized W (ggml blocks, dequantized in the shader). With x = identity rows the output is W's
// dequantized values themselves (one product 1 * w, the rest + 0): they must equal kiln::dequantize()
// exactly (bitwise but for the sign of zero, which the sum makes +0). With random x, only f32 accumulation
// order differs from the f64 CPU reference, as above (quantized |w| <= 1 + one step: the same bounds hold).
TEST_CASE("linear with quantized weights matches the CPU reference", "[op:linear][quant]") {
    DType wt = GENERATE(DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k,
                        DType::q4_k, DType::q5_k, DType::q6_k);
    const int64_t B = dtype_block(wt);
    auto [M, N, K] = GENERATE_COPY(std::make_tuple(1, 3, B), std::make_tuple(5, 13, 2 * B),
                                   std::make_tuple(70, 127, 3 * B), std::make_tuple(9, 130, B));
    bool bias = GENERATE(false, true);
    CAPTURE(M, N, K, dtype_name(wt), bias);
    Tensor w = test::random_weight({N, K}, wt, 31);
    {
        INFO("identity rows extract W");
        ir::Graph g;
        auto x = g.input("x", {K, K});
        g.output(g.linear(x, g.weight("w", {N, K}, wt), {}), "y");
        Tensor eye(DType::f32, {K, K});
        for (int64_t i = 0; i < K; ++i) eye.data<float>()[i * K + i] = 1.f;
        auto r = test::run_op(g, {{"x", eye}}, {{"w", w}});
        std::vector<float> deq((size_t)(N * K));
        dequantize(w.bytes.data(), wt, deq.data(), deq.size());
        size_t mismatches = 0;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t n = 0; n < N; ++n) {
                float a = r.gpu[(size_t)(k * N + n)], b = deq[(size_t)(n * K + k)];
                mismatches += !(a == b);  // exact; only -0 (0 d with d < 0) reads +0 after the sum
            }
        CHECK(mismatches == 0);
        CHECK(r.cpu == r.gpu);
    }
    ir::Graph g;
    auto x = g.input("x", {M, K});
    ir::Val b = bias ? g.weight("b", {N}) : ir::Val{};
    g.output(g.linear(x, g.weight("w", {N, K}, wt), b), "y");
    std::map<std::string, Tensor> ws{{"w", w}};
    if (bias) ws["b"] = test::random_tensor({N}, 32);
    auto r = test::run_op(g, {{"x", test::random_tensor({M, K}, 30)}}, ws);
    CHECK(test::max_err(r.gpu, r.cpu) <= std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("quantized weights are linear operands only, rows of whole blocks", "[op:linear][quant][bad]") {
    ir::Graph g;
    CHECK_THROWS_WITH(g.weight("w", {4, 48}, DType::q8_0), Catch::Contains("whole 32-value blocks"));
    CHECK_THROWS_WITH(g.weight("w", {4, 32, 1, 1}, DType::q4_0), Catch::Contains("must be a matrix"));
    CHECK_THROWS_WITH(g.weight("w", {4, 128}, DType::q4_k), Catch::Contains("256-value"));
    auto t = g.weight("t", {10, 64}, DType::q8_0);
    CHECK_THROWS_WITH(g.embedding(t, g.input("ids", {3}, DType::i32)), Catch::Contains("linear operands only"));
    CHECK_THROWS_WITH(g.reshape(t, {640}), Catch::Contains("linear operands only"));
    CHECK_THROWS_WITH(g.add(t, t), Catch::Contains("must be f32"));
}

// linear then gelu / gelu-tanh / silu, the linear's output read by nothing else: ir::fuse makes one linear whose
// shader applies the activation at its store (activation.glsl, the code of gelu.comp / silu.comp) to the same f32
// value, so fused and unfused Vulkan agree bitwise. Against the CPU: the linear's bound above, scaled by the
// activation's slope (|gelu'| <= 1.13, |silu'| <= 1.1: x1.2), plus the activation's own (1e-5, test_silu).
TEST_CASE("linear with a fused activation equals linear then the activation, bitwise", "[op:linear][fuse]") {
    const DType wt = GENERATE(DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_k);
    const int act = GENERATE(0, 1, 2);  // gelu, gelu tanh, silu
    const bool quant = dtype_is_quant(wt);
    const int64_t K = quant ? 2 * dtype_block(wt) : GENERATE(13, 64);
    const int64_t M = GENERATE(5, 70), N = GENERATE(67, 130);
    CAPTURE(dtype_name(wt), act, M, K, N);
    ir::Graph g;
    auto x = g.input("x", {M, K});
    auto w = g.weight("w", {N, K}, wt);
    auto b = g.weight("b", {N});
    auto h = g.linear(x, w, b);
    g.output(act == 2 ? g.silu(h) : g.gelu(h, act == 1), "y");
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, wt, 41, -0.5f, 0.5f)},
                                     {"b", test::random_tensor({N}, 42)}};
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, K}, 43, -2.f, 2.f)}};
    auto plain = test::run_vk(g, in, ws, exec::Mode::full, "0");
    auto fused = test::run_vk(g, in, ws, exec::Mode::full, "1");
    CHECK(fused.c.nodes_fused == 1);
    CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run - 1);
    CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
    // The fused op built directly runs on the CPU reference as its parts do.
    ir::Graph gf;
    auto xf = gf.input("x", {M, K});
    gf.output(gf.linear(xf, gf.weight("w", {N, K}, wt), gf.weight("b", {N}),
                        act == 0   ? ir::Act::gelu
                        : act == 1 ? ir::Act::gelu_tanh
                                   : ir::Act::silu),
              "y");
    auto wcpu = [&](const ir::Value& v) { return ws.at(v.name); };
    auto cpu = cpu::run(g, in, wcpu).at("y").to_f32();
    CHECK(cpu::run(gf, in, wcpu).at("y").to_f32() == cpu);
    const double lin = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    CHECK(test::max_err(fused.out.at("y").to_f32(), cpu) <= 1.2 * lin + 1e-5);
}
