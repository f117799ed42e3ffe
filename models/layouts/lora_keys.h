#pragma once
// Internal to kiln_layouts: a LoRA file's keys -> diffusers' modules, per layout (lora_keys.cpp), for lora.cpp.
#include <string>
#include <vector>

#include "models/layouts/lora.h"

namespace kiln::layouts::lora_keys {

bool starts_with(const std::string& s, const std::string& p);
bool ends_with(const std::string& s, const std::string& p);

enum class Role { down, up, alpha };

// One LoRA module of the file: its keys and the diffusers modules it goes to.
struct Group {
    std::string a_key, b_key, alpha_key;
    std::string component = "transformer";
    std::vector<std::string> modules;
    bool swap = false;
};

struct Layout {
    std::string name;    // for LoraFile::layout
    std::string family;  // the family it is written for ("" when the names do not say)
};

// Splits a key into its module path and role, strips the layout's prefix. False: not a LoRA key at all.
bool split_key(const std::string& key, std::string& module, Role& role);
// The layout of a file's keys, and the family its names are written for.
Layout guess_layout(const std::vector<std::string>& keys);
// The diffusers modules of a module path in the file's layout for a transformer of `family` ("Flux", "SD3"), whose
// weights `target` knows; false when no module of the layout has that name.
bool resolve_module(const Layout& l, const std::string& family, const std::string& path, const LoraTargetFn& target,
                    Group& g);

// A text-encoder key's module path (split_key's, suffix removed) -> the encoder (1 CLIP-L, 2 CLIP-G / Flux's T5, 3
// T5) and the rest of the path; 0 for a transformer key.
int text_encoder_index(const std::string& path, std::string& rest);
bool is_text_encoder_key(const std::string& k);
// transformers' CLIP module of a text-encoder key's path ("text_model.encoder.layers.0.self_attn.q_proj"), "" for
// anything that is no CLIP linear.
std::string clip_module(std::string p);

}  // namespace kiln::layouts::lora_keys
