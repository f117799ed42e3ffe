#pragma once
// A pipeline assembled from the files people download: a single file holding some components (--model), separate
// component files (--diffusion-model, --vae, --clip-l, --clip-g, --t5xxl, --text-encoder; a --diffusion-model file that
// holds a VAE gives it too unless --vae or --model does), each a single file in another project's layout
// (models/layouts), a diffusers component folder or a Kiln file. Configs, scheduler and tokenizers come from
// --config DIR (a diffusers pipeline folder: only its *.json and tokenizer files are read, never weights), else from
// the published model the transformer's shapes identify (models/layouts/published.h) with its tokenizers from
// --tokenizers DIR or the Hugging Face cache. Weights always come from the files given.
// Vulkan-free: kiln-convert bundles an assembly into one Kiln file; ModelSource runs it.
#include <string>
#include <vector>

#include "converter/convert.h"
#include "models/layouts/layouts.h"

namespace kiln::converter {

struct ComponentFiles {
    std::string model;  // a single file in another layout holding one or more components
    std::string diffusion_model, vae, clip_l, clip_g, t5xxl;
    std::string llm;         // Z-Image, FLUX.2 [klein]: the Qwen3 text encoder (--text-encoder, --llm)
    std::string config;      // --config DIR
    std::string tokenizers;  // --tokenizers DIR
    std::string hf_home;     // Settings::hf_home: where the Hugging Face cache is
    bool any() const;        // a component file or --config given: the assembly path, not a folder or Kiln file
};

// Where one pipeline component comes from.
struct Part {
    enum class From {
        layout_file,    // a single file: models/layouts open_component(path, role)
        diffusers_dir,  // a diffusers or transformers component folder (config.json and weights)
        kiln_file,      // component `role` of a Kiln file
        tokenizer_dir,  // a tokenizer folder (transformers layout)
        config_only,    // the scheduler: its config is all there is
    };
    std::string name;         // the pipeline's component: "transformer", "vae", "text_encoder_2", "tokenizer", ...
    std::string cls;          // its class (_class_name, architectures[0] or tokenizer_class)
    std::string config_text;  // config JSON as read or published
    From from = From::config_only;
    std::string path;  // the file or folder
    std::string role;  // layout_file: the layouts role ("transformer", "clip_l", ...); kiln_file: the component
};

struct Assembly {
    std::string family;              // the registry Family::name of the transformer
    std::string configs_from;        // for messages and `kiln info`: "--config DIR" or "published FLUX.1-dev (repo)"
    std::string pipeline_class;      // model_index.json's _class_name
    std::string model_index_text;    // listing only the components of `parts`
    std::vector<Part> parts;         // transformer, vae, scheduler, text encoders, tokenizers
    std::string tokenizers_missing;  // why the tokenizers were not found (they are needed only to encode prompts)
    // What came from where without a flag saying so ("the VAE from sd3_medium.safetensors, ..."), for the log.
    std::vector<std::string> notes;
    const Part* find(const std::string& name) const;
    // "" when every component a generation needs is here; else one line naming what is missing and the flag (or
    // files) that gives it.
    std::string incomplete() const;
};

// Throws kiln::Error with one line naming the problem: a file of the wrong role for its flag (a VAE given as
// --clip-l), components of different families or sizes (an SD3 transformer with a Flux --config, CLIP-G given as
// CLIP-L), no transformer, a transformer of unknown size without --config, tokenizers not found (naming what to
// fetch). Components the family needs but no file gives are left out: incomplete() names them with their flags.
Assembly assemble(const ComponentFiles& files);

// The tensors of a layout_file or kiln_file part under diffusers' names. SD3's CLIP-L (a text model with projection
// from a clip_l file) without text_projection.weight gets the identity, as diffusers' single-file loader does.
std::unique_ptr<layouts::TensorSet> open_part(const Part& p);

// kiln-convert of an assembly: one Kiln file with the configs and tokenizers bundled, so that it stands alone.
Summary convert_assembly(const Assembly& a, const std::string& out_path, const Options& opt = {});

}  // namespace kiln::converter
