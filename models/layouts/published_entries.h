#pragma once
// Internal to kiln_layouts: one published model as its repository's files (published_configs*.cpp).
#include <string>
#include <utility>
#include <vector>

namespace kiln::layouts::detail {

struct PublishedEntry {
    const char* id;
    const char* family;  // layouts::Detected::family of its transformer
    const char* repo;
    std::string model_index;
    std::vector<std::pair<const char*, std::string>> configs;  // component -> file text
    std::vector<std::string> tokenizers;
};

// FLUX.1's vae/config.json (published_configs.cpp), which Z-Image-Turbo publishes too.
const char* flux1_vae_config();

// SD3 medium, SD3.5 medium and large (published_configs_sd3.cpp).
std::vector<PublishedEntry> sd3_published_entries();

// Z-Image-Turbo and FLUX.2 [klein] 4B / 9B, with their Qwen3 text encoders (published_configs_qwen3.cpp).
std::vector<PublishedEntry> qwen3_published_entries();

}  // namespace kiln::layouts::detail
