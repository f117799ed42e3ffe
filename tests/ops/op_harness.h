#pragma once
// Shared by the op tests: one vk::Context per process, and a runner that executes a graph on
// Vulkan and on the CPU reference with the same inputs and the same (already rounded) weights.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/cpu/reference.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/linear_select.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/lower.h"
#include "tests/support/force_linear.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

namespace kiln::test {

inline vk::Context& op_ctx() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// Random weight stored as `dt`: both backends see the same rounded values.
inline Tensor random_weight(const Shape& s, DType dt, unsigned seed, float lo = -1.f, float hi = 1.f) {
    return random_tensor(s, seed, lo, hi).astype(dt);
}

struct OpRun {
    std::vector<float> gpu, cpu;
};

// Runs g on Vulkan and on the CPU; returns output "y" of both. Checks no validation message appeared.
inline OpRun run_op(const ir::Graph& g, const std::map<std::string, Tensor>& inputs,
                    const std::map<std::string, Tensor>& weights = {}, exec::Mode mode = exec::Mode::full) {
    auto wbytes = [&](const ir::Value& v, void* dst, size_t n) {
        const Tensor& t = weights.at(v.name);
        REQUIRE(t.nbytes() == n);
        std::memcpy(dst, t.bytes.data(), n);
    };
    auto wcpu = [&](const ir::Value& v) { return weights.at(v.name); };
    auto gpu = exec::run_graph(op_ctx(), g, wbytes, inputs, mode);
    INFO("last validation message: " << vk::Context::last_validation_message());
    CHECK(vk::Context::validation_errors() == 0);
    auto cpu = cpu::run(g, inputs, wcpu);
    return {gpu.at("y").to_f32(), cpu.at("y").to_f32()};
}

// Runs g on Vulkan with fusion set by KILN_FUSE=`fuse` ("0", "1" or "all", see exec::Executor); returns every
// output and the executor's counters (dispatches_per_run, nodes_fused).
struct VkRun {
    std::map<std::string, Tensor> out;
    exec::Counters c;
};
inline VkRun run_vk(const ir::Graph& g, const std::map<std::string, Tensor>& inputs,
                    const std::map<std::string, Tensor>& weights, exec::Mode mode, const char* fuse) {
    auto wbytes = [&](const ir::Value& v, void* dst, size_t n) {
        const Tensor& t = weights.at(v.name);
        REQUIRE(t.nbytes() == n);
        std::memcpy(dst, t.bytes.data(), n);
    };
    ::setenv("KILN_FUSE", fuse, 1);
    exec::Executor ex(op_ctx(), g, wbytes, mode);
    ::unsetenv("KILN_FUSE");
    for (auto& [name, t] : inputs) ex.set_input(name, t);
    ex.run();
    VkRun r;
    for (auto& [name, v] : g.outputs()) r.out[name] = ex.output(name);
    r.c = ex.counters();
    INFO("last validation message: " << vk::Context::last_validation_message());
    CHECK(vk::Context::validation_errors() == 0);
    return r;
}

// run_vk (fusion on) with environment variable `name` set to `value` while the executor plans (KILN_CONV2D,
// KILN_ATTENTION, ...).
inline VkRun run_vk_env(const char* name, const char* value, const ir::Graph& g,
                        const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& weights) {
    ::setenv(name, value, 1);
    VkRun r = run_vk(g, inputs, weights, exec::Mode::full, "1");
    ::unsetenv(name);
    return r;
}

// rope cos/sin tables [S, half] as Flux builds them: angle = pos * theta^(-i/half) (positions scrambled: t * 3 % 17),
// computed in f64, cast to f32.
inline std::pair<Tensor, Tensor> rope_tables(int64_t S, int64_t half) {
    Tensor c(DType::f32, {S, half}), s(DType::f32, {S, half});
    for (int64_t t = 0; t < S; ++t)
        for (int64_t i = 0; i < half; ++i) {
            double a = (double)(t * 3 % 17) * std::pow(10000.0, -(double)i / (double)half);
            c.data<float>()[t * half + i] = (float)std::cos(a);
            s.data<float>()[t * half + i] = (float)std::sin(a);
        }
    return {c, s};
}

// Max |a - b| over elements; NaN anywhere counts as infinite.
inline double max_err(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        double d = std::abs((double)a[i] - (double)b[i]);
        if (!(d == d)) return INFINITY;
        m = std::max(m, d);
    }
    return m;
}

// Max |a - b| / max(|b|, floor): relative error per element, absolute below `floor`.
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b, double floor) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        double d = std::abs((double)a[i] - (double)b[i]) / std::max(std::abs((double)b[i]), floor);
        if (!(d == d)) return INFINITY;
        m = std::max(m, d);
    }
    return m;
}

inline std::string dtype_case(DType t) { return dtype_name(t); }

}  // namespace kiln::test
