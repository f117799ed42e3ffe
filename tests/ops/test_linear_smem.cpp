// linear on the shared-memory tiled path (linear_smem.comp), forced on whatever device runs the tests (lavapipe in
// CI), against the CPU reference. Shapes hit partial tiles: M, N not multiples of the 64/128-row and 64-column
// tiles, K not a multiple of the 16-value slice. Tolerance as test_linear.cpp: the CPU gets the same rounded W
// (f16/bf16 convert exactly to f32; quantized blocks dequantize bitwise as kiln::dequantize), so only the f32
// accumulation order differs from the f64 reference: |err| <= K 2^-24 sum|x_k w_k|, E|x w| = 1/4 for U(-1, 1)
// -> max-abs 2 K^2 2^-24 / 4 (x2 margin), floor 1e-6; random signs -> relative L2 1e-5.
#include <set>
#include <tuple>

#include "runtime/core/quant.h"
#include "runtime/exec/linear_select.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/pipeline.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {

void check_smem(const std::string& variant, int64_t M, int64_t N, int64_t K, DType wt, bool bias) {
    ir::Graph g;
    auto x = g.input("x", {M, K});
    ir::Val b = bias ? g.weight("b", {N}) : ir::Val{};
    g.output(g.linear(x, g.weight("w", {N, K}, wt), b), "y");
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, wt, 41)}};
    if (bias) ws["b"] = test::random_tensor({N}, 42);
    test::ForceLinear force(variant);
    const uint64_t before = exec::linear_smem_dispatches();
    auto r = test::run_op(g, {{"x", test::random_tensor({M, K}, 40)}}, ws);
    CHECK(exec::linear_smem_dispatches() == before + 1);  // the forced path ran, not the register one
    CHECK(test::max_err(r.gpu, r.cpu) <= std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}
}  // namespace

TEST_CASE("linear_smem matches the CPU reference (f32, f16, bf16 weights)", "[op:linear][smem]") {
    const std::string variant = GENERATE("smem64", "smem128");
    auto [M, N, K] = GENERATE(std::make_tuple(1, 1, 4), std::make_tuple(3, 13, 12), std::make_tuple(77, 130, 68),
                              std::make_tuple(65, 129, 128), std::make_tuple(130, 67, 100),
                              std::make_tuple(200, 257, 36), std::make_tuple(64, 64, 16));
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    bool bias = GENERATE(false, true);
    CAPTURE(variant, M, N, K, dtype_name(wt), bias);
    check_smem(variant, M, N, K, wt, bias);
}

TEST_CASE("linear_smem matches the CPU reference (quantized weights)", "[op:linear][smem][quant]") {
    DType wt = GENERATE(DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k,
                        DType::q4_k, DType::q5_k, DType::q6_k);
    const int64_t B = dtype_block(wt);
    auto [M, N, K] =
        GENERATE_COPY(std::make_tuple(5, 13, 2 * B), std::make_tuple(70, 127, 3 * B), std::make_tuple(130, 65, B));
    const std::string variant = GENERATE("smem64", "smem128");
    CAPTURE(variant, M, N, K, dtype_name(wt));
    check_smem(variant, M, N, K, wt, true);
}

