#pragma once
// One descriptor per component kind that has a forward graph (the registry's transformers, VAEs and text encoders):
// how named inputs become its graph, plausible inputs for benchmarks and tests, and what the text-to-image plan
// reads from a transformer's config. build_component, example_inputs (forward.h) and plan_t2i look the kind up here
// rather than each switching over ComponentKind: a new family is one entry (component_ops_*.cpp) beside its
// functions. The tokenizer kinds have none.
#include <map>
#include <string>
#include <vector>

#include "models/core/forward.h"
#include "models/registry/registry.h"

namespace kiln::models {

using Inputs = std::map<std::string, Tensor>;

// What plan_t2i reads from a text-to-image transformer's config (out_channels 0: the config does not say).
struct TransformerShape {
    int in_channels = 0, patch = 1, sample_size = 0, layers = 0, out_channels = 0;
};

struct ComponentOps {
    ComponentKind kind;
    // Builds the graph of class `cls` (of kind `kind`) for the inputs' shapes into b; returns the inputs converted to
    // what the graph takes (timestep f32, class_labels i32, host-side tables, ...).
    Inputs (*prepare)(Builder& b, ComponentKind kind, const std::string& cls, const nlohmann::json& config,
                      const Inputs& inputs, const ComponentOptions& co);
    // Plausible inputs at batch B and a latent of h x w (example_inputs); nullptr: none (the KL VAE).
    Inputs (*example)(ComponentKind kind, const nlohmann::json& config, int B, int h, int w) = nullptr;
    // The transformers of the text-to-image families (Family::text_to_image); nullptr for the others.
    TransformerShape (*plan_shape)(const nlohmann::json& config) = nullptr;
};

// The descriptor of `kind` (component_ops.cpp: the one table, keyed by kind, of the entries below); nullptr for a kind
// without a forward graph (the tokenizers).
const ComponentOps* find_component_ops(ComponentKind kind);

// The entries, by role (component_ops_transformers.cpp, component_ops_vae.cpp, component_ops_text.cpp).
const std::vector<ComponentOps>& transformer_component_ops();
const std::vector<ComponentOps>& vae_component_ops();
const std::vector<ComponentOps>& text_encoder_component_ops();

// For the entries: the input `name`, or an error naming the class and the input.
const Tensor& need_input(const Inputs& in, const std::string& name, const std::string& cls);
// For the example inputs: an f32 tensor of deterministic values in [-1, 1].
Tensor example_ramp(Shape shape);

}  // namespace kiln::models
