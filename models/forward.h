#pragma once
// Runs one component of a model on named inputs (diffusers argument names) and returns the named
// outputs of the fixtures' io.json: the engine behind `kiln forward` and the parity tests.
#include <map>
#include <string>

#include "models/source.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

// Builds the graph of `component` for the given input shapes (into g, via b), and returns the
// inputs converted to what the graph takes (timestep f32, class_labels i32, ...).
std::map<std::string, Tensor> build_component(Builder& b, const std::string& cls, const nlohmann::json& config,
                                              const std::map<std::string, Tensor>& inputs);

// ctx == nullptr runs the CPU reference.
std::map<std::string, Tensor> forward_component(vk::Context* ctx, const ModelSource& src, const std::string& component,
                                                const std::map<std::string, Tensor>& inputs,
                                                exec::Mode mode = exec::Mode::regional);

}  // namespace kiln::models
