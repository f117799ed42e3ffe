#pragma once
// Work counted from the IR, for the bench's cost model (docs/benchmarks.md#the-cost-model): FLOPs (multiply-add = 2)
// of each node, the bytes every op reads and writes once, and bytes_min, the traffic of an ideal plan. The traffic of
// the dispatches as planned (tiles re-reading their operands) is vk::traffic (runtime/vulkan/traffic.h).
#include <cstdint>

#include "runtime/ir/graph.h"

namespace kiln::ir {
struct Cost {
    double flops = 0, bytes = 0;
};
// Every compute node's FLOPs, and each op's inputs and outputs once (a lower bound on an unfused plan's traffic).
Cost count_cost(const Graph& g);
// FLOPs of node n: 2 M N K for a linear (each part of a linear_multi), 2 B M N K for a matmul, 4 B Sq Sk W for
// attention (Q K^T and P V; W = heads x head_dim), 2 x outputs x fan-in for conv2d; 2 per output for mul_add and
// 1 per output element for every other op (views: 0).
double node_flops(const Graph& g, const Node& n);
// The bytes an ideal plan moves: every weight once, plus the inputs and outputs of each unit, where a unit is one
// block instance (a Region) or a run of nodes between blocks: what a unit reads that it did not make, and what it
// makes that a later unit or the graph's outputs read. A view's bytes are its source's.
double min_bytes(const Graph& g);
}  // namespace kiln::ir