// The selector (linear_select.h) picks a variant per device and row count from timings, and ir::fuse's
// linear_multi always runs the register tile: a model's modes (eager, full, regional) and a fused group and its
// plain linears agree bitwise only if every variant sums each output in the same order. linear_smem and
// linear_tile.glsl both add x_k w_k for k = 0, 1, ..., K - 1 by one fma each, so no tolerance applies.
TEST_CASE("linear_smem equals the register path bitwise", "[op:linear][smem]") {
    const std::string variant = GENERATE("smem64", "smem128");
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                        DType::q5_1, DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k);
    const int64_t B = dtype_is_quant(wt) ? dtype_block(wt) : 1;
    // Partial tiles in M and N, K not a multiple of the 16-value slice (f32/f16/bf16), 1-row adaLN shapes.
    auto [M, N, K] = GENERATE_COPY(std::make_tuple(1, 13, dtype_is_quant(wt) ? B : 36),
                                   std::make_tuple(77, 130, dtype_is_quant(wt) ? 3 * B : 68),
                                   std::make_tuple(130, 67, dtype_is_quant(wt) ? B : 100));
    const bool bias = GENERATE(false, true), gelu = GENERATE(false, true);
    CAPTURE(variant, M, N, K, dtype_name(wt), bias, gelu);
    ir::Graph g;
    auto x = g.input("x", {M, K});
    ir::Val y = g.linear(x, g.weight("w", {N, K}, wt), bias ? g.weight("b", {N}) : ir::Val{});
    g.output(gelu ? g.gelu(y, true) : y, "y");  // fused into the store (ir::fuse)
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, K}, 60, -2.f, 2.f)}};
    std::map<std::string, Tensor> w{{"w", test::random_weight({N, K}, wt, 61, -0.5f, 0.5f)}};
    if (bias) w["b"] = test::random_tensor({N}, 62);
    auto run_as = [&](const std::string& v) {
        test::ForceLinear force(v);
        return test::run_vk(g, in, w, exec::Mode::full, "1");
    };
    const auto reg = run_as("reg");
    const uint64_t before = exec::linear_smem_dispatches();
    const auto smem = run_as(variant);
    CHECK(exec::linear_smem_dispatches() > before);  // the forced path ran
    CHECK(smem.out.at("y").bytes == reg.out.at("y").bytes);
}

TEST_CASE("linear_smem leaves K % 4 != 0 to the register path", "[op:linear][smem][bad]") {
    ir::Graph g;
    auto x = g.input("x", {70, 13});
    g.output(g.linear(x, g.weight("w", {9, 13}), {}), "y");
    const ir::Node& n = g.nodes()[(size_t)g.value(g.outputs().begin()->second).producer];
    CHECK(exec::linear_unsupported(test::op_ctx(), "smem64", g, n) == "K % 4 != 0");
    CHECK_THROWS_WITH(vk::lower_linear_smem(g, n, {}), Catch::Contains("K % 4"));
    {
        ir::Graph g16;
        g16.output(g16.linear(g16.input("x", {3, 16}), g16.weight("w", {5, 16}), {}), "y");
        const ir::Node& n16 = g16.nodes()[(size_t)g16.value(g16.outputs().begin()->second).producer];
        CHECK(exec::linear_unsupported(test::op_ctx(), "smem64", g16, n16).empty());
        CHECK_THROWS_WITH(vk::lower_linear_smem(g16, n16, {5, 4}), Catch::Contains("tile"));
    }
    test::ForceLinear force("smem");
    const uint64_t before = exec::linear_smem_dispatches();
    auto r = test::run_op(g, {{"x", test::random_tensor({70, 13}, 43)}},
                          {{"w", test::random_weight({9, 13}, DType::f32, 44)}});
    CHECK(exec::linear_smem_dispatches() == before);
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
    exec::set_linear_override("fast");
    vk::Dispatch d = vk::lower(g, n);
    CHECK_THROWS_WITH(exec::choose_linear(test::op_ctx(), g, n, d), Catch::Contains("KILN_LINEAR='fast'"));
}

