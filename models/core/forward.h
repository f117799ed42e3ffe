#pragma once
// Runs one component of a model on named inputs (diffusers argument names) and returns the named
// outputs of the fixtures' io.json: the engine behind `kiln forward` and the parity tests.
#include <map>
#include <string>
#include <vector>

#include "models/core/source.h"
#include "models/registry/registry.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

// Builds the graph of `component` for the given input shapes (into g, via b), and returns the
// inputs converted to what the graph takes (timestep f32, class_labels i32, ...).
// What a pipeline call changes in a component's graph (diffusers' call arguments, not the config).
struct ComponentOptions {
    int clip_skip = 0;             // CLIP text models: also output hidden_states[-(clip_skip + 2)] (build_clip_text)
    std::vector<int> skip_layers;  // SD3's transformer: blocks left out (forward(skip_layers=...)), SD3's SLG
};

std::map<std::string, Tensor> build_component(Builder& b, const std::string& cls, const nlohmann::json& config,
                                              const std::map<std::string, Tensor>& inputs,
                                              const ComponentOptions& co = {});

// Plausible inputs for a component class (random latents, mid timestep, ...) at batch B and a latent of
// h x w: for `kiln bench` and tests.
std::map<std::string, Tensor> example_inputs(const std::string& cls, const nlohmann::json& config, int B, int h, int w);

// Real architectures by name for `kiln bench --synthetic` (config as diffusers' config.json).
struct SyntheticArch {
    std::string cls;  // the class name, as config["_class_name"]
    nlohmann::json config;
    int latent = 32;  // latent side at the architecture's native resolution
    ComponentKind kind = ComponentKind::dit;
};
const std::map<std::string, SyntheticArch>& synthetic_archs();

// ctx == nullptr runs the CPU reference.
std::map<std::string, Tensor> forward_component(vk::Context* ctx, const ModelSource& src, const std::string& component,
                                                const std::map<std::string, Tensor>& inputs,
                                                exec::Mode mode = exec::Mode::regional,
                                                const ComponentOptions& co = {});

}  // namespace kiln::models
