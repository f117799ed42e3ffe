#pragma once
// The published models Kiln recognises in a single file by its tensor shapes, with the configs their diffusers
// repositories publish (single files carry no config, scheduler or tokenizer), and where their tokenizers are found.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/layouts/layouts.h"

namespace kiln::layouts {

struct Published {
    std::string id;      // "flux-dev", "flux-schnell", "sd3-medium", "sd3.5-medium", "sd3.5-large", "z-image-turbo",
                         // "flux2-klein-4b", "flux2-klein-9b"
    std::string family;  // layouts::Detected::family: "flux", "sd3", "z_image", "flux2"
    std::string repo;    // the diffusers repository: "black-forest-labs/FLUX.1-dev", ...
    nlohmann::json model_index;                     // model_index.json as published
    std::map<std::string, nlohmann::json> configs;  // component -> config.json / scheduler_config.json, _class_name set
    std::vector<std::string> tokenizers;            // tokenizer components: "tokenizer", "tokenizer_2", ...
};

const std::vector<Published>& published_models();
// The published model whose transformer has exactly these tensors' shapes (diffusers names), or nullptr.
const Published* recognize(const std::string& family, const TensorSet& transformer);

// Tokenizer component -> folder for `p`: from `dir` (a pipeline folder with tokenizer*/ subfolders, or a folder
// holding them directly), else the Hugging Face cache (hf_home/hub, or when hf_home is empty Settings::hf_home from
// the settings table: HF_HOME, else ~/.cache/huggingface; models--<org>--<name>/snapshots/*/tokenizer*, refs/main's
// snapshot first). Throws one line naming the files to fetch and the repository.
std::map<std::string, std::string> find_tokenizers(const Published& p, const std::string& dir,
                                                   const std::string& hf_home);

}  // namespace kiln::layouts
