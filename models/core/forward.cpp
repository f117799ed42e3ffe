#include "models/core/forward.h"

#include <algorithm>

#include "models/core/component_ops.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"

namespace kiln::models {

namespace {
// The kind of a class that has a forward graph; throws listing those classes.
ComponentKind forward_kind(const std::string& cls) {
    const ComponentClass* c = find_component_class(cls);
    KILN_CHECK(c && c->role != Role::tokenizer, "no forward for class '", cls,
               "' (supported: ", class_list({Role::transformer, Role::vae, Role::text_encoder}), ")");
    return c->kind;
}
}  // namespace

std::map<std::string, Tensor> build_component(Builder& b, const std::string& cls, const nlohmann::json& config,
                                              const std::map<std::string, Tensor>& inputs, const ComponentOptions& co) {
    const ComponentKind kind = forward_kind(cls);
    KILN_CHECK(co.clip_skip == 0 || kind == ComponentKind::clip_text || kind == ComponentKind::clip_text_projection,
               cls, ": clip_skip applies to CLIP text models");
    KILN_CHECK(co.skip_layers.empty() || kind == ComponentKind::sd3, cls, ": skip_layers applies to ",
               class_name(ComponentKind::sd3));
    const ComponentOps* ops = find_component_ops(kind);
    KILN_CHECK(ops, "internal: no forward for class '", cls, "'");  // forward_kind refuses the tokenizers
    std::map<std::string, Tensor> in = ops->prepare(b, kind, cls, config, inputs, co);
    for (auto& [name, t] : b.lora_scale_values()) in[name] = t;  // the runtime LoRAs' scales (Builder::lora_side)
    return in;
}

std::map<std::string, Tensor> example_inputs(const std::string& cls, const nlohmann::json& cfg, int B, int h, int w) {
    const ComponentClass* k = find_component_class(cls);
    const ComponentOps* ops = k ? find_component_ops(k->kind) : nullptr;  // a tokenizer has no inputs here
    KILN_CHECK(ops && ops->example, "no example inputs for class '", cls, "'");
    return ops->example(k->kind, cfg, B, h, w);
}

std::map<std::string, Tensor> forward_component(vk::Context* ctx, const ModelSource& src, const std::string& component,
                                                const std::map<std::string, Tensor>& inputs, exec::Mode mode,
                                                const ComponentOptions& co) {
    auto ws = src.weights(component);
    ir::Graph g;
    Builder b(g, *ws);
    auto in = build_component(b, src.class_of(component), src.config(component), inputs, co);
    std::map<std::string, Tensor> out;
    if (ctx) {
        if (mode == exec::Mode::regional && g.regions().size() < 2) mode = exec::Mode::full;  // nothing to replay
        out = exec::run_graph(*ctx, g, b.weight_fn(), in, mode);
    } else {
        out = cpu::run(g, in, cpu_weights(*ws, b.constants()));
    }
    // DiagonalGaussianDistribution clamps logvar to [-30, 20].
    if (auto it = out.find("latent_logvar_raw"); it != out.end()) {
        Tensor t = it->second;
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::clamp(t.data<float>()[i], -30.f, 20.f);
        out.erase(it);
        out["latent_logvar"] = t;
    }
    return out;
}

}  // namespace kiln::models
