#pragma once
// The traffic model of one dispatch (docs/benchmarks.md#the-cost-model): the bytes its workgroups read and write as
// its tiling implies, not just the sizes of its buffers. One table keyed by shader family (traffic.cpp): a tiled GEMM
// reads x once per column tile and W once per row tile, attention reads K and V once per query tile, and so on, all
// from the dispatch's group counts, so a lowering that changes a kernel's tiles changes its cost with them. Every
// binding not named there is read (or written) once. A model of DRAM traffic with no cache between workgroups: real
// devices hit their L2 for part of the re-reads.
#include <vector>

#include "runtime/ir/graph.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {

struct Traffic {
    double read = 0, written = 0;  // bytes, with no cache between workgroups
    // Each input binding its workgroups read more than once: its bytes, how many times (1 + the re-reads of this
    // entry), and its reuse set: the bytes the dispatch touches between two reads of the same bytes, in its
    // workgroups' order (x-fastest group ids), e.g. a linear's x once per column tile: its band's row panels and one
    // W tile. A binding whose re-reads have two reuse sets has two entries, e.g. a linear's W: re-read by the next row
    // tile of a band (one W tile and a panel in between) and by the next band (all of W and a band's panels).
    struct Reread {
        double bytes = 0, times = 1, reuse = 0;
    };
    std::vector<Reread> rereads;
};

// The bytes t moves to and from memory on a device whose last-level cache holds `cache` bytes: a re-read binding
// is read once where its reuse set fits half the cache (the rest for everything else in flight), else every time
// (a cyclic sweep larger than an LRU cache hits nothing). cache 0: t.read + t.written.
double memory_bytes(const Traffic& t, double cache);

// Dispatch d of node n (d.groups its tile counts). bound[b] is what binding b (node.in in order, then the node's
// outputs) covers in this dispatch: the value's bytes, its input view's, or a row chunk's; 0 for an absent one. A
// block weight selected on the device is one instance's bytes, not the bound range of all instances.
Traffic traffic(const ir::Graph& g, const ir::Node& n, const Dispatch& d, const std::vector<double>& bound);
// The two dispatches of a split-K linear (d.scratch > 0; shaders/linear_splitk.glsl), reduce false / true: the partial
// pass reads x once per column tile and W once per row tile, as the unsplit kernel does (each of the S workgroups of
// a tile reads its K range), and writes the S M N f32 partials (d.scratch bytes); the reduce reads them, the bias once
// per row tile and a gated linear's gate and residual once, and writes y.
Traffic traffic_splitk(const ir::Graph& g, const ir::Node& n, const Dispatch& d, const std::vector<double>& bound,
                       bool reduce);

// The matrix products dispatch d of node n runs per multiply-add of its FLOPs (ir::node_flops): its operands' f16
// splits (docs/precision.md). The tiled GEMM (coopmat*, gemm*: the scalar twin runs the same products) 1 + (x stored
// f32: hi + lo) + (ggml-block W: hi + lo), KILN_PRECISION=fast (its constant 13) 1; the cooperative-matrix attention
// kernels (coopmat, coopmat4) q split and k, v split unless stored f16, over Q K^T and P V alike: (2 + k f32 + 2 +
// v f32) / 2, fast 1. 1 for every other kernel.
double products_per_term(const ir::Graph& g, const ir::Node& n, const Dispatch& d);
// Whether dispatch d multiplies on the device's matrix units: the cooperative-matrix kernels (linear coopmat*, cm2;
// attention coopmat, coopmat4) and, as the plans a GPU's table would make (KILN_LINEAR=gemm128 on lavapipe), the
// tiled GEMM's scalar twins (gemm*: the same tiles and products). Every other kernel runs on the ALUs.
bool matrix_units(const Dispatch& d);

}  // namespace kiln::vk
