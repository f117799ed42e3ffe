// linear_gemv.comp (kernel "gemv": few rows, lanes splitting K), forced, against the CPU reference. Shapes: M = 1, 2
// (the adaLN / timestep rows), 3 and 9 (a partial group of the up-to-8 rows a workgroup takes), N = 130 (a partial
// group of 4 columns), K = 68 (fewer 4-vectors than the 32 lanes of a column) and 1156 (each lane loops 9-10 times,
// unevenly). Tolerance: the CPU gets the same rounded W (f16 / bf16 exact in f32, ggml blocks dequantized bitwise),
// so only the f32 summation order differs from the f64 reference: |err| <= K 2^-24 sum |x w|, E|x w| = 1/4 for
// U(-1, 1) -> max-abs 2 K^2 2^-24 / 4 (x2 margin), floor 1e-6; relative L2 1e-5 (as test_linear_smem.cpp).
#include "runtime/exec/linear_select.h"
#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/pipeline.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
void check_gemv(int64_t M, int64_t N, int64_t K, DType wt, bool bias, ir::Act act = ir::Act::none) {
    CAPTURE(M, N, K, dtype_name(wt), bias, (int)act);
    ir::Graph g;
    ir::Val b = bias ? g.weight("b", {N}) : ir::Val{};
    g.output(g.linear(g.input("x", {M, K}), g.weight("w", {N, K}, wt), b, act), "y");
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, wt, 51)}};
    if (bias) ws["b"] = test::random_tensor({N}, 52);
    test::ForceLinear force("gemv");
    const uint64_t before = exec::linear_kernel_dispatches("gemv");
    auto r = test::run_op(g, {{"x", test::random_tensor({M, K}, 50)}}, ws);
    CHECK(exec::linear_kernel_dispatches("gemv") == before + 1);  // the forced kernel ran, not reg
    // GELU's slope reaches 1.13: the bound carries through the activation with that factor.
    const double bound = (act == ir::Act::none ? 1.0 : 1.13) * std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    CHECK(test::max_err(r.gpu, r.cpu) <= bound);
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}
}  // namespace

TEST_CASE("gemv matches the CPU reference at few rows", "[op:linear][gemv]") {
    for (int64_t M : {1, 2, 3, 9})
        for (int64_t K : {68, 1156}) check_gemv(M, 130, K, DType::f16, true);
    check_gemv(2, 130, 1156, DType::f32, false);
    check_gemv(2, 130, 1156, DType::bf16, true, ir::Act::silu);
    check_gemv(3, 130, 3 * 256, DType::q4_k, true, ir::Act::gelu);
    check_gemv(2, 130, 2 * 32, DType::q8_0, false);
}

TEST_CASE("gemv's lowering: up to 8 rows and 4 columns per workgroup of 128", "[op:linear][gemv]") {
    for (auto [M, rows] : {std::pair{1, 1u}, {2, 2u}, {8, 8u}, {9, 8u}, {256, 8u}}) {
        ir::Graph g;
        g.output(g.linear(g.input("x", {M, 1152}), g.weight("w", {1153, 1152}, DType::f16), {}), "y");
        const vk::Dispatch d = vk::lower_linear_gemv(g, g.nodes().back());
        CAPTURE(M);
        REQUIRE(d.spec.size() == 7);
        CHECK(d.spec[0] == rows);
        CHECK(d.spec[1] == 4u);
        CHECK(d.spec[6] == 128u);
        CHECK(d.groups[0] == (1153u + 3) / 4);
        CHECK(d.groups[1] == (M + rows - 1) / rows);
        CHECK(d.shader.name() == "linear_gemv_f16");
    }
    ir::Graph g;
    g.output(g.linear(g.input("x", {2, 13}), g.weight("w", {8, 13}, DType::f16), {}), "y");
    CHECK_THROWS_WITH(vk::lower_linear_gemv(g, g.nodes().back()), Catch::Contains("K % 4 != 0"));
}
