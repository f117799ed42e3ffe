// linear_multi: up to 4 linears of one x in one dispatch, made by ir::fuse from linears of one input (attention's
// q, k, v; Flux's single-block proj_mlp with them). Every part runs linear_vec4's tile code (linear_tile.glsl), so
// fused and unfused Vulkan agree bitwise. Against the CPU: test_linear's bounds (max-abs K^2 2^-24 / 4 x2, floor
// 1e-6), x1.2 for a fused activation's slope plus its own 1e-5 (see test_linear's fused-activation case).
#include <tuple>

#include "runtime/exec/linear_select.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("linear_multi equals its linears, bitwise", "[op:linear_multi]") {
    const DType wt = GENERATE(DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_k);
    const int parts = GENERATE(2, 3, 4, 5);  // 5: a group of 4 and a lone linear
    const int64_t M = GENERATE(3, 70);
    const int64_t K = dtype_is_quant(wt) ? dtype_block(wt) : 36;
    CAPTURE(dtype_name(wt), parts, M, K);
    ir::Graph g;
    auto x = g.input("x", {2, M, K});
    std::map<std::string, Tensor> ws;
    for (int i = 0; i < parts; ++i) {
        const std::string n = "w" + std::to_string(i), b = "b" + std::to_string(i);
        const int64_t N = i == 1 ? 200 : 64 + 3 * i;  // part 1 spans two column tiles
        auto h = g.linear(x, g.weight(n, {N, K}, wt), i == 2 ? ir::Val{} : g.weight(b, {N}));
        if (i == 3) h = g.gelu(h, true);  // Flux's proj_mlp: fused activation inside the group
        g.output(h, "y" + std::to_string(i));
        ws[n] = test::random_weight({N, K}, wt, 70 + (unsigned)i, -0.5f, 0.5f);
        if (i != 2) ws[b] = test::random_tensor({N}, 80 + (unsigned)i);
    }
    std::map<std::string, Tensor> in{{"x", test::random_tensor({2, M, K}, 90, -2.f, 2.f)}};
    test::ForceLinear reg("reg");  // linears the table sends to a tiled kernel are not grouped (the next test)
    auto plain = test::run_vk(g, in, ws, exec::Mode::full, "0");
    auto fused = test::run_vk(g, in, ws, exec::Mode::full, "all");
    // The default (KILN_FUSE=1) groups linears on GPUs only: on CPU devices it folds the activation alone.
    const bool cpu_device = test::op_ctx().info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    CHECK(test::run_vk(g, in, ws, exec::Mode::full, "1").c.nodes_fused ==
          (cpu_device ? (parts >= 4 ? 1 : 0) : std::min(parts, 4) - 1 + (parts >= 4 ? 1 : 0)));
    const int grouped = std::min(parts, 4);
    CHECK(fused.c.nodes_fused == grouped - 1 + (parts >= 4 ? 1 : 0));  // + the gelu folded into linear 3
    CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run - fused.c.nodes_fused);
    auto cpu = cpu::run(g, in, [&](const ir::Value& v) { return ws.at(v.name); });
    for (int i = 0; i < parts; ++i) {
        const std::string y = "y" + std::to_string(i);
        CAPTURE(y);
        CHECK(fused.out.at(y).bytes == plain.out.at(y).bytes);
        const double lin = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
        CHECK(test::max_err(fused.out.at(y).to_f32(), cpu.at(y).to_f32()) <= 1.2 * lin + 1e-5);
    }
}

TEST_CASE("linear_multi built directly matches the CPU reference", "[op:linear_multi]") {
    const DType wt = GENERATE(DType::f16, DType::q2_k, DType::q3_k, DType::q5_k, DType::q6_k);
    const int64_t K = dtype_is_quant(wt) ? dtype_block(wt) : 128, M = 9;
    ir::Graph g;
    auto x = g.input("x", {M, K});
    std::vector<ir::Val> w, b;
    std::map<std::string, Tensor> ws;
    for (int i = 0; i < 3; ++i) {
        const std::string n = "w" + std::to_string(i);
        w.push_back(g.weight(n, {130, K}, wt));
        b.push_back(i == 0 ? g.weight("b0", {130}) : ir::Val{});
        ws[n] = test::random_weight({130, K}, wt, 10 + (unsigned)i, -0.5f, 0.5f);
    }
    ws["b0"] = test::random_tensor({130}, 13);
    auto y = g.linear_multi(x, w, b, {ir::Act::silu, ir::Act::none, ir::Act::gelu});
    REQUIRE(y.size() == 3);
    g.output(y[0], "y");
    g.output(y[1], "y1");
    g.output(y[2], "y2");
    auto r = test::run_op(g, {{"x", test::random_tensor({M, K}, 14)}}, ws);
    const double lin = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    CHECK(test::max_err(r.gpu, r.cpu) <= 1.2 * lin + 1e-5);
}

