#pragma once
// kiln bench's comparisons beyond the per-mode rows (bench_compare.cpp): the streaming sweep and the interleaved
// modes; and the timing helpers they share with cmd_bench.cpp.
#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/core/forward.h"
#include "models/core/weights.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/graph.h"

namespace kiln::app {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// --stream: regional step time against the device budget (points: --stream-budgets), each output compared bitwise
// with the all-resident one; printed, and returned as the report's "stream".
nlohmann::json stream_sweep(vk::Context& ctx, const ir::Graph& g, const models::Builder& b,
                            const std::map<std::string, Tensor>& in, exec::BlockWeights bw, exec::Budget base,
                            int warmup, int steps, const std::string& points);
// --interleave: rounds of one step per mode; printed, and returned as the report's "interleaved".
nlohmann::json interleaved(vk::Context& ctx, const ir::Graph& g, const models::Builder& b,
                           const std::map<std::string, Tensor>& in, const std::vector<exec::Mode>& modes,
                           exec::BlockWeights bw, const exec::Budget& budget, int warmup, int rounds);

// --lora-ranks: per rank, a LoRA on the transformer's block linears (bench_lora.cpp): its load time, the weight
// bytes it adds to the plan, and the regional step time with the runtime side path against none; printed, and
// returned as the report's "lora".
nlohmann::json lora_rows(vk::Context& ctx, const models::WeightStore& ws, const models::SyntheticArch& arch,
                         const std::map<std::string, Tensor>& inputs, const std::vector<int>& ranks,
                         exec::BlockWeights bw, const exec::Budget& budget, int warmup, int steps);

}  // namespace kiln::app
