#pragma once
// The prompt side of the text-to-image pipelines: tokenizers and text encoders run exactly as each
// diffusers pipeline's encode_prompt does, giving the conditioning tensors under diffusers' names.
//   PixArt-α/Σ: T5 (lower-cased, stripped prompt; max_sequence_length 120 / 300) with its attention mask.
//   SD3/SD3.5:  CLIP-L and CLIP-G penultimate states concatenated on features, zero-padded to the T5 width,
//               then T5 along the sequence; pooled = cat(CLIP-L, CLIP-G text_embeds). T5 absent -> zeros.
//   Flux.1:     CLIP pooler_output (pooled), T5 last_hidden_state (no mask; 512 dev, 256 schnell).
//   Sana:       Gemma-2 last_hidden_state of instruction + prompt, <bos> + the last 299 positions, with the mask.
//   Z-Image:    Qwen3 hidden_states[-2] of the chat-templated prompt (thinking on), with the mask (the pipeline keeps
//               each prompt's unmasked rows).
//   FLUX.2 [klein]: Qwen3 hidden_states[9], [18], [27] of the chat-templated prompt (thinking off) stacked on
//               features, every position; the negative prompt is always "".
// Each encoder runs as a JIT graph whose layers are replayed; its device memory is freed when it returns,
// before the transformer is loaded, unless the caller keeps an EncoderCache.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/core/source.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

// Keeps text encoders resident between encode_prompts calls (kiln generate --keep-encoders): an encoder stays
// planned, recorded and uploaded after its first use, so the next prompt of the same batch size skips all that.
// It costs their device memory while the transformer runs. Not thread-safe; one per Context.
class EncoderCache {
public:
    EncoderCache();
    ~EncoderCache();
    EncoderCache(const EncoderCache&) = delete;
    EncoderCache& operator=(const EncoderCache&) = delete;
    size_t size() const;            // resident encoders
    uint64_t device_bytes() const;  // their device memory (allocated)
    void clear();                   // frees them
    struct Entry;

private:
    friend struct EncoderCacheAccess;
    std::map<std::string, std::unique_ptr<Entry>> entries_;
};

struct PromptOptions {
    std::vector<std::string> prompts;  // one image each
    // diffusers' negative_prompt, prompt_2, prompt_3, negative_prompt_2 and negative_prompt_3. Each list holds one
    // text for every prompt, or one per prompt; empty is diffusers' None: negatives "", prompts_2 and prompts_3
    // the prompts, negatives_2 and negatives_3 the negatives. One empty text in prompts_2, prompts_3, negatives_2
    // or negatives_3 is None too (diffusers' `prompt_2 or prompt` on a string).
    //   SD3:  prompts_2 and negatives_2 go to CLIP-G (text_encoder_2), prompts_3 and negatives_3 to T5.
    //   Flux: prompts_2 and negatives_2 go to T5 (text_encoder_2); negatives only with true CFG (cfg).
    //   PixArt: one encoder; prompts_2 and prompts_3 do not apply.
    std::vector<std::string> negatives;
    std::vector<std::string> prompts_2, prompts_3, negatives_2, negatives_3;
    bool cfg = true;  // negative embeddings are needed: T2IPlan::cfg (guidance > 1; Flux: true_cfg_scale > 1)
    int max_sequence_length = 0;  // T5 (Sana: Gemma-2) tokens; 0: the pipeline's default
    // Sana, Sana-Sprint: diffusers' complex_human_instruction, its lines joined by "\n" and prepended to each
    // prompt; nullopt: the pipeline's default (sana_default_instruction()); "": none.
    std::optional<std::string> complex_human_instruction;
    // SD3: diffusers' clip_skip. The prompts' CLIP embeddings are hidden_states[-(clip_skip + 2)] of CLIP-L and
    // CLIP-G instead of [-2]; the negative prompts keep [-2] (diffusers encodes them with clip_skip None).
    int clip_skip = 0;
    // FLUX.2 [klein]: diffusers' text_encoder_out_layers, the Qwen3 hidden_states stacked into prompt_embeds
    // (transformers' numbering: 0 the embeddings, i the output of layer i - 1); empty: the pipeline's (9, 18, 27).
    std::vector<int> text_encoder_layers;
    exec::Mode mode = exec::Mode::regional;        // JIT mode of the encoders
    bool keep_intermediates = false;               // token ids and per-encoder outputs under the fixtures' names
    std::function<void(const std::string&)> warn;  // truncation warnings (stderr when empty)
    EncoderCache* keep = nullptr;  // keep the encoders resident here (Vulkan only); nullptr: free each after use
    // LoRAs (the generation's, T2IOptions::lora): their text-encoder modules apply to the CLIP encoders, at the
    // files' scales, runtime or merged as lora.apply says (docs/lora.md). A resident encoder is reused only with the
    // same files and apply mode (merged: the same scales); runtime scales are written as inputs.
    LoraOptions lora;
};

struct EncodedPrompts {
    // prompt_embeds, negative_prompt_embeds, pooled_prompt_embeds, negative_pooled_prompt_embeds,
    // prompt_attention_mask, negative_prompt_attention_mask (I64): those the pipeline uses.
    std::map<std::string, Tensor> tensors;
    std::vector<std::pair<std::string, Tensor>> intermediates;  // {enc}_input_ids, {enc}_text_embeds, ...
    double tokenize_ms = 0, encode_ms = 0;
    int reused_encoders = 0;  // encoders found resident in PromptOptions::keep
    // The largest encoder's device memory: allocated (the allocator's blocks), and what its weights and planned
    // activations need. One encoder is resident at a time, so these are the encoding phase's peak.
    uint64_t peak_device_bytes = 0, peak_needed_bytes = 0;
};

// diffusers' max_sequence_length default for the pipeline (PixArt-α 120, PixArt-Σ 300, SD3 256, Flux-dev 512,
// Flux-schnell (no guidance embedding) 256).
int default_max_sequence_length(const ModelSource& src);

// Checks opt's texts against the pipeline (which lists apply, their lengths, UTF-8) before any heavy work; the
// messages use diffusers' argument names. encode_prompts calls it.
void check_prompts(const ModelSource& src, const PromptOptions& opt);

// opt's LoRAs read against the transformer and the text encoders diffusers' loader of `family` takes
// (layouts::lora_text_encoders) that src has; `encoders_run` false (prompt_embeds given): text-encoder keys are
// dropped with a warning line, as the encoders do not run. Throws as load_loras.
std::shared_ptr<const LoraSet> load_model_loras(const ModelSource& src, const std::string& family,
                                                const LoraOptions& opt, bool encoders_run);

// Runs the tokenizers and text encoders of `src` on the prompts. ctx == nullptr runs the CPU reference.
EncodedPrompts encode_prompts(vk::Context* ctx, const ModelSource& src, const PromptOptions& opt);

// Python's str.lower().strip() on UTF-8 (PixArt's _text_preprocessing without bs4/ftfy caption cleaning).
std::string python_lower_strip(const std::string& utf8);

}  // namespace kiln::models
