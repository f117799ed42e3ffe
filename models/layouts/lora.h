#pragma once
// LoRA files as people download them, read into per-module low-rank factors under diffusers' module names.
//
// Layouts (docs/lora.md): diffusers/PEFT (transformer.<module>.lora_A/lora_B.weight, alphas from the header's
// lora_adapter_metadata or <module>.alpha keys; Flux and SD3), kohya (lora_unet_<BFL path with '_'>.lora_down/
// lora_up.weight, .alpha), ComfyUI / BFL names (diffusion_model.<BFL path>.lora_down/lora_up or lora_A/lora_B),
// XLabs (double_blocks.N.processor.{qkv,proj}_lora{1,2}.down/up.weight). Fused BFL targets (qkv, linear1) are split
// by B's rows into diffusers' modules, A copied to each, so every part's delta is its rows of B @ A.
// Applied as trained (kohya, ComfyUI, stable-diffusion.cpp): delta W = (alpha / rank) * B @ A per module, with the
// file's alpha, or factor 1 without one. Vulkan-free: kiln-convert links it.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/layouts/layouts.h"
#include "runtime/core/tensor.h"

namespace kiln::layouts {

struct LoraModule {
    std::string module;  // diffusers module ("transformer_blocks.0.attn.to_q"); its weight is module + ".weight"
    std::string key;     // the file key of its A (for messages)
    Tensor A;            // f32 [r, in]
    Tensor B;            // f32 [out, r] (a fused key's rows for this module)
    double scale = 1;    // as trained: alpha / r (use_rslora: alpha / sqrt(r)); 1 without an alpha
};

struct LoraFile {
    std::string path;
    std::string layout;  // "diffusers/PEFT", "kohya", "ComfyUI", "BFL lora_A", "XLabs"
    size_t tensors = 0;  // in the file
    size_t matched = 0;  // of those, applied (A, B and alpha keys)
    std::vector<LoraModule> modules;
    std::vector<std::string> unmatched;  // keys that match no module (allowed: --lora-allow-unmatched)
    size_t text_encoder_keys = 0;        // of those, text-encoder keys (lora_te*_, text_encoder*.): not applied yet
    // "lora FILE (kohya): 21 tensors matched, 9 modules" (+ ", N keys unmatched").
    std::string summary() const;
};

// The model's weight `name` ("<module>.weight"): its shape [out, in], nullopt when the model has none.
using LoraTargetFn = std::function<std::optional<Shape>(const std::string& name)>;

// Reads a safetensors LoRA for a transformer of `family` (the registry's name: "Flux", "Stable Diffusion 3" or
// "SD3"). Throws kiln::Error
// with one line naming the file (and the key) for: a truncated or malformed file, a LoRA of another family (named
// as such), keys that match no module of the model (the first few named, with the layout guessed) unless
// allow_unmatched, no key applying at all, A/B rank mismatch, a B or A whose shape does not fit the target, NaN/Inf.
LoraFile read_lora(const std::string& path, const std::string& family, const LoraTargetFn& target,
                   bool allow_unmatched);

// The merged weight: w (f32/f16/bf16) + sum_i scales[i] * B_i @ A_i, in w's dtype (accumulated in f64, rounded
// once). terms: (module, user scale); the module's own scale is applied too.
Tensor lora_merge(const Tensor& w, const std::vector<std::pair<const LoraModule*, double>>& terms);

// `set` (a transformer of `family`) with LoRAs (path, user scale) merged into the tensors they target: read() gives
// them merged in their stored dtype, view() nothing (never in place); the others unchanged. Throws as read_lora, and
// for a quantized or fp8 target. Each file's summary goes to `summaries` when given. For kiln-convert --lora.
std::unique_ptr<TensorSet> with_lora_merge(std::unique_ptr<TensorSet> set, const std::string& family,
                                           const std::vector<std::pair<std::string, double>>& loras,
                                           bool allow_unmatched, std::vector<std::string>* summaries);

// Parses "FILE[:SCALE]" (SCALE a finite number; a ':' not followed by one stays in FILE).
std::pair<std::string, double> parse_lora_arg(const std::string& arg);

}  // namespace kiln::layouts
