// A split-K linear (coopmat_sk where the device has cooperative matrices, else gemm_sk) is two dispatches sharing a
// scratch the executor plans with the activations: recorded once and replayed (full), inside a replayed block
// template with its weights selected per instance (regional), and recorded per run (eager), every mode gives the same
// bits, run after run, within f32 accuracy of the CPU.
#include <catch2/catch.hpp>
#include <cstring>

#include "runtime/core/quant.h"
#include "runtime/cpu/reference.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/linear_select.h"
#include "runtime/vulkan/context.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// x [2, 13, 256] through a linear, then two blocks of x = x + gate * W2 gelu(W1 layer_norm(x) + b1), f16 weights.
// M = 26 rows: one row of 64 x 64 tiles. K = 256 and 512 (8 and 16 slices of 32): S = 2, 2 and 4 (splitk_factor on
// lavapipe's assumed 128 compute units; the plan checks below count the dispatches whatever S is).
struct Stack {
    static constexpr int B = 2, N = 13, D = 256;
    ir::Graph g;
    std::map<std::string, Tensor> w;
    unsigned seed = 1;
    ir::Val weight(const std::string& name, Shape s, DType dt = DType::f16, float r = 0.1f) {
        w[name] = test::random_tensor(s, seed++, -r, r);
        return g.weight(name, s, dt);
    }
    Stack() {
        ir::Val x = g.linear(g.input("x", {B, N, D}), weight("in.w", {D, D}), {});
        for (int i = 0; i < 2; ++i) {
            const std::string p = "blk." + std::to_string(i) + ".";
            g.begin_region("blocks", i);
            ir::Val h = g.layer_norm(x, {}, {}, 1e-6f);
            h = g.gelu(g.linear(h, weight(p + "w1", {2 * D, D}), weight(p + "b1", {2 * D}, DType::f32, 1.f)), true);
            h = g.linear(h, weight(p + "w2", {D, 2 * D}), {});
            x = g.add(x, g.mul(h, weight(p + "gate", {D}, DType::f32, 1.f)));
            g.end_region();
        }
        g.output(x, "y");
    }
    exec::WeightBytesFn gpu() const {
        return [this](const ir::Value& v, void* dst, size_t n) {
            const Tensor& t = w.at(v.name);
            REQUIRE((size_t)dtype_nbytes(v.dtype, t.numel()) == n);
            convert(t.bytes.data(), t.dtype, dst, v.dtype, (size_t)t.numel());
        };
    }
};
}  // namespace

TEST_CASE("split-K linears run recorded (full, regional) and eager, bitwise alike", "[jit][splitk]") {
    vk::Context& ctx = context();
    const std::string kernel = exec::linear_variant_available(ctx, "coopmat_sk", DType::f16) ? "coopmat_sk" : "gemm_sk";
    CAPTURE(kernel);
    Stack s;
    const std::map<std::string, Tensor> in{{"x", test::random_tensor({Stack::B, Stack::N, Stack::D}, 50)}};
    const auto ref =
        cpu::run(s.g, in, [&](const ir::Value& v) { return s.w.at(v.name).astype(v.dtype).astype(DType::f32); });
    test::ScopedEnv lin("KILN_LINEAR", kernel);
    Tensor first;
    for (exec::Mode m : {exec::Mode::full, exec::Mode::regional, exec::Mode::eager}) {
        CAPTURE((int)m);
        exec::Executor ex(ctx, s.g, s.gpu(), m);
        // Five linears a run, each two dispatches of the split shader (the partial sums, the reduce).
        int sk_runs = 0, sk_records = 0;
        for (const auto& d : ex.cost().per_dispatch)
            if (d.shader.find(kernel) != std::string::npos) sk_runs += d.per_run, ++sk_records;
        CHECK(sk_runs == 5 * 2);
        CHECK(sk_records % 2 == 0);
        Tensor out[2];
        for (Tensor& o : out) {
            ex.set_input("x", in.at("x"));
            ex.run();
            o = ex.output("y");
        }
        CHECK(out[0].bytes == out[1].bytes);  // nothing left over between replays
        if (first.bytes.empty()) first = out[0];
        CHECK(out[0].bytes == first.bytes);
        // f16 weights on both sides, x split into two f16 parts: f32-like sums of K <= 512 products.
        CHECK(rel_l2(out[0].to_f32(), ref.at("y").to_f32()) < 1e-5);
    }
    INFO("last validation message: " << vk::Context::last_validation_message());
    CHECK(vk::Context::validation_errors() == 0);
}