TEST_CASE("linears of one input are grouped only when they can be", "[op:linear_multi]") {
    ir::Graph g;
    auto x = g.input("x", {4, 32}), z = g.input("z", {4, 32});
    g.output(g.linear(x, g.weight("a", {8, 32}, DType::f16), {}), "a");
    g.output(g.linear(x, g.weight("b", {8, 32}, DType::f32), {}), "b");  // another dtype
    g.output(g.linear(z, g.weight("c", {8, 32}, DType::f16), {}), "c");  // another input
    auto x13 = g.input("x13", {4, 13});
    g.output(g.linear(x13, g.weight("d", {8, 13}), {}), "d");  // K % 4 != 0 (no 4-vector form)
    g.output(g.linear(x13, g.weight("e", {8, 13}), {}), "e");
    std::map<std::string, Tensor> ws, in;
    const std::vector<std::tuple<std::string, int64_t, DType>> specs = {{"a", 32, DType::f16},
                                                                        {"b", 32, DType::f32},
                                                                        {"c", 32, DType::f16},
                                                                        {"d", 13, DType::f32},
                                                                        {"e", 13, DType::f32}};
    for (auto& [n, k, dt] : specs) ws[n] = test::random_weight({8, k}, dt, 5);
    in = {{"x", test::random_tensor({4, 32}, 1)},
          {"z", test::random_tensor({4, 32}, 2)},
          {"x13", test::random_tensor({4, 13}, 3)}};
    auto fused = test::run_vk(g, in, ws, exec::Mode::full, "all");
    CHECK(fused.c.nodes_fused == 0);
}

// Routing through the kernel table: a linear whose kernel (KILN_LINEAR or the table's pick) is not linear_multi's
// register tiling stays its own dispatch on that kernel. smem64 runs on every device and is bitwise equal to reg,
// so the outputs equal the unfused graph's bit for bit; a kernel that admits only some of the linears (coopmat: not
// f32 weights) leaves the others to be grouped.
TEST_CASE("linears the kernel table sends elsewhere stay out of linear_multi", "[op:linear_multi]") {
    ir::Graph g;
    auto x = g.input("x", {70, 64});
    std::map<std::string, Tensor> ws;
    for (int i = 0; i < 3; ++i) {  // attention's q, k, v
        const std::string n = "w" + std::to_string(i);
        g.output(g.linear(x, g.weight(n, {96, 64}, DType::f16), {}), "y" + std::to_string(i));
        ws[n] = test::random_weight({96, 64}, DType::f16, 30 + (unsigned)i);
    }
    std::map<std::string, Tensor> in{{"x", test::random_tensor({70, 64}, 39)}};
    test::VkRun plain = [&] {
        test::ForceLinear reg("reg");
        return test::run_vk(g, in, ws, exec::Mode::full, "0");
    }();
    {
        test::ForceLinear reg("reg");
        CHECK(test::run_vk(g, in, ws, exec::Mode::full, "all").c.nodes_fused == 2);  // one linear_multi of three
    }
    test::ForceLinear smem("smem64");
    const uint64_t before = exec::linear_smem_dispatches();
    auto fused = test::run_vk(g, in, ws, exec::Mode::full, "all");
    CHECK(fused.c.nodes_fused == 0);
    CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run);
    CHECK(exec::linear_smem_dispatches() == before + 3);
    for (int i = 0; i < 3; ++i) {
        const std::string y = "y" + std::to_string(i);
        CAPTURE(y);
        CHECK(fused.out.at(y).bytes == plain.out.at(y).bytes);
    }
}

TEST_CASE("linear_multi rejects bad weights", "[op:linear_multi][bad]") {
    ir::Graph g;
    auto x = g.input("x", {2, 8});
    auto w8 = g.weight("w8", {4, 8}), w7 = g.weight("w7", {4, 7}), h8 = g.weight("h8", {4, 8}, DType::f16);
    REQUIRE_THROWS_WITH(g.linear_multi(x, {w8, w7}, {{}, {}}, {ir::Act::none, ir::Act::none}),
                        Catch::Contains("linear_multi") && Catch::Contains("w7"));
    REQUIRE_THROWS_WITH(g.linear_multi(x, {w8, h8}, {{}, {}}, {ir::Act::none, ir::Act::none}),
                        Catch::Contains("linear_multi") && Catch::Contains("dtype"));
    REQUIRE_THROWS_WITH(g.linear_multi(x, {w8, w8, w8, w8, w8}, std::vector<ir::Val>(5), std::vector<ir::Act>(5)),
                        Catch::Contains("linear_multi") && Catch::Contains("1 to 4"));
    REQUIRE_THROWS_WITH(g.linear_multi(x, {w8}, {g.weight("b", {5})}, {ir::Act::none}),
                        Catch::Contains("linear_multi") && Catch::Contains("[5]"));
}
