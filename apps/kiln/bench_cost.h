#pragma once
// kiln bench's cost report (bench_cost.cpp; docs/benchmarks.md#the-cost-model): the executor's cost model of one step
// (exec::StepCost) and the floor it implies on named devices. A model, not a measurement.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/exec/executor.h"

namespace kiln::app {

// A device's public peak figures: dense f16 FLOP/s (matrix units, f32 accumulation where the vendor says) and
// memory bandwidth; where the vendor publishes no FLOP figure, derived as `source` says. alu_flops_per_s: f32 FMA
// FLOP/s off the matrix units (the scalar kernels: vk::matrix_units false).
struct CostDevice {
    const char* name;
    double flops_per_s, bytes_per_s;
    const char* source;
    double cache_bytes = 0;  // last-level cache (vk::memory_bytes); 0 where the vendor gives none
    const char* cache_source = "";
    double alu_flops_per_s = 0;
    const char* alu_source = "";
};
const std::vector<CostDevice>& cost_devices();

// The floor of one step on d: per dispatch max(executed FLOPs / peak, memory bytes / bandwidth), the peak of the
// matrix units or the ALUs as its kernel runs (DispatchCost::matrix), times its executions, summed
// (ms). Memory bytes: the dispatch's bytes less the re-reads its tiling leaves to d's last-level cache
// (vk::memory_bytes).
double floor_ms(const exec::StepCost& c, const CostDevice& d);
// A mode's "cost" object: flops, bytes, bytes_min, dispatches, submits, barriers, floor_ms {device: ms} (exactly
// these: other checks read them; the floors use the executed FLOPs, the mode's flops_executed_per_step).
nlohmann::json cost_json(const exec::StepCost& c);
// One shader's share of a step: its executions, FLOPs (node and executed), bytes, and its dispatches' floor on each
// of cost_devices() (ms, in that order).
struct ShaderCost {
    std::string shader;
    int count = 0;
    double flops = 0, flops_executed = 0, bytes = 0;
    std::vector<double> floor_ms;
};
// Per shader, largest H200 floor first: where the step's time would go on the card of the side by side.
std::vector<ShaderCost> shader_costs(const exec::StepCost& c);
// A mode's "cost_by_shader": per shader name, its executions, FLOPs, bytes per step and floor_ms {device: ms}
// (summed over the shaders, the mode's floor_ms).
nlohmann::json cost_by_shader(const exec::StepCost& c);
// The report's "cost_model": what the figures are, and each device's peaks and their source.
nlohmann::json cost_model_json();
// --cost: one row of the cost table (header first when asked).
void print_cost(const std::string& label, const exec::StepCost& c, bool header);
// --cost-by-shader: under a mode's cost row, a table of its shaders (shader_costs' order).
void print_cost_by_shader(const exec::StepCost& c);

}  // namespace kiln::app
