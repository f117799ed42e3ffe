#pragma once
// `kiln generate` through libkiln's C API: the options the CLI resolved, run by kiln_generate.
#include <string>

#include "apps/kiln/commands.h"
#include "models/dit_pipeline.h"

namespace kiln::app {

// The name of the context's device ("llvmpipe (LLVM 15.0.6, 256 bits)").
std::string device_name(kiln_context* ctx);
// Opens `model` on ctx and runs class-label generation g with kiln_generate: the result as models::generate_dit
// gives it (image [B, H, W, 3] f32, timings, transformer memory, intermediates when g.keep_intermediates).
// g.progress is called after each step (not before the first).
models::GenerateResult generate_labels(kiln_context* ctx, const std::string& model, const models::GenerateOptions& g);

}  // namespace kiln::app
