// The split-K tiled GEMM (coopmat_sk, gemm_sk: shaders/linear_splitk.glsl), forced, against the CPU reference. Its
// products are the unsplit kernel's (per-slice scale, x split hi + lo, W exact or split); only the f32 summation order
// differs (S per-split sums of contiguous K ranges, then their sum in split order), and any order of adding K products
// keeps test_linear_smem.cpp's check_gemm bound: max-abs 2 K^2 2^-24 / 4 (f32 accumulation, x2 margin, floor 1e-6)
// + splits 2 K / 4 2^-22 (x split; 3 for ggml W), relative L2 1e-5; x1.13 through an activation's slope; a gated
// residual + 1e-5 (two f32 roundings, |y| < 64); y stored f16 (ir::store_f16: read by a linear whose W is the
// identity, so that linear's output is y's f16 value exactly, on both sides): + one f16 ulp, 2^-10 max |y|.
// Shapes: partial tiles in M and N, K = 388 (13 slices of 32: S = 3 on lavapipe, splits of 5, 5, 3 slices, the last
// ending in a partial slice: K is no multiple of S BK) or 13 q8_0 blocks. Each case costs two pipelines (partial sums,
// reduce) of an unrolled GEMM: lavapipe compiles each in 10-60 s, so a few cases, not a matrix.
#include <algorithm>
#include <cmath>
#include <optional>

#include "runtime/exec/executor.h"
#include "runtime/exec/linear_select.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/pipeline.h"
#include "runtime/vulkan/traffic.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
const ir::Node& linear_of(const ir::Graph& g) {
    for (const ir::Node& n : g.nodes())
        if (n.op == ir::Op::linear) return n;
    FAIL("no linear");
    return g.nodes().front();
}

struct SplitCase {
    DType wt;
    bool bias;
    ir::Act act;
    bool gated = false, y16 = false, fast = false;
};

void check_split(const std::string& kernel, const SplitCase& c) {
    vk::Context& ctx = test::op_ctx();
    const int64_t M = 77, N = c.y16 ? 132 : 130, K = dtype_is_quant(c.wt) ? 13 * dtype_block(c.wt) : 388;
    CAPTURE(kernel, dtype_name(c.wt), c.bias, (int)c.act, c.gated, c.y16, c.fast);
    ir::Graph g;
    ir::Val h =
        g.linear(g.input("x", {M, K}), g.weight("w", {N, K}, c.wt), c.bias ? g.weight("b", {N}) : ir::Val{}, c.act);
    const ir::Val y = c.gated ? g.add(g.mul(g.input("gate", {N}), h), g.input("res", {M, N})) : h;
    g.output(c.y16 ? g.linear(y, g.weight("eye", {N, N}, DType::f16), {}) : y, "y");
    if (c.y16) {
        ir::store_f16(g);
        REQUIRE(g.value(y.id).dtype == DType::f16);
    }
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, K}, 90)}};
    if (c.gated) in["gate"] = test::random_tensor({N}, 91), in["res"] = test::random_tensor({M, N}, 92);
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, c.wt, 93)}};
    if (c.bias) ws["b"] = test::random_tensor({N}, 94);
    if (c.y16) {
        Tensor eye(DType::f32, {N, N});
        for (int64_t i = 0; i < N * N; ++i) eye.data<float>()[i] = i % (N + 1) == 0 ? 1.f : 0.f;
        ws["eye"] = eye.astype(DType::f16);
    }
    const auto cpu = cpu::run(g, in, [&](const ir::Value& v) { return ws.at(v.name); }).at("y").to_f32();

    test::ForceLinear force(kernel);
    std::optional<test::ScopedEnv> prec;
    if (c.fast) prec.emplace("KILN_PRECISION", "fast");
    {
        INFO("the lowering splits K: S workgroups per tile, a reduce, S M N f32 of scratch");
        const ir::Node& n = g.nodes()[(size_t)g.value(h).producer];
        vk::Dispatch d = vk::lower(g, n);
        exec::choose_linear(ctx, g, n, d);
        const auto cfg = vk::gemm_config(*vk::find_linear_kernel(kernel), ctx.info(), c.wt);
        REQUIRE(cfg.has_value());
        const uint32_t S = vk::splitk_factor(*cfg, ctx.info(), (uint32_t)M, (uint32_t)N, (uint32_t)K);
        REQUIRE(S >= 2);
        CHECK(d.groups[2] == S);
        CHECK(d.scratch == (uint64_t)S * M * N * 4);
        REQUIRE((d.spec.size() == 15 && d.then_spec.size() == 15));
        CHECK((d.spec[13] == (c.fast ? 1u : 0u) && d.spec[14] == 0u && d.then_spec[14] == 1u));
        CHECK(K % (S * cfg->bk) != 0);
    }
    const uint64_t before = exec::linear_kernel_dispatches(kernel);
    const auto r = test::run_vk(g, in, ws, exec::Mode::full, "1");
    CHECK(exec::linear_kernel_dispatches(kernel) == before + (c.y16 ? 2 : 1));  // the forced kernel ran, not reg
    CHECK(r.c.gated_linears == (c.gated ? 1 : 0));
    CHECK(r.c.dispatches_per_run == 2 + (c.y16 ? 1 : 0));  // partial sums and reduce (+ the identity, K = 132: unsplit)
    const auto gpu = r.out.at("y").to_f32();
    double bound = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)) +
                   vk::linear_splits(*vk::find_linear_kernel(kernel), c.wt) * 2.0 * K / 4 * std::ldexp(1.0, -22);
    if (c.fast) {  // test_linear_smem.cpp's fast bound: one f16 per operand, from the data
        const Tensor wf = ws.at("w").astype(DType::f32);
        double worst = 0;  // max over outputs of sum_k |x W|
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k)
                    s += std::abs((double)in.at("x").data<float>()[m * K + k] * wf.data<float>()[n * K + k]);
                worst = std::max(worst, s);
            }
        bound = (std::ldexp(1.0, -10) + std::ldexp(1.0, -22)) * worst +
                std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)) + std::ldexp((double)K, -37);
    }
    if (c.act != ir::Act::none) bound *= 1.13;
    if (c.gated) bound += 1e-5;
    if (c.y16) {
        double ymax = 1;
        for (float v : cpu) ymax = std::max(ymax, (double)std::abs(v));
        bound += std::ldexp(1.0, -10) * ymax;
    }
    CAPTURE(bound);
    CHECK(test::max_err(gpu, cpu) <= bound);
    if (!c.fast) CHECK(rel_l2(gpu, cpu) <= 1e-5);
    // Deterministic: a second executor gives the same bits.
    CHECK(test::run_vk(g, in, ws, exec::Mode::full, "1").out.at("y").bytes == r.out.at("y").bytes);
}

