#include "runtime/ir/cost.h"

namespace kiln::ir {

Cost count_cost(const Graph& g) {
    Cost c;
    auto bytes = [&](int v) {
        return v < 0 ? 0.0 : (double)dtype_nbytes(g.value(v).dtype, shape_numel(g.value(v).shape));
    };
    for (const Node& n : g.nodes()) {
        if (op_kind(n.op) == OpKind::view) continue;
        for (int v : n.in) c.bytes += bytes(v);
        for (int o : node_outputs(n)) c.bytes += bytes(o);
        const Shape& o = g.value(n.out).shape;
        double out = (double)shape_numel(o);
        switch (n.op) {
            case Op::linear:
                c.flops += 2.0 * out * (double)g.value(n.in[1]).shape[1];
                break;
            case Op::linear_multi:
                for (int o : node_outputs(n))
                    if (o >= 0)
                        c.flops += 2.0 * (double)shape_numel(g.value(o).shape) * (double)g.value(n.in[1]).shape[1];
                break;
            case Op::matmul:
                c.flops += 2.0 * out * (double)g.value(n.in[0]).shape[2];
                break;
            case Op::attention: {
                const Shape& k = g.value(n.in[1]).shape;  // QK^T and PV: 2 * 2 * B*Sq*Sk*W
                c.flops += 4.0 * (double)o[0] * (double)o[1] * (double)k[1] * (double)o[2];
                break;
            }
            case Op::conv2d: {
                const Shape& w = g.value(n.in[1]).shape;
                c.flops += 2.0 * out * (double)(w[1] * w[2] * w[3]);
                break;
            }
            case Op::mul_add:
                c.flops += 2.0 * out;
                break;
            default:
                c.flops += out;
                break;
        }
    }
    return c;
}

}  // namespace kiln::ir
