#pragma once
// The component-file flags that kiln generate, kiln forward and kiln-convert share (converter/assemble.h), named as
// stable-diffusion.cpp names them (--clip_l etc. are accepted too). One table: generate's flag table takes its rows
// from here.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "converter/assemble.h"

namespace kiln::app {

#define KILN_COMPONENT_FILE " (a single file in its publisher's layout, a diffusers folder or a Kiln file)"
struct ComponentFlag {
    const char* names;
    std::string converter::ComponentFiles::*field;
    const char* help;
};
inline const std::vector<ComponentFlag>& component_flags() {
    using C = converter::ComponentFiles;
    static const std::vector<ComponentFlag> rows = {
        {"--diffusion-model", &C::diffusion_model,
         "The transformer: flux1-dev.safetensors (BFL or ComfyUI keys), city96's flux1-dev-Q4_K_S.gguf, "
         "sd3.5_large.safetensors, z_image_turbo_bf16.safetensors, flux-2-klein-4b.safetensors, "
         "..." KILN_COMPONENT_FILE},
        {"--vae", &C::vae,
         "The VAE: ae.safetensors (LDM layout; Flux, Z-Image), flux2-vae.safetensors (FLUX.2 [klein]), "
         "..." KILN_COMPONENT_FILE},
        {"--clip-l,--clip_l", &C::clip_l, "The CLIP-L text encoder: clip_l.safetensors" KILN_COMPONENT_FILE},
        {"--clip-g,--clip_g", &C::clip_g, "SD3: the CLIP-G text encoder: clip_g.safetensors" KILN_COMPONENT_FILE},
        {"--t5xxl", &C::t5xxl, "The T5 text encoder: t5xxl_fp16.safetensors, a T5 GGUF" KILN_COMPONENT_FILE},
        {"--text-encoder,--llm", &C::llm,
         "Z-Image, FLUX.2 [klein]: the Qwen3 text encoder (stable-diffusion.cpp's --llm): qwen_3_4b.safetensors "
         "(transformers' names), a llama.cpp GGUF (Qwen3-4B-Q4_K_M.gguf), a transformers text_encoder folder or a "
         "Kiln file"},
        {"--config", &C::config,
         "With single files: a diffusers pipeline folder of the same model, for its configs, scheduler and "
         "tokenizers (no weights read from it). Default: the published configs of the model the shapes identify "
         "(FLUX.1-dev/schnell, SD3 medium, SD3.5 medium/large, Z-Image-Turbo, FLUX.2 [klein] 4B/9B)"},
        {"--tokenizers", &C::tokenizers,
         "With single files: a folder holding tokenizer/, tokenizer_2/, ... (default: the Hugging Face cache, "
         "HF_HOME)"},
    };
    return rows;
}
#undef KILN_COMPONENT_FILE

inline void add_component_flags(CLI::App& app, converter::ComponentFiles& f) {
    for (const ComponentFlag& row : component_flags()) app.add_option(row.names, f.*row.field, row.help);
}

}  // namespace kiln::app