bool split_here(const std::string& kernel, DType wt) {
    vk::Context& ctx = test::op_ctx();
    if (exec::linear_variant_available(ctx, kernel, wt)) return true;
    WARN("linear " << kernel << " not run on '" << ctx.info().name
                   << "': " << vk::linear_kernel_unavailable(*vk::find_linear_kernel(kernel), ctx.info(), wt));
    return false;
}
// CI compiles every pipeline here cold on lavapipe (each split GEMM 40-80 s on 22.3, and CI runs test_ops on three
// lavapipe configurations): the scalar twin gemm_sk runs where coopmat_sk cannot (lavapipe 22.3: the same tiling,
// loads, split and reduce), and on a CPU device with cooperative matrices (lavapipe 26) coopmat_sk leaves ggml
// weights to the unsplit coopmat tests (their dequantization is the unsplit kernel's code; the split only moves K's
// bounds and the store). GPUs run every case.
bool worth_compiling(const std::string& kernel, DType wt) {
    vk::Context& ctx = test::op_ctx();
    const bool cpu = ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (cpu && kernel == "gemm_sk" && exec::linear_variant_available(ctx, "coopmat_sk", wt)) {
        SUCCEED("gemm_sk: coopmat_sk runs its structure on this CPU device");
        return false;
    }
    if (cpu && kernel == "coopmat_sk" && dtype_is_quant(wt)) {
        SUCCEED("coopmat_sk on ggml weights: left to the unsplit coopmat tests on a CPU device");
        return false;
    }
    return true;
}
}  // namespace

