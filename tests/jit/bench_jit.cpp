// Hidden benchmarks (not run by default): ./test_jit "[.bench]". GPU time (timestamps) of replayed blocks per
// block-weight selection, and the fixed cost of one dispatch and one submission on this device.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "runtime/core/quant.h"
#include "runtime/exec/executor.h"
#include "runtime/vulkan/context.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
vk::Context& bench_context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// Best GPU ms of `runs` runs after one warm-up.
double best_gpu_ms(exec::Executor& ex, int runs = 5) {
    ex.run();
    double best = 1e30;
    for (int i = 0; i < runs; ++i) {
        ex.run();
        best = std::min(best, ex.last_gpu_ms());
    }
    return best;
}
}  // namespace

TEST_CASE("block-weight selection: GPU time of replayed linear layers", "[.bench]") {
    // x [M, D] through `blocks` layers y = x W_i^T (D = 1152, DiT-XL's width); one layer per block.
    const int64_t D = 1152, blocks = 4;
    for (int64_t M : {2, 256})
        for (DType wt : {DType::f16, DType::q8_0}) {
            ir::Graph g;
            ir::Val x = g.input("x", {M, D});
            for (int i = 0; i < blocks; ++i) {
                g.begin_region("blocks", i);
                x = g.linear(x, g.weight("w" + std::to_string(i), {D, D}, wt), {});
                g.end_region();
            }
            g.output(g.scale(x, 1.0f), "y");
            Tensor w = test::random_tensor({D, D}, 3, -0.05f, 0.05f);
            exec::WeightBytesFn bytes = [&](const ir::Value& v, void* dst, size_t n) {
                if (dtype_is_quant(v.dtype))
                    quantize(reinterpret_cast<const float*>(w.bytes.data()), v.dtype, dst, (size_t)w.numel());
                else
                    convert(w.bytes.data(), DType::f32, dst, v.dtype, (size_t)w.numel());
            };
            Tensor in = test::random_tensor({M, D}, 4);
            auto time = [&](exec::Mode mode, exec::BlockWeights bw) {
                exec::Executor ex(bench_context(), g, bytes, mode, false, bw);
                ex.set_input("x", in);
                return best_gpu_ms(ex) / blocks;
            };
            std::printf(
                "linear %lldx%lldx%lld %-5s ms per layer: full %.2f, regional offset %.2f, device %.2f, "
                "copy %.2f\n",
                (long long)M, (long long)D, (long long)D, dtype_name(wt),
                time(exec::Mode::full, exec::BlockWeights::automatic),
                time(exec::Mode::regional, exec::BlockWeights::offset),
                time(exec::Mode::regional, exec::BlockWeights::device),
                time(exec::Mode::regional, exec::BlockWeights::copy));
        }
}

TEST_CASE("block-weight selection: GPU time of replayed small elementwise ops", "[.bench]") {
    // dit-tiny-sized activations [2, 64, 64]; per block x = layer_norm(x) * w_i + b_i (weights [64]), 28 blocks.
    const int64_t blocks = 28;
    ir::Graph g;
    ir::Val x = g.input("x", {2, 64, 64});
    for (int i = 0; i < blocks; ++i) {
        g.begin_region("blocks", i);
        std::string p = std::to_string(i);
        x = g.add(g.mul(g.layer_norm(x, {}, {}, 1e-6f), g.weight("w" + p, {64})), g.weight("b" + p, {64}));
        g.end_region();
    }
    g.output(g.scale(x, 1.0f), "y");
    Tensor w = test::random_tensor({64}, 3);
    exec::WeightBytesFn bytes = [&](const ir::Value&, void* dst, size_t n) { std::memcpy(dst, w.bytes.data(), n); };
    Tensor in = test::random_tensor({2, 64, 64}, 4);
    auto time = [&](exec::Mode mode, exec::BlockWeights bw) {
        exec::Executor ex(bench_context(), g, bytes, mode, false, bw);
        ex.set_input("x", in);
        return best_gpu_ms(ex, 9) * 1e3 / blocks;
    };
    for (int rep = 0; rep < 2; ++rep)
        std::printf(
            "layer_norm, mul, add on [2, 64, 64], us per block: full %.0f, regional offset %.0f, device %.0f, "
            "copy %.0f\n",
            time(exec::Mode::full, exec::BlockWeights::automatic),
            time(exec::Mode::regional, exec::BlockWeights::offset),
            time(exec::Mode::regional, exec::BlockWeights::device),
            time(exec::Mode::regional, exec::BlockWeights::copy));
}

TEST_CASE("fixed cost of a dispatch (with its barrier) and of a submission", "[.bench]") {
    // A chain of n `scale` ops on 64 floats: each dispatch waits for the previous (one barrier each).
    auto chain = [](int n) {
        ir::Graph g;
        ir::Val x = g.input("x", {1, 64});
        for (int i = 0; i < n; ++i) x = g.scale(x, 1.0f, 0.0f);
        g.output(x, "y");
        return g;
    };
    exec::WeightBytesFn none = [](const ir::Value&, void*, size_t) {};
    Tensor in = test::random_tensor({1, 64}, 1);
    double full[2], eager[2];
    const int n[2] = {100, 400};
    for (int i = 0; i < 2; ++i) {
        ir::Graph g = chain(n[i]);
        exec::Executor f(bench_context(), g, none, exec::Mode::full), e(bench_context(), g, none, exec::Mode::eager);
        f.set_input("x", in);
        e.set_input("x", in);
        full[i] = best_gpu_ms(f);
        e.run();
        double best = 1e30;
        for (int r = 0; r < 3; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            e.run();
            best = std::min(best,
                            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        eager[i] = best;
    }
    std::printf(
        "per dispatch + barrier, one command buffer (GPU time): %.1f us; per eager op (submit + wait, wall): "
        "%.1f us\n",
        (full[1] - full[0]) / (n[1] - n[0]) * 1e3, (eager[1] - eager[0]) / (n[1] - n[0]) * 1e3);
}
