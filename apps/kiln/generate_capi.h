#pragma once
// `kiln generate` through libkiln's C API: the options the CLI resolved, run by kiln_generate.
#include <string>

#include "apps/kiln/commands.h"
#include "models/pipelines/dit_pipeline.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"

namespace kiln::app {

// The name of the context's device ("llvmpipe (LLVM 15.0.6, 256 bits)").
std::string device_name(kiln_context* ctx);
// Opens `model` on ctx and runs class-label generation g with kiln_generate: the result as models::generate_dit
// gives it (image [B, H, W, 3] f32, timings, transformer memory, intermediates when g.keep_intermediates).
// g.progress is called after each step (not before the first).
models::GenerateResult generate_labels(kiln_context* ctx, const std::string& model, const models::GenerateOptions& g);

// One text-to-image generation: q.texts (prompts, negative prompts, prompt_2 ..., max_sequence_length), or t.text
// (--prompt-embeds) when q.texts.prompts is empty.
struct TextRequest {
    models::PromptOptions texts;
    bool keep_encoders = false;  // the encoders stay resident in m for the next call
};
// Runs it with kiln_generate on m (options as models::generate_t2i takes them); stats receives the call's
// figures (text encoding included).
models::GenerateResult generate_text(kiln_model* m, const models::T2IOptions& t, const TextRequest& q,
                                     kiln_generate_stats& stats);

}  // namespace kiln::app
