#pragma once
// The component-file flags that kiln generate, kiln forward and kiln-convert share (converter/assemble.h), named as
// stable-diffusion.cpp names them (--clip_l etc. are accepted too).
#include <CLI/CLI.hpp>
#include <string>

#include "converter/assemble.h"

namespace kiln::app {

inline void add_component_flags(CLI::App& app, converter::ComponentFiles& f) {
    const char* fmt = " (a single file in its publisher's layout, a diffusers folder or a Kiln file)";
    app.add_option("--diffusion-model", f.diffusion_model,
                   std::string("The transformer: flux1-dev.safetensors (BFL or ComfyUI keys), city96's "
                               "flux1-dev-Q4_K_S.gguf, sd3.5_large.safetensors, ...") + fmt);
    app.add_option("--vae", f.vae, std::string("The VAE: ae.safetensors (LDM layout), ...") + fmt);
    app.add_option("--clip-l,--clip_l", f.clip_l, std::string("The CLIP-L text encoder: clip_l.safetensors") + fmt);
    app.add_option("--clip-g,--clip_g", f.clip_g, std::string("SD3: the CLIP-G text encoder: clip_g.safetensors") + fmt);
    app.add_option("--t5xxl", f.t5xxl, std::string("The T5 text encoder: t5xxl_fp16.safetensors, a T5 GGUF") + fmt);
    app.add_option("--config", f.config,
                   "With single files: a diffusers pipeline folder of the same model, for its configs, scheduler and "
                   "tokenizers (no weights read from it). Default: the published configs of the model the shapes "
                   "identify (FLUX.1-dev/schnell, SD3 medium, SD3.5 medium/large)");
    app.add_option("--tokenizers", f.tokenizers,
                   "With single files: a folder holding tokenizer/, tokenizer_2/, ... (default: the Hugging Face cache, "
                   "HF_HOME)");
}

}  // namespace kiln::app