namespace {
// The tiled GEMM (linear_gemm.glsl) in its two forms against the CPU. x is split into two f16 parts (hi + lo,
// relative 2^-22 per product); W f16 and bf16 enter exactly, ggml values split too with one of four products left
// out (<= 3 2^-22). Where each f16 x f16 product is added to an f32 sum, that is within the f32 bound + splits 2 K / 4
// 2^-22 (splits 1, or 3 for ggml), relative L2 1e-5: the scalar form ("gemm") does exactly that on every device, and
// so does lavapipe 26's cooperative MulAdd (the spec leaves its internal precision to the device: one that keeps
// less fails here and in the probe, which keeps auto selection off it). Until 2026-11-28 the split computed lo as
// f16(v - f32(f16(v))) under `precise`, and lavapipe 26 folded f32(f16(v)) to v: lo was 0, errors were f16's (rel
// L2 1.8e-4 at K = 1152), and this test had been bounding coopmat as f16 arithmetic; hi is now rounded through
// the float's bits (linear_gemm.glsl). The bounds are for |x|, |W| <= 1: scaled by max |x| max |W|.
void check_gemm(const std::string& kernel, int64_t M, int64_t N, int64_t K, DType wt, bool bias, bool wide_x,
                bool wide_w) {
    CAPTURE(kernel, dtype_name(wt), M, N, K, bias, wide_x, wide_w);
    ir::Graph g;
    ir::Val b = bias ? g.weight("b", {N}) : ir::Val{};
    g.output(g.linear(g.input("x", {M, K}), g.weight("w", {N, K}, wt), b), "y");
    auto spread = [](Tensor& t) {  // 1e-6 .. 1e6 in one slice: past f16's range both ways
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= (float)std::pow(10.0, (double)(i * 7 % 13) - 6);
    };
    Tensor xt = test::random_tensor({M, K}, 40), wf = test::random_tensor({N, K}, 41);
    if (wide_x) spread(xt);
    if (wide_w) spread(wf);
    std::map<std::string, Tensor> ws{{"w", wf.astype(wt)}};
    if (bias) ws["b"] = test::random_tensor({N}, 42);
    auto max_abs = [](const Tensor& t) {
        double m = 1;
        for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, (double)std::abs(t.data<float>()[i]));
        return m;
    };
    const double scale = max_abs(xt) * max_abs(wf);
    test::ForceLinear force(kernel);
    const uint64_t before = exec::linear_kernel_dispatches(kernel);
    auto r = test::run_op(g, {{"x", xt}}, ws);
    CHECK(exec::linear_kernel_dispatches(kernel) == before + 1);  // the forced kernel ran, not reg
    const double f32 = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    const int splits = dtype_is_quant(wt) ? 3 : 1;
    CHECK(test::max_err(r.gpu, r.cpu) <= scale * (f32 + splits * 2.0 * K / 4 * std::ldexp(1.0, -22)));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

// Whether `kernel` runs weights of dtype wt here; if not, says why.
bool gemm_here(const std::string& kernel, DType wt) {
    vk::Context& ctx = test::op_ctx();
    if (exec::linear_variant_available(ctx, kernel, wt)) return true;
    WARN("linear " << kernel << " not run on '" << ctx.info().name
                   << "': " << vk::linear_kernel_unavailable(*vk::find_linear_kernel(kernel), ctx.info(), wt));
    return false;
}
}  // namespace

