#pragma once
// diffusers folder -> one Kiln model file (GGUF v3). See runtime/core/gguf.h for the container and
// docs in convert.cpp for the metadata keys the runtime reads.
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "models/layouts/layouts.h"
#include "runtime/core/dtype.h"

namespace kiln::converter {

struct Options {
    // Storage of tensors with >= 2 dims; 1-D floats are f32, ints kept. Quantized types (q8_0 ... q6_k)
    // apply to linear matrices whose rows are whole blocks (k-quant rows that are not whole 256-blocks
    // fall back as quant_storage() says, as llama.cpp does); every other matrix (conv, embedding tables) is
    // then f16. fp8 sources (safetensors F8_E4M3 / F8_E5M2) are read like any float source.
    DType dtype = DType::f16;
    // (glob, dtype) recipe: a float tensor of >= 2 dims whose stored name ("transformer.proj_out.weight")
    // matches glob takes dtype instead (the last match wins); e.g. {"*.proj_out.weight", f16}.
    std::vector<std::pair<std::string, DType>> keep;
    std::string variant;  // "" or e.g. "fp16": picks *.fp16.safetensors as diffusers does
    // LoRAs (path, scale) merged into the f32/f16/bf16 weights of the components they target (the transformer, the
    // CLIP text encoders: converter/lora_bake.h) before they are stored (kiln-convert --lora FILE[:SCALE]); keys
    // matching no module are an error unless lora_allow_unmatched.
    std::vector<std::pair<std::string, double>> loras;
    bool lora_allow_unmatched = false;
    bool quiet = false;           // no notes, progress or summary
    std::ostream* log = nullptr;  // notes/progress/summary (std::cerr when null)
    // Test-only (TestHooks::convert_delay_ms, KILN_TEST_CONVERT_DELAY_MS): a pause after each tensor, to interrupt
    // a conversion midway (tests/apps/test_generate_output.cpp).
    int test_delay_ms = 0;
};

struct Summary {
    std::vector<std::string> components;
    size_t tensors = 0;
    int64_t params = 0;
    uint64_t bytes = 0;  // output file size
    double seconds = 0;
    std::map<DType, size_t> stored;  // tensors per stored dtype
};

// Converts a diffusers pipeline folder (model_index.json), component folder (config.json +
// weights) or scheduler folder (scheduler_config.json) into out_path. Validates everything before
// writing; on any error throws kiln::Error (naming file, tensor and problem) and leaves no output.
Summary convert_folder(const std::string& src_dir, const std::string& out_path, const Options& opt = {});

// Matches a component's tensors to the names its class and config imply (aliases and ignored buffers as
// transformers treats them): canonical name -> tensor. Throws one line counting and naming the first missing and
// unexpected tensors.
std::map<std::string, const layouts::TensorInfo*> match_tensors(const layouts::TensorSet& set, const std::string& cls,
                                                                const nlohmann::json& cfg, const std::string& cfg_where,
                                                                std::ostream* log);

// Python's json (diffusers' writer) emits NaN/Infinity/-Infinity, which JSON lacks; returns the text with
// those tokens (outside strings) replaced by null, for parsing with nlohmann::json.
std::string python_json_to_json(const std::string& text);
// A whole file's bytes; throws kiln::Error naming it.
std::string read_text(const std::filesystem::path& p);
// A JSON object (Python's NaN/Infinity read as null); throws naming `where`.
nlohmann::json parse_json_object(const std::string& text, const std::string& where);

}  // namespace kiln::converter
