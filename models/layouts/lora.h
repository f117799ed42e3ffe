#pragma once
// LoRA files as people download them, read into per-module low-rank factors under diffusers' module names.
//
// Layouts (docs/lora.md): diffusers/PEFT (transformer.<module>.lora_A/lora_B.weight, alphas from the header's
// lora_adapter_metadata or <module>.alpha keys; Flux and SD3), kohya (lora_unet_<BFL path with '_'>.lora_down/
// lora_up.weight, .alpha), ComfyUI / BFL names (diffusion_model.<BFL path>.lora_down/lora_up or lora_A/lora_B),
// XLabs (double_blocks.N.processor.{qkv,proj}_lora{1,2}.down/up.weight); on SD3, kohya and ComfyUI files name
// Stability's MMDiT modules (lora_unet_joint_blocks_0_x_block_attn_qkv, diffusion_model.joint_blocks.0.x_block.attn.
// qkv), mapped as the base checkpoint's names are (sd3_map.cpp). Fused targets (qkv, linear1) are split by B's rows
// into diffusers' modules, A copied to each, so every part's delta is its rows of B @ A.
// Applied as trained (kohya, ComfyUI, stable-diffusion.cpp): delta W = (alpha / rank) * B @ A per module, with the
// file's alpha, or factor 1 without one. Vulkan-free: kiln-convert links it.
// Text-encoder keys (kohya lora_te_/lora_te1_/lora_te2_, ComfyUI text_encoders.clip_l., diffusers text_encoder. /
// text_encoder_2.) go to the CLIP encoders diffusers' loader for the family loads them into (Flux: text_encoder =
// CLIP-L; SD3: text_encoder = CLIP-L, text_encoder_2 = CLIP-G); T5 keys are dropped with a warning, as diffusers
// drops them (docs/lora.md).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/layouts/layouts.h"
#include "runtime/core/tensor.h"

namespace kiln::layouts {

struct LoraModule {
    std::string component = "transformer";  // "transformer", "text_encoder" or "text_encoder_2"
    std::string module;  // the component's module ("transformer_blocks.0.attn.to_q"); its weight is module + ".weight"
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
    size_t text_encoder_keys = 0;        // of those, text-encoder keys (a module the encoder lacks)
    // Text-encoder keys not applied, as diffusers does not apply them (T5), or for an encoder not given here: one
    // warning line each ("N text-encoder keys not applied (why): first keys").
    std::vector<std::string> dropped;
    // "lora FILE (kohya): 21 tensors matched, 9 modules" (+ " (4 of them text-encoder modules, applied to CLIP-L)",
    // ", N keys unmatched").
    std::string summary() const;
};

// The component's weight `name` ("<module>.weight"): its shape [out, in], nullopt when the model has none.
using LoraTargetFn = std::function<std::optional<Shape>(const std::string& name)>;
// The components a LoRA may target: the transformer and the text encoders loaded ("text_encoder",
// "text_encoder_2"); a text encoder not listed drops its keys with a warning line.
struct LoraTargets {
    LoraTargetFn transformer;
    std::map<std::string, LoraTargetFn> text_encoders;
    std::string absent_why;  // why an encoder not listed takes no LoRA ("" -> "is not loaded here")
};
// The text encoders diffusers' loader of `family` puts LoRAs into (Flux: text_encoder; SD3: text_encoder,
// text_encoder_2), and the name Kiln prints for one ("CLIP-L", "CLIP-G").
std::vector<std::string> lora_text_encoders(const std::string& family);
std::string text_encoder_label(const std::string& component);

// Reads a safetensors LoRA for a transformer of `family` (the registry's name: "Flux", "Stable Diffusion 3" or
// "SD3"). Throws kiln::Error
// with one line naming the file (and the key) for: a truncated or malformed file, a LoRA of another family (named
// as such), keys that match no module of the model (the first few named, with the layout guessed) unless
// allow_unmatched, no key applying at all, A/B rank mismatch, a B or A whose shape does not fit the target, NaN/Inf.
LoraFile read_lora(const std::string& path, const std::string& family, const LoraTargets& targets,
                   bool allow_unmatched);
// The transformer only: text-encoder keys are dropped with a warning line (LoraFile::dropped).
LoraFile read_lora(const std::string& path, const std::string& family, const LoraTargetFn& target,
                   bool allow_unmatched);

// The merged weight: w (f32/f16/bf16) + sum_i scales[i] * B_i @ A_i, in w's dtype (accumulated in f64, rounded
// once). terms: (module, user scale); the module's own scale is applied too.
Tensor lora_merge(const Tensor& w, const std::vector<std::pair<const LoraModule*, double>>& terms);

// Refuses (one line naming the file and the weight, ending in `why`) a module of f whose target is not stored f32,
// f16 or bf16: merging folds into those only. dtype_of(component, weight name) gives the stored dtype.
void check_mergeable(const LoraFile& f, const std::function<DType(const std::string&, const std::string&)>& dtype_of,
                     const char* why);

// Parses "FILE[:SCALE]" (SCALE a finite number; a ':' not followed by one stays in FILE).
std::pair<std::string, double> parse_lora_arg(const std::string& arg);

}  // namespace kiln::layouts
