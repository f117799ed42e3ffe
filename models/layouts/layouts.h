#pragma once
// Weight files in the layouts people download, seen under diffusers' (and transformers') tensor names.
//
// A single file holds one or more components in another project's key layout: Black Forest Labs' Flux keys
// (optionally under ComfyUI's "model.diffusion_model." prefix, sometimes twice), Stability's SD3/SD3.5 single
// file (model.diffusion_model.*, first_stage_model.*, text_encoders.{clip_l,clip_g,t5xxl}.transformer.*), LDM-layout
// VAEs (BFL's ae.safetensors), ComfyUI/Stability's separate CLIP-L, CLIP-G and T5 files, and city96's GGUF files
// (general.architecture flux / sd3 with the original keys; T5 encoders in llama.cpp's names); FLUX.2 transformers
// in BFL's keys and FLUX.2's VAE (flux2-vae.safetensors), Z-Image transformers in their original keys (ComfyUI's
// z_image_turbo_*.safetensors, GGUF lumina2), Qwen3 text encoders in transformers' names (qwen_3_4b.safetensors) or
// llama.cpp's (GGUF qwen3). The mappings follow diffusers' single_file_utils.py converters; each diffusers tensor is
// one of:
//   copy            a file tensor as it is (read in place from the mapping),
//   rows            a row range [r0, r1) of a fused file tensor (Flux's qkv, linear1): contiguous bytes, also read
//                   in place, quantized or not (rows are whole blocks),
//   swapped halves  [scale; shift] from BFL/Stability's [shift; scale] (final_layer, SD3's last context block):
//                   assembled on read,
//   reshaped        the same bytes under another shape (LDM attention's 1x1 convs [C, C, 1, 1] -> [C, C]),
//   computed        a tensor the file lacks but the model defines (SD3's CLIP-L identity text_projection, FLUX.2
//                   VAE's bn.num_batches_tracked = 0).
// Vulkan-free: kiln-convert links it.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/file_io.h"
#include "runtime/core/tensor.h"

namespace kiln::layouts {

struct TensorInfo {
    std::string name;  // diffusers/transformers name
    DType dtype;       // as stored (a quantized or fp8 type included)
    Shape shape;       // diffusers' shape
};

// Where a tensor's bytes (in its stored dtype, diffusers' shape, contiguous) lie in a mapped file; file null: they
// do not lie anywhere as one run (assembled or computed on read).
struct Mapped {
    std::shared_ptr<const MappedFile> file;
    uint64_t offset = 0;
};

// The tensors of one component under diffusers' names, whatever file and layout they come from.
class TensorSet {
public:
    virtual ~TensorSet() = default;
    virtual const std::vector<TensorInfo>& tensors() const = 0;  // sorted by name
    virtual const TensorInfo* find(const std::string& name) const = 0;
    virtual Tensor read(const std::string& name) const = 0;  // stored dtype, diffusers' shape
    // The tensor's bytes in place in the mapped file for copied, reshaped and row-range tensors (rows: the fused
    // tensor's offset + r0 * row bytes, exact for quantized types too since rows are whole blocks); {} for
    // assembled (swapped halves) and computed ones. Call file->check() before touching the mapping.
    virtual Mapped view(const std::string& name) const { return {}; }
    virtual std::string source() const = 0;  // "FILE (layout, component)" for messages
};

// One component found in a file.
struct Detected {
    std::string role;  // "transformer", "vae", "clip_l", "clip_g", "t5xxl", "llm" (a Qwen3 text encoder)
    // A transformer's family: "flux", "sd3", "flux2", "z_image" (models::file_family); a VAE's: "flux2" when it holds
    // FLUX.2's latent BatchNorm (bn.*), else ""; "" otherwise.
    std::string family;
    // "bfl", "comfyui", "stability", "original" (Z-Image), "ldm", "transformers", "diffusers", "city96", "llama.cpp"
    std::string layout;
    std::string prefix;  // the key prefix stripped ("model.diffusion_model.", "text_encoders.clip_l.transformer.")
    size_t n_tensors = 0;
};

struct FileInfo {
    std::string path;
    std::string container;          // "safetensors" or "gguf"
    std::string gguf_architecture;  // GGUF general.architecture; "" for safetensors
    std::vector<Detected> components;
    std::map<std::string, size_t> dtype_counts;  // stored dtype name -> tensors
};

// Reads a file's header (never its data) and tells what it holds, with each component's diffusers tensor count.
// Throws kiln::Error with one line naming the file and the problem for a file that is not a model: a LoRA
// (lora_A/lora_B/lora_down/lora_up/.alpha keys), an optimizer state (state./param_groups/exp_avg), a GGUF of an
// architecture Kiln does not run, an unknown GGUF tensor type (named), keys no layout explains (the first few
// named), fused tensors that do not split. A Kiln model file (kiln.components) is not a layout file: is_kiln_file()
// tells it apart first (it never throws).
// CLIP-L vs CLIP-G: the token embedding's width decides (768 / 1280); other widths (tiny models) take the role
// the caller names in open_component(), else "clip_g" in the file name, else CLIP-L.
FileInfo inspect(const std::string& path);
bool is_kiln_file(const std::string& path);

// The component `role` of the file (as inspect() detected it) under diffusers' names. A fused or missing tensor
// is resolved here; missing tensors are the model builder's to report (it knows the config). T5's vocabulary is
// presented as shared.weight (Kiln's name) whether the file calls it shared or encoder.embed_tokens; the tied copy
// is left out. Throws as inspect() does, and naming the roles the file holds when it lacks `role`.
// For role "clip_l" of a file that also holds an SD3 transformer (Stability's single file), a missing
// text_projection.weight is presented as the identity (with_identity_projection).
std::unique_ptr<TensorSet> open_component(const std::string& path, const std::string& role);

// A safetensors file, or a sharded set through its *.safetensors.index.json, as it is (names and shapes unchanged):
// a diffusers or transformers component's weights. Read in place from the mapping.
std::unique_ptr<TensorSet> open_safetensors(const std::string& path);
// Component `component` of a Kiln model file (tensors "<component>.<diffusers name>"), read in place from the mapping.
std::unique_ptr<TensorSet> open_kiln_component(const std::string& path, const std::string& component);
// SD3's CLIP-L: the set as it is when it has text_projection.weight, else with an identity [hidden, hidden] f32
// text_projection.weight added (computed: view() gives {}). A separate clip_l file cannot tell SD3's CLIP-L from
// Flux's (which has no projection), so the caller that knows the family (SD3's text_encoder) applies it.
std::unique_ptr<TensorSet> with_identity_projection(std::unique_ptr<TensorSet> clip);
// The set with every name prefixed (a Qwen3 layout set, under Qwen3Model's names, read as Qwen3ForCausalLM's
// "model.*"): views and reads unchanged.
std::unique_ptr<TensorSet> with_prefix(std::unique_ptr<TensorSet> set, const std::string& prefix);

}  // namespace kiln::layouts
