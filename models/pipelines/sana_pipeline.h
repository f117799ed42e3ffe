#pragma once
// What SanaPipeline and SanaSprintPipeline (diffusers pipelines/sana/) do beyond the shared text-to-image machinery
// (t2i_pipeline.h): the prompt path (_get_gemma_prompt_embeds + encode_prompt) and the transformer's extra inputs.
// The denoising loop is the shared one: flow DPM-Solver++ for Sana, SCMScheduler (trigflow, its wrapping folded
// into the step: models/schedulers/scm.cpp) for Sana-Sprint.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/core/source.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/tensor.h"

namespace kiln::models {

// SanaPipeline's default complex_human_instruction: its 8 lines joined by "\n", ending in "User Prompt: ".
const std::string& sana_default_instruction();

// Token ids and mask (I64 [B, L]) of the prompts as _get_gemma_prompt_embeds makes them: each prompt lower()ed and
// strip()ped (Python, full Unicode), the instruction prepended (no separator), tokenized with <bos>, right-padded
// and truncated to L = n_chi + max_sequence_length - 2 (n_chi: the instruction's own token count with <bos>), or to
// max_sequence_length without an instruction (the negative prompts). A prompt longer than L is truncated as
// transformers does, and `warn` is told how many tokens it had.
struct SanaTokens {
    Tensor ids, mask;
    int n_chi = 0;  // 0 without an instruction
};
SanaTokens sana_tokenize(const text::Tokenizer& tok, const std::vector<std::string>& prompts, int max_sequence_length,
                         const std::string& instruction, const std::function<void(const std::string&)>& warn);

// encode_prompt's select_index = [0] + range(-(M-1), 0) along dim 1 of [B, L, ...] (M = max_sequence_length <= L):
// <bos> and the last M - 1 positions. For the prompts' last_hidden_state and mask.
Tensor sana_select(const Tensor& x, int max_sequence_length);

// Sana-Sprint: the transformer's guidance input, guidance_scale * transformer.config.guidance_embeds_scale in
// float32, one per row of the batch.
Tensor sana_guidance_input(const ModelSource& src, double guidance_scale, int64_t rows);

// --noise: a scheduler's per-step draws given by name, scm_noise_step{i} (the Sana-Sprint fixtures' names), each of
// the latents' shape, replace step i's draw from the seed's generator (which is still drawn, so later draws keep
// their place in diffusers' order). A given step beyond the schedule, or one for a scheduler that draws none, is an
// error naming it.
void given_step_noise(std::vector<std::vector<float>>& step_noise, const std::map<std::string, Tensor>& given,
                      const Shape& latents);

}  // namespace kiln::models