// The split factor on the H200 of the GPU runs (132 SMs, docs/gpu-runs/2026-11-28-h200) at DiT-XL/2's shapes, and
// where it declines; the cost model's two rows. No pipeline is created.
TEST_CASE("split-K: the split factor, the reduce and their traffic", "[op:linear][splitk]") {
    vk::DeviceInfo h200 = test::op_ctx().info();
    h200.name = "NVIDIA H200", h200.compute_units = 132, h200.subgroup_size = 32, h200.max_shared_memory = 49152;
    h200.max_storage_buffer_range = 1ull << 32;
    const vk::LinearKernel& sk = *vk::find_linear_kernel("gemm_sk");
    const auto cfg = vk::gemm_config(sk, h200, DType::f16);
    REQUIRE(cfg.has_value());
    REQUIRE((cfg->bm() == 64 && cfg->bn() == 64 && cfg->bk == 32));
    // 512 x 1152 x 1152: 8 x 18 = 144 tiles for 4 x 132 = 528 workgroups: S = 4 (9 of the 36 slices each).
    CHECK(vk::splitk_factor(*cfg, h200, 512, 1152, 1152) == 4);
    // 512 x 4608 x 1152 (the MLP's fc1): 576 tiles already: no split. Its fc2, 512 x 1152 x 4608: S = 4, 36 slices.
    CHECK(vk::splitk_factor(*cfg, h200, 512, 4608, 1152) == 1);
    CHECK(vk::splitk_factor(*cfg, h200, 512, 1152, 4608) == 4);
    // The adaLN rows, 2 x 6912 x 1152: 108 tiles, S = 5 wanted, 36 slices of at least 4: S = ceil(36 / 8) = 5.
    CHECK(vk::splitk_factor(*cfg, h200, 2, 6912, 1152) == 5);
    // At most T / 4 splits (K = 224: 7 slices, one split), and no empty one: T = 13, S = 3 -> 5, 5, 3.
    CHECK(vk::splitk_factor(*cfg, h200, 2, 64, 224) == 1);
    CHECK(vk::splitk_factor(*cfg, h200, 2, 64, 416) == 3);
    // No compute-unit count: 128 assumed (512 workgroups).
    vk::DeviceInfo anon = h200;
    anon.compute_units = 0;
    CHECK(vk::splitk_factor(*cfg, anon, 512, 1152, 1152) == 4);  // ceil(512 / 144) = 4
    // The partials within one binding.
    anon.max_storage_buffer_range = 2ull * 512 * 1152 * 4;
    CHECK(vk::splitk_factor(*cfg, anon, 512, 1152, 1152) == 2);

    ir::Graph g;
    ir::Val y = g.linear(g.input("x", {512, 1152}), g.weight("w", {1152, 1152}, DType::f16), g.weight("b", {1152}),
                         ir::Act::gelu_tanh);
    g.output(y, "y");
    const ir::Node& n = linear_of(g);
    for (const char* k : {"gemm_sk", "coopmat_sk"}) {
        CAPTURE(k);
        if (std::string(k) == "coopmat_sk" && !vk::has_shader("linear_coopmat_sk_f16")) {
            WARN("this build has no linear_coopmat_sk (glslang without GL_KHR_cooperative_matrix)");
            continue;
        }
        vk::DeviceInfo dev = h200;
        dev.coopmat_m = dev.coopmat_n = dev.coopmat_k = 16;
        const vk::Dispatch d = vk::find_linear_kernel(k)->lower(dev, g, n);
        CHECK(d.shader.name() == std::string("linear_") + k + "_f16");
        CHECK((d.groups[0] == 18 && d.groups[1] == 8 && d.groups[2] == 4));
        CHECK((d.then_groups[0] == 18 && d.then_groups[1] == 8 && d.then_groups[2] == 4));
        CHECK(d.scratch == 4ull * 512 * 1152 * 4);
        REQUIRE((d.spec.size() == 15 && d.then_spec.size() == 15));
        CHECK((d.spec[2] == (uint32_t)ir::Act::gelu_tanh && d.spec[14] == 0 && d.then_spec[14] == 1));
        // Traffic: x [512, 1152] f32 once per column tile, W f16 once per row tile, the partials written; the reduce
        // reads them and the bias once per row tile, and writes y.
        const std::vector<double> bound{512.0 * 1152 * 4, 1152.0 * 1152 * 2, 1152.0 * 4, 512.0 * 1152 * 4};
        const vk::Traffic p = vk::traffic_splitk(g, n, d, bound, false), r = vk::traffic_splitk(g, n, d, bound, true);
        CHECK(p.read == bound[0] * 18 + bound[1] * 8);
        CHECK(p.written == (double)d.scratch);
        CHECK(r.read == (double)d.scratch + bound[2] * 8);
        CHECK(r.written == bound[3]);
    }
    // Where the tiles fill the device, the unsplit kernel's one dispatch.
    ir::Graph big;
    big.output(big.linear(big.input("x", {4096, 256}), big.weight("w", {3072, 256}, DType::f16), {}), "y");
    const vk::Dispatch d1 = sk.lower(h200, big, linear_of(big));
    CHECK(d1.shader.name() == "linear_gemm_f16");
    CHECK((d1.scratch == 0 && d1.groups[2] == 1 && d1.spec.size() == 13));
}

TEST_CASE("split-K matches the CPU reference: f16, bf16 and q8_0 weights, every epilogue", "[op:linear][splitk]") {
    const std::string kernel = GENERATE("gemm_sk", "coopmat_sk");
    const SplitCase c =
        GENERATE(SplitCase{DType::f16, true, ir::Act::gelu_tanh, false, true},
                 SplitCase{DType::bf16, false, ir::Act::silu, true}, SplitCase{DType::q8_0, true, ir::Act::none});
    if (!split_here(kernel, c.wt) || !worth_compiling(kernel, c.wt)) return;
    check_split(kernel, c);
}

// KILN_PRECISION=fast: the partial pass takes one f16 per operand (test_linear_smem.cpp's bound); the reduce is the
// exact one's (the same pipeline as the f16 case above).
TEST_CASE("split-K at KILN_PRECISION=fast", "[op:linear][splitk][precision]") {
    const std::string kernel = GENERATE("gemm_sk", "coopmat_sk");
    if (!split_here(kernel, DType::f16) || !worth_compiling(kernel, DType::f16)) return;
    check_split(kernel, SplitCase{DType::f16, true, ir::Act::gelu_tanh, false, true, true});
}
