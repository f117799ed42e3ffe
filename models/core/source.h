#pragma once
// A model source: a Kiln model file (GGUF, from kiln-convert), a diffusers pipeline folder
// (model_index.json + transformer/, vae/, scheduler/), a diffusers component folder, or a pipeline assembled from
// component files (single files in other projects' layouts, converter/assemble.h).
// Gives each component's class, config and weights.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/assemble.h"
#include "models/core/weights.h"
#include "models/registry/registry.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/file_io.h"

namespace kiln::models {

class ModelSource {
public:
    static ModelSource open(const std::string& path);
    // A pipeline with a real architecture and random weights in memory ("dit-xl-2-256", "dit-xl-2-512"):
    // DiT transformer, Stable Diffusion's VAE, DPM-Solver++ scheduler. For timing without downloads.
    // The pipeline of component files (converter/assemble.h): single files in other layouts, folders, Kiln files.
    static ModelSource assemble(const converter::Assembly& a);
    static ModelSource synthetic(const std::string& arch, DType weight_dtype = DType::f16);
    const std::string& path() const { return path_; }
    const std::vector<std::string>& components() const { return components_; }
    bool has(const std::string& component) const;
    std::string class_of(const std::string& component) const;  // diffusers _class_name
    const nlohmann::json& config(const std::string& component) const;
    std::unique_ptr<WeightStore> weights(const std::string& component) const;
    // The files of a tokenizer component (vocab.json, merges.txt, spiece.model, tokenizer_config.json, ...).
    text::TokenizerFiles tokenizer_files(const std::string& component) const;
    const nlohmann::json& model_index() const { return model_index_; }  // {} for a single component
    // Assembled from component files: "" when it can generate, else what is missing and the flag that gives it.
    const std::string& incomplete() const { return incomplete_; }
    // Assembled: what came from where without a flag saying so (Assembly::notes), one line each for the log.
    const std::vector<std::string>& notes() const { return notes_; }
    // Throws kiln::Error (ErrorKind::io) naming the file when a file the weights or tokenizers are read from has
    // changed on disk (size, mtime or inode) since open(). weights() and tokenizer_files() call it first; a reader
    // that maps the file must call it before touching the mapping (a truncated mapping raises SIGBUS).
    void check_unchanged() const;

private:
    std::string path_;
    bool kiln_file_ = false;
    bool synthetic_ = false;
    DType synthetic_dtype_ = DType::f16;
    std::vector<std::string> components_;
    std::map<std::string, nlohmann::json> configs_;
    std::map<std::string, std::string> dirs_;       // diffusers: component -> folder
    std::map<std::string, converter::Part> parts_;  // assembled: component -> where it comes from
    std::string incomplete_;                        // assembled: what is missing (Assembly::incomplete)
    std::vector<std::string> notes_;                // assembled: Assembly::notes
    nlohmann::json model_index_;
    std::vector<std::pair<std::string, FileStamp>> stamps_;  // the files read after open()
};

// The role of a component class as the registry (models/registry/registry.h) lists it: "transformer", "vae",
// "text_encoder" or "tokenizer"; "scheduler" for schedulers, "transformer" for other *Transformer* classes
// (refused where they are built); "" otherwise.
std::string component_role(const std::string& class_name);

// The registry family of src's transformer (DiT, PixArt, SD3, Flux, Sana, Sana-Sprint; model_index.json's pipeline
// class where families share the transformer class); nullptr without a transformer or for a class no family runs.
const Family* model_family(const ModelSource& src);

}  // namespace kiln::models
