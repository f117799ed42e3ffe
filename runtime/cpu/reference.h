#pragma once
// The CPU reference executor: naive f32 with f64 accumulation, written to be obviously right.
// It is the oracle every GPU test compares against.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/ir/graph.h"

namespace kiln::cpu {

// Supplies the host tensor of a weight value (by Value::name); any float dtype, converted to f32.
using WeightFn = std::function<Tensor(const ir::Value&)>;

// Runs every node in order; returns the graph outputs by name (f32).
std::map<std::string, Tensor> run(const ir::Graph& g, const std::map<std::string, Tensor>& inputs,
                                  const WeightFn& weights);

// The activation of gelu / silu and of a fused linear (ir::Act) on one f32 value, computed in f64.
float activate(ir::Act act, float x);

// Per-op references: read their inputs from vals[node.in[i]] and write vals[node.out].
using Vals = std::vector<std::vector<float>>;
#define KILN_X(name, kind) void name(const ir::Graph& g, const ir::Node& n, Vals& vals);
KILN_OPS(KILN_X)
#undef KILN_X

}  // namespace kiln::cpu