// f16 weights on the tiled GEMM's two forms (check_gemm's bounds), after the coopmat lowering's checks on every
// device. Values up to 1e6 (past f16's 65504) and down to 1e-6 in one slice: the per-slice power-of-two scale keeps
// them finite and exact. Each kernel where this device admits it (gemm_here; until 2026-11-28 the scalar form was
// skipped wherever coopmat was absent, lavapipe 22.3 included). 128-tile shapes: M and N past one tile, ragged.
TEST_CASE("the tiled GEMM matches the CPU reference (f16 weights)", "[op:linear][coopmat][gemm]") {
    vk::Context& ctx = test::op_ctx();
    {
        INFO("the lowering, on every device (no pipeline is created)");
        ir::Graph g;
        auto x = g.input("x", {70, 64});
        g.output(g.linear(x, g.weight("w", {130, 64}, DType::f16), {}), "y");
        g.output(g.linear(x, g.weight("w32", {130, 64}), {}), "y32");
        const ir::Node& n = g.nodes()[(size_t)g.value(g.outputs()[0].second).producer];
        const ir::Node& n32 = g.nodes()[(size_t)g.value(g.outputs()[1].second).producer];
        vk::DeviceInfo h200 = ctx.info();
        h200.coopmat_m = h200.coopmat_n = h200.coopmat_k = 16, h200.subgroup_size = 32, h200.max_shared_memory = 49152;
        const vk::LinearKernel &cm = *vk::find_linear_kernel("coopmat"), &cm128 = *vk::find_linear_kernel("coopmat128");
        if (vk::has_shader("linear_coopmat_f16")) {
            vk::Dispatch d = vk::lower_linear_gemm(cm, h200, g, n);
            CHECK(d.shader.name() == "linear_coopmat_f16");
            CHECK((d.groups[0] == 3 && d.groups[1] == 2));  // 64 x 64 tiles
            CHECK(d.spec[6] == 128);                        // 4 subgroups of 32
            CHECK((d.spec[11] == 32 && d.spec[12] == 2));   // K slices of 32, double-buffered
            d = vk::lower_linear_gemm(cm128, h200, g, n);
            CHECK(d.shader.name() == "linear_coopmat_f16");  // the same SPIR-V, specialized
            CHECK((d.groups[0] == 2 && d.groups[1] == 1));   // 128 x 128 tiles
            CHECK(d.spec[6] == 256);                         // 8 subgroups of 32: 4 x 2 of 2 x 4 fragments
            CHECK((d.spec[7] == 4 && d.spec[8] == 2 && d.spec[9] == 2 && d.spec[10] == 4));
            CHECK((d.spec[11] == 16 && d.spec[12] == 2));  // 32-value slices double-buffered would take 69644 bytes
            for (const char* s : {"linear_coopmat_f16", "linear_coopmat_f16_ptr", "linear_coopmat_f16_off"})
                CHECK(vk::has_shader(s));
        } else {
            WARN("this build has no linear_coopmat (glslang without GL_KHR_cooperative_matrix)");
        }
        CHECK_THROWS_WITH(vk::lower_linear_gemm(cm, h200, g, n32), Catch::Contains("f32 weights"));
        CHECK_THROWS_WITH(vk::lower_linear_gemm(cm128, h200, g, n32), Catch::Contains("f32 weights"));
        if (!exec::linear_variant_available(ctx, "coopmat", DType::f16)) {
            exec::set_linear_override("coopmat");
            vk::Dispatch e = vk::lower(g, n);
            CHECK_THROWS_WITH(exec::choose_linear(ctx, g, n, e), Catch::Contains("KILN_LINEAR=coopmat"));
            exec::set_linear_override("");
        }
    }
    const std::string kernel = GENERATE("gemm", "coopmat", "gemm128", "coopmat128");
    if (!gemm_here(kernel, DType::f16)) return;
    auto [M, N, K] = GENERATE(std::make_tuple(1, 1, 4), std::make_tuple(77, 130, 68), std::make_tuple(130, 67, 100),
                              std::make_tuple(200, 257, 36), std::make_tuple(64, 64, 32), std::make_tuple(33, 70, 1152),
                              std::make_tuple(257, 300, 132));
    const bool bias = GENERATE(false, true);
    const bool wide = GENERATE(false, true);  // x spans 1e-6 .. 1e6
    check_gemm(kernel, M, N, K, DType::f16, bias, wide, false);
}

