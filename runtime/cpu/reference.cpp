#include "runtime/cpu/reference.h"

#include "runtime/core/error.h"

namespace kiln::cpu {

std::map<std::string, Tensor> run(const ir::Graph& g, const std::map<std::string, Tensor>& inputs,
                                  const WeightFn& weights) {
    using Fn = void (*)(const ir::Graph&, const ir::Node&, Vals&);
    static const Fn table[] = {
#define KILN_X(name, kind) &name,
        KILN_OPS(KILN_X)
#undef KILN_X
    };
    Vals vals(g.values().size());
    for (size_t i = 0; i < g.values().size(); ++i) {
        const ir::Value& v = g.values()[i];
        if (v.role == ir::Role::input) {
            auto it = inputs.find(v.name);
            KILN_CHECK(it != inputs.end(), "missing input '", v.name, "'");
            KILN_CHECK(it->second.shape == v.shape, "input '", v.name, "' has shape ", shape_str(it->second.shape),
                       ", the graph expects ", shape_str(v.shape));
            vals[i] = it->second.to_f32();
        } else if (v.role == ir::Role::weight) {
            Tensor t = weights(v);
            KILN_CHECK(t.shape == v.shape, "weight '", v.name, "' has shape ", shape_str(t.shape), ", expected ",
                       shape_str(v.shape));
            vals[i] = t.to_f32();
        }
    }
    for (const ir::Node& n : g.nodes()) {
        KILN_CHECK(n.views.empty(), "CPU reference: ", ir::op_name(n.op),
                   " reads a slice in place (a fused graph); run the graph as built");
        for (int o : ir::node_outputs(n))
            if (o >= 0) vals[(size_t)o].assign((size_t)shape_numel(g.value(o).shape), 0.f);
        table[(int)n.op](g, n, vals);
        // Activations stored as f16 (ir::store_f16): rounded once where written, as the shader's store does.
        for (int o : ir::node_outputs(n))
            if (o >= 0 && g.value(o).dtype == DType::f16)
                for (float& x : vals[(size_t)o]) x = f16_to_f32(f32_to_f16(x));
    }
    std::map<std::string, Tensor> out;
    for (auto& [name, id] : g.outputs()) out[name] = Tensor::from_f32(g.value(id).shape, vals[(size_t)id]);
    return out;
}

}  // namespace kiln::cpu
