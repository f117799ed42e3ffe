// The JIT tests' toy transformer stack and helpers (test_jit.cpp, test_block_weights.cpp).
#pragma once
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "runtime/core/quant.h"
#include "runtime/cpu/reference.h"
#include "runtime/exec/executor.h"
#include "runtime/vulkan/context.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

namespace kiln::test::toy_stack {
inline vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// A small transformer-like stack: per block, x = x + W2 gelu(W1 layer_norm(x) + b1) * gate, with a
// shared conditioning input `c` (like DiT's timestep embedding) added into every block.
struct Toy {
    ir::Graph g;
    std::map<std::string, Tensor> weights;
    Toy(int blocks, int B, int N, int D, DType wdt = DType::f32) {
        ir::Val x = g.input("x", {B, N, D});
        ir::Val c = g.input("c", {B, 1, D});
        ir::Val w0 = g.weight("in.weight", {D, D}, wdt);
        weights["in.weight"] = test::random_tensor({D, D}, 1, -0.3f, 0.3f);
        x = g.linear(x, w0, {});
        unsigned seed = 10;
        for (int i = 0; i < blocks; ++i) {
            std::string p = "blk." + std::to_string(i) + ".";
            g.begin_region("blocks", i);
            ir::Val w1 = g.weight(p + "w1", {2 * D, D}, wdt), b1 = g.weight(p + "b1", {2 * D});
            ir::Val w2 = g.weight(p + "w2", {D, 2 * D}, wdt), gate = g.weight(p + "gate", {D});
            weights[p + "w1"] = test::random_tensor({2 * D, D}, seed++, -0.3f, 0.3f);
            weights[p + "b1"] = test::random_tensor({2 * D}, seed++);
            weights[p + "w2"] = test::random_tensor({D, 2 * D}, seed++, -0.3f, 0.3f);
            weights[p + "gate"] = test::random_tensor({D}, seed++);
            ir::Val h = g.layer_norm(g.add(x, c), {}, {}, 1e-6f);
            h = g.linear(g.gelu(g.linear(h, w1, b1), true), w2, {});
            x = g.add(x, g.mul(h, gate));
            g.end_region();
        }
        g.output(g.scale(x, 0.5f), "y");
    }
    exec::WeightBytesFn gpu() const {
        return [this](const ir::Value& v, void* dst, size_t n) {
            const Tensor& t = weights.at(v.name);
            if (dtype_is_quant(v.dtype))
                quantize(reinterpret_cast<const float*>(t.bytes.data()), v.dtype, dst, (size_t)t.numel());
            else
                convert(t.bytes.data(), t.dtype, dst, v.dtype, (size_t)t.numel());
        };
    }
    cpu::WeightFn cpu() const {
        return [this](const ir::Value& v) { return weights.at(v.name).astype(v.dtype).astype(DType::f32); };
    }
};

inline std::map<std::string, Tensor> inputs(int B, int N, int D, unsigned seed) {
    return {{"x", test::random_tensor({B, N, D}, seed)}, {"c", test::random_tensor({B, 1, D}, seed + 1)}};
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
    return a.shape == b.shape && a.bytes.size() == b.bytes.size() &&
           std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

// Runs `ex` on `in` and returns y.
inline Tensor run_y(exec::Executor& ex, const std::map<std::string, Tensor>& in) {
    for (auto& [n, t] : in) ex.set_input(n, t);
    ex.run();
    return ex.output("y");
}

// KILN_MAX_BINDING_RANGE for one scope: the executor then plans as if the device bound at most `bytes`.
struct BindingLimit {
    explicit BindingLimit(size_t bytes) { setenv("KILN_MAX_BINDING_RANGE", std::to_string(bytes).c_str(), 1); }
    ~BindingLimit() { unsetenv("KILN_MAX_BINDING_RANGE"); }
};
}  // namespace kiln::test::toy_stack
