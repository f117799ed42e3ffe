#pragma once
// kiln-convert --lora: LoRAs merged into the components of the conversion they target (the transformer, CLIP-L
// text_encoder, CLIP-G text_encoder_2), as `--lora-apply merge` folds them at load. Vulkan-free.
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/layouts/layouts.h"

namespace kiln::converter {

// Reads each LoRA (path, user scale) once for a transformer of `family` ("Flux", "SD3") against the components in
// `sets` (name -> its tensors; "transformer" required), then replaces each targeted component's set by one whose
// read() gives the targeted weights merged in their stored dtype (layouts::lora_merge: f64 accumulation, rounded
// once), so a later --dtype quantizes the merged weight. Text-encoder keys of an encoder not in `sets` (or T5) are
// dropped with one warning line each. Logs per file the summary (+ " (merged)"), unmatched and dropped keys to
// `log` when given. Throws kiln::Error as layouts::read_lora does, and for a target not stored f32/f16/bf16.
void merge_loras(const std::map<std::string, std::unique_ptr<layouts::TensorSet>*>& sets, const std::string& family,
                 const std::vector<std::pair<std::string, double>>& loras, bool allow_unmatched, std::ostream* log);

}  // namespace kiln::converter