// bf16 and ggml-block weights: dequantized into the f16 shared tile with a per-slice power of two (bf16 exact; ggml
// values split hi + lo as x is). bf16 weights span 1e-6 .. 1e6 in the `wide` case. Shapes: partial tiles in M and
// N, K of 3 and 5 ggml blocks (K = 36 and 1152 for bf16).
TEST_CASE("the tiled GEMM runs bf16 and ggml-block weights", "[op:linear][coopmat][gemm]") {
    const std::string kernel = GENERATE("gemm", "coopmat", "gemm128", "coopmat128");
    const DType wt = GENERATE(DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k,
                              DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k);
    // The 128 tiles share the body and the weight loads with the 64 ones: bf16, a legacy block with a minimum (q4_1)
    // and a k-quant (q6_k) here (q4_k in the slice and buffering test). Each pipeline costs lavapipe up to a minute.
    if (kernel.find("128") != std::string::npos && wt != DType::bf16 && wt != DType::q4_1 && wt != DType::q6_k) return;
    if (!gemm_here(kernel, wt)) return;
    const int64_t blk = dtype_is_quant(wt) ? dtype_block(wt) : 12;
    auto [M, N, blocks] =
        GENERATE(std::make_tuple(77, 130, 3), std::make_tuple(33, 70, 5), std::make_tuple(150, 200, 2));
    const int64_t K = wt == DType::bf16 && blocks == 5 ? 1152 : blocks * blk;
    const bool wide = wt == DType::bf16 && GENERATE(false, true);
    check_gemm(kernel, M, N, K, wt, true, wide, wide);
}

// x stored f16 (ir::store_f16: here a concat read only by the linear): the tile takes it as stored, unscaled, and
// skips the lo products. x holds multiples of 2^-10 in [-1, 1], exact in f16 whichever way a device rounds, so the
// CPU and the device read the same x, and check_gemm's bounds apply (with no x split, the GEMM is tighter still).
TEST_CASE("the tiled GEMM takes f16-stored x as it is", "[op:linear][coopmat][gemm]") {
    const std::string kernel = GENERATE("gemm", "coopmat", "gemm128", "coopmat128");
    const DType wt = GENERATE(DType::f16, DType::q4_k);
    if (!gemm_here(kernel, wt)) return;
    const int64_t K = wt == DType::f16 ? 100 : 512, M = 70, N = 130;
    CAPTURE(kernel, dtype_name(wt));
    ir::Graph g;
    auto x = g.concat(g.input("xa", {M, K / 2}), g.input("xb", {M, K / 2}), 1);
    g.output(g.linear(x, g.weight("w", {N, K}, wt), g.weight("b", {N})), "y");
    ir::store_f16(g);
    REQUIRE(g.value(x.id).dtype == DType::f16);
    auto exact = [](Tensor t) {
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i] * 1024) / 1024;
        return t;
    };
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, wt, 62)}, {"b", test::random_tensor({N}, 63)}};
    test::ForceLinear force(kernel);
    const uint64_t before = exec::linear_kernel_dispatches(kernel);
    auto r = test::run_op(
        g, {{"xa", exact(test::random_tensor({M, K / 2}, 60))}, {"xb", exact(test::random_tensor({M, K / 2}, 61))}},
        ws);
    CHECK(exec::linear_kernel_dispatches(kernel) == before + 1);
    const double f32 = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    const int splits = dtype_is_quant(wt) ? 3 : 1;
    CHECK(test::max_err(r.gpu, r.cpu) <= f32 + splits * 2.0 * K / 4 * std::ldexp(1.0, -22));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

