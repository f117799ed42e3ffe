// The lookup of the component descriptors (component_ops.h) and the helpers their entries share.
#include "models/core/component_ops.h"

#include <vector>

#include "runtime/core/error.h"

namespace kiln::models {

const Tensor& need_input(const Inputs& in, const std::string& name, const std::string& cls) {
    auto it = in.find(name);
    KILN_CHECK(it != in.end(), cls, ": missing input '", name, "'");
    return it->second;
}

Tensor example_ramp(Shape shape) {
    Tensor t(DType::f32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (float)((i * 7919) % 2001) / 1000.f - 1.f;
    return t;
}

const ComponentOps* find_component_ops(ComponentKind kind) {
    static const std::vector<ComponentOps> table = [] {
        std::vector<ComponentOps> v = transformer_component_ops();
        for (const auto* part : {&vae_component_ops(), &text_encoder_component_ops()})
            v.insert(v.end(), part->begin(), part->end());
        return v;
    }();
    for (const ComponentOps& o : table)
        if (o.kind == kind) return &o;
    return nullptr;
}

}  // namespace kiln::models
