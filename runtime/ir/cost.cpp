#include "runtime/ir/cost.h"

#include <set>

namespace kiln::ir {

double node_flops(const Graph& g, const Node& n) {
    if (op_kind(n.op) == OpKind::view) return 0;
    const Shape& o = g.value(n.out).shape;
    const double out = (double)shape_numel(o);
    switch (n.op) {
        case Op::linear:  // a gated linear (ir::fuse) adds mul_add's product and sum
            return 2.0 * out * (double)g.value(n.in[1]).shape[1] + (n.in.size() > 3 ? 2.0 * out : 0.0);
        case Op::linear_multi: {
            double f = 0;
            for (int v : node_outputs(n))
                if (v >= 0) f += 2.0 * (double)shape_numel(g.value(v).shape) * (double)g.value(n.in[1]).shape[1];
            return f;
        }
        case Op::matmul:
            return 2.0 * out * (double)g.value(n.in[0]).shape[2];
        case Op::attention: {
            const Shape& k = g.value(n.in[1]).shape;  // QK^T and PV: 2 * 2 * B*Sq*Sk*W
            return 4.0 * (double)o[0] * (double)o[1] * (double)k[1] * (double)o[2];
        }
        case Op::conv2d: {
            const Shape& w = g.value(n.in[1]).shape;
            return 2.0 * out * (double)(w[1] * w[2] * w[3]);
        }
        case Op::mul_add:
            return 2.0 * out;
        case Op::add:  // with a fused activation (ir::fuse), that op's count too
        case Op::sub:
        case Op::mul:
        case Op::div:
            return std::holds_alternative<ActAttrs>(n.attrs) ? 2.0 * out : out;
        default:
            return out;
    }
}

Cost count_cost(const Graph& g) {
    Cost c;
    auto bytes = [&](int v) {
        return v < 0 ? 0.0 : (double)dtype_nbytes(g.value(v).dtype, shape_numel(g.value(v).shape));
    };
    for (const Node& n : g.nodes()) {
        if (op_kind(n.op) == OpKind::view) continue;
        for (int v : n.in) c.bytes += bytes(v);
        for (int o : node_outputs(n)) c.bytes += bytes(o);
        c.flops += node_flops(g, n);
    }
    return c;
}

double min_bytes(const Graph& g) {
    const auto& nodes = g.nodes();
    const auto& values = g.values();
    // The value a view's bytes belong to.
    std::vector<int> root(values.size());
    for (size_t v = 0; v < values.size(); ++v) {
        root[v] = (int)v;
        const int p = values[v].producer;
        if (p >= 0 && op_kind(nodes[(size_t)p].op) == OpKind::view) root[v] = root[(size_t)nodes[(size_t)p].in[0]];
    }
    // Units: a region's nodes, or a run of nodes outside regions (a new unit wherever the region changes).
    std::vector<int> unit(nodes.size());
    for (size_t n = 0, u = 0; n < nodes.size(); ++n) {
        if (n > 0 && nodes[n].region != nodes[n - 1].region) ++u;
        unit[n] = (int)u;
    }
    auto unit_of_value = [&](int v) {  // the unit that makes root value v, -1 for inputs and weights
        const int p = values[(size_t)v].producer;
        return p < 0 ? -1 : unit[(size_t)p];
    };
    auto nbytes = [&](int v) {
        return (double)dtype_nbytes(values[(size_t)v].dtype, shape_numel(values[(size_t)v].shape));
    };
    double total = 0;
    std::set<int> weights;                  // read anywhere: once
    std::set<std::pair<int, int>> counted;  // (unit, root) already counted as that unit's input or output
    for (size_t n = 0; n < nodes.size(); ++n) {
        if (op_kind(nodes[n].op) == OpKind::view) continue;
        for (int v : nodes[n].in) {
            if (v < 0) continue;
            const int r = root[(size_t)v];
            if (values[(size_t)r].role == Role::weight) {
                if (weights.insert(r).second) total += nbytes(r);
                continue;
            }
            const int made = unit_of_value(r);
            if (made == unit[n]) continue;
            // An input of this unit; the output of the unit that made it (once, however many units read it).
            if (counted.insert({unit[n], r}).second) total += nbytes(r);
            if (made >= 0 && counted.insert({made, r}).second) total += nbytes(r);
        }
    }
    for (auto& [name, v] : g.outputs()) {
        const int r = root[(size_t)v];
        const int made = unit_of_value(r);
        if (made >= 0 && counted.insert({made, r}).second) total += nbytes(r);
    }
    return total;
}

}  // namespace kiln::ir