namespace {
// Kernel k forced under KILN_TEST_MAX_SHARED_MEMORY = limit, on x [150, K] W [200, K] of dtype wt (M, N ragged for
// both tiles; K = 100, not a multiple of the slice, or two ggml blocks) with bias and a fused activation, alone or
// under the gated residual (res + gate * h, ir::fuse), against the CPU: the dispatch has configuration c. Bound:
// check_gemm's on h (|x|, |W| <= 1), x1.13 through the activation's slope; gated: times |gate| <= 1, plus two f32
// roundings of values below 32 (2 2^-19 <= 1e-5).
void check_config(const vk::LinearKernel& k, DType wt, bool gated, uint32_t limit, const vk::GemmConfig& c) {
    vk::Context& ctx = test::op_ctx();
    CAPTURE(k.name, dtype_name(wt), gated, limit, c.shape.m, c.bk, c.nbuf);
    const int64_t M = 150, N = 200, K = dtype_is_quant(wt) ? 2 * dtype_block(wt) : 100;
    ir::Graph g;
    ir::Val h = g.linear(g.input("x", {M, K}), g.weight("w", {N, K}, wt), g.weight("b", {N}),
                         gated ? ir::Act::silu : ir::Act::gelu_tanh);
    g.output(gated ? g.add(g.mul(g.input("gate", {N}), h), g.input("res", {M, N})) : h, "y");
    const ir::Node& n = g.nodes()[(size_t)g.value(h).producer];
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, K}, 80)}};
    if (gated) in["gate"] = test::random_tensor({N}, 81), in["res"] = test::random_tensor({M, N}, 82);
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, wt, 83, -0.5f, 0.5f)},
                                     {"b", test::random_tensor({N}, 84)}};
    const auto cpu = cpu::run(g, in, [&](const ir::Value& v) { return ws.at(v.name); }).at("y").to_f32();
    double bound = 1.13 * (std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)) +
                           vk::linear_splits(k, wt) * 2.0 * K / 4 * std::ldexp(1.0, -22));
    if (gated) bound += 1e-5;
    test::ScopedEnv env("KILN_TEST_MAX_SHARED_MEMORY", std::to_string(limit));
    test::ForceLinear force(k.name);
    vk::Dispatch d = vk::lower(g, n);
    exec::choose_linear(ctx, g, n, d);  // what the executor runs under this limit
    REQUIRE(d.spec.size() == 13);
    CHECK((d.spec[0] == c.shape.m && d.spec[11] == c.bk && d.spec[12] == c.nbuf));
    CHECK(d.spec[6] == c.invocations);
    CHECK((d.groups[0] == (N + c.bn() - 1) / c.bn() && d.groups[1] == (M + c.bm() - 1) / c.bm()));
    const uint64_t before = exec::linear_kernel_dispatches(k.name);
    const auto r = test::run_vk(g, in, ws, exec::Mode::full, "1");
    CHECK(exec::linear_kernel_dispatches(k.name) == before + 1);  // the forced kernel ran, not reg
    CHECK(r.c.gated_linears == (gated ? 1 : 0));
    const auto gpu = r.out.at("y").to_f32();
    CHECK(test::max_err(gpu, cpu) <= bound);
    CHECK(rel_l2(gpu, cpu) <= 1e-5);
}
}  // namespace

// Each tile in every shape, K slice and buffering (linear_gemm.glsl: BK 32 or 16, two buffers or one) that
// gemm_config chooses on this device under some shared-memory size: candidate i (shape, slice, buffers) in order,
// with weights and epilogue i % 3 of (f16, activation), (bf16, gated), (q4_k, gated), its own size as the limit;
// each distinct choice runs once (each costs lavapipe a pipeline compile of a fully unrolled GEMM: seconds to a
// minute). The 128 kernels' f16, bf16 and ggml weights with every epilogue run in the tests above and in
// test_linear_caps.cpp / test_linear_gated.cpp at the device's own configuration.
TEST_CASE("the tiled GEMM runs every slice and buffering its shared memory allows", "[op:linear][coopmat][gemm]") {
    vk::Context& ctx = test::op_ctx();
    const std::string kernel = GENERATE("gemm128", "coopmat128", "gemm", "coopmat");
    if (!gemm_here(kernel, DType::f16)) return;
    const vk::LinearKernel& k = *vk::find_linear_kernel(kernel);
    const bool cm = k.caps.needs == vk::LinearCaps::Needs::coopmat;
    const vk::DeviceInfo& info = ctx.info();
    std::vector<vk::CoopmatShape> shapes{{16, 16, 16}, {8, 8, 8}};
    if (cm) shapes = {{info.coopmat_m, info.coopmat_n, info.coopmat_k}};
    const std::pair<DType, bool> cases[] = {{DType::f16, false}, {DType::bf16, true}, {DType::q4_k, true}};
    std::set<std::tuple<uint32_t, uint32_t, uint32_t>> seen;  // shape, bk, nbuf
    int i = 0;
    for (const vk::CoopmatShape& s : shapes)
        for (auto [bk, nbuf] : {std::pair{32u, 2u}, {16u, 2u}, {32u, 1u}, {16u, 1u}}) {
            const auto [wt, gated] = cases[i++ % 3];
            const uint32_t limit =
                vk::gemm_shared_bytes({s, k.caps.wm, k.caps.wn, k.caps.fm, k.caps.fn, bk, nbuf, 0, cm}, wt);
            if (limit > info.max_shared_memory) continue;
            vk::DeviceInfo dev = info;
            dev.max_shared_memory = limit;
            const auto c = vk::gemm_config(k, dev, wt);
            if (!c || !seen.insert({c->shape.m, c->bk, c->nbuf}).second) continue;
            CHECK(vk::gemm_shared_bytes(*c, wt) <= limit);
            check_config(k, wt, gated, limit, *c);
        }
    CHECK(seen.size() >= 2);  // more than the device's own configuration
}

