#pragma once
// The tensor names each supported diffusers class must have, generated from its config.json the way
// the diffusers constructors build their modules (names only; shapes are checked by the runtime).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::converter {

// A repeated block kind, e.g. "transformer_blocks": blocks 0..count-1 named "<kind>.<i>.<rel>".
// variant[i] says which layout block i has: consecutive blocks of one variant must be identical
// (same relative names, shapes, dtypes); a new variant starts a new run (SD3's last block is
// context_pre_only, its dual-attention blocks have attn2).
struct BlockKind {
    std::string name;
    int64_t count = 0;
    std::vector<int> variant;
};

struct ArchSpec {
    std::string component;              // "transformer", "vae" or "text_encoder"
    std::vector<std::string> expected;  // every tensor name the checkpoint must hold
    std::vector<BlockKind> blocks;
    // Old checkpoint names diffusers renames at load (VAE attention: query -> to_q ...): {old suffix, new}.
    std::vector<std::pair<std::string, std::string>> renames;
    // Whole checkpoint names transformers also accepts: {alias, canonical}. An alias is renamed to the
    // canonical name, or dropped when the canonical tensor is there too (tied weights saved twice).
    std::vector<std::pair<std::string, std::string>> aliases;
    // Name prefixes that transformers ignores at load (CLIP's position_ids buffer, T5's decoder): dropped.
    std::vector<std::string> ignored;
    // 1x1 convolution weights [O, C, 1, 1] that the model reads as the matrix [O, C] of a linear over channels-last
    // tokens (Builder::matrix_1x1): stored 2-D, so --dtype quantizes them like every linear weight.
    std::vector<std::string> matrices_1x1;
    std::string weights_base = "diffusion_pytorch_model";  // transformers: "model"
};

// Supported model classes (the registry's transformers, VAE and text encoders) and scheduler classes.
const std::vector<std::string>& supported_model_classes();
const std::vector<std::string>& supported_scheduler_classes();
bool is_supported_scheduler(const std::string& cls);

// Builds the spec of `cls` from its parsed config; `where` (the config path) names errors.
// Throws kiln::Error for an unknown class (listing the supported ones) or an unsupported config.
ArchSpec arch_spec(const std::string& cls, const nlohmann::json& config, const std::string& where);

// Applies spec.renames to a checkpoint name (returns it unchanged when none applies).
std::string canonical_name(const ArchSpec& spec, const std::string& name);

}  // namespace kiln::converter