// KILN_PRECISION=fast: x (scaled per slice) and ggml W enter the tile as hi alone, x rounded to 11 significant bits
// (linear_gemm.glsl's hi16): per product |hi_x hi_W - x W| <= (2^-10 + 2^-22) |x W| plus the f16 subnormal floors of
// the scaled operands (a slice's max sits in [2^13, 2^14): 2^-25 2^-13 of the slice's max, <= 2^-37 K max|x| max|W|
// over a row), then the f32 sum of K products. The bound is taken per output from the data; that the shader took one
// f16 per operand shows in its result differing from the exact one (f16 and bf16 W: x rounded; ggml: both).
TEST_CASE("the tiled GEMM at KILN_PRECISION=fast: one f16 per operand, within its bound",
          "[op:linear][coopmat][gemm][precision]") {
    // Both tiles and both forms, x alone rounded (f16 W) and x and W (q8_0); each pipeline costs lavapipe seconds.
    const std::string kernel = GENERATE("gemm", "coopmat", "gemm128", "coopmat128");
    const DType wt = kernel == "gemm" || kernel == "coopmat128" ? DType::f16 : DType::q8_0;
    if (!gemm_here(kernel, wt)) return;
    const int64_t M = 77, N = 130, K = dtype_is_quant(wt) ? 3 * dtype_block(wt) : 1152;
    CAPTURE(kernel, dtype_name(wt), K);
    ir::Graph g;
    g.output(g.linear(g.input("x", {M, K}), g.weight("w", {N, K}, wt), g.weight("b", {N})), "y");
    const Tensor xt = test::random_tensor({M, K}, 50), w = test::random_tensor({N, K}, 51).astype(wt);
    const std::map<std::string, Tensor> ws{{"w", w}, {"b", test::random_tensor({N}, 52)}};
    const Tensor wf = w.astype(DType::f32);
    double worst = 0;  // max over outputs of sum_k |x W|
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
                s += std::abs((double)xt.data<float>()[m * K + k] * wf.data<float>()[n * K + k]);
            worst = std::max(worst, s);
        }
    test::ForceLinear force(kernel);
    std::vector<float> fast;
    {
        test::ScopedEnv prec("KILN_PRECISION", "fast");
        const uint64_t before = exec::linear_kernel_dispatches(kernel);
        auto r = test::run_op(g, {{"x", xt}}, ws);
        CHECK(exec::linear_kernel_dispatches(kernel) == before + 1);
        const double f32 = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
        const double bound = (std::ldexp(1.0, -10) + std::ldexp(1.0, -22)) * worst + f32 + std::ldexp((double)K, -37);
        CAPTURE(bound, test::max_err(r.gpu, r.cpu));
        CHECK(test::max_err(r.gpu, r.cpu) <= bound);
        fast = r.gpu;
    }
    CHECK(test::run_op(g, {{"x", xt}}, ws).gpu != fast);
}
