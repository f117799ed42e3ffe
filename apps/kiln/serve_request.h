#pragma once
// `kiln serve`'s request parser: the JSON body of POST /v1/images/generations to a checked request, or the
// OpenAI-style error that answers it. A pure function of (body, limits): no HTTP, no model, no I/O, so it fuzzes
// alone (converter/fuzz/fuzz_serve_request.cpp) and never throws.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::app::serve {

// What one request may ask for, enforced before it is queued (the HTTP body size is the server's own check).
struct Limits {
    int max_n = 8;               // images per request
    int max_side = 2048;         // width and height, pixels
    int max_steps = 200;         // denoising steps
    size_t max_prompt = 4096;    // prompt and negative_prompt, bytes of UTF-8
    size_t max_body = 64 << 10;  // request body, bytes (413 over it)
};

// POST /v1/images/generations: OpenAI's fields and Kiln's extensions. Zero means "the model's default" as in
// kiln_generate_params.
struct ImageRequest {
    std::string prompt;           // text models: the prompt; DiT: a class label's name or id
    std::string model;            // "" = the resident model
    int n = 1;                    // images (kiln_generate_params.images_per_prompt)
    int width = 0, height = 0;    // size "WxH"; 0 = the model's
    std::string negative_prompt;  // Kiln: text models
    uint64_t seed = 0;            // Kiln: kiln generate's default seed is 0 as well
    int steps = 0;                // Kiln
    double guidance_scale = 0;    // Kiln
    bool guidance_given = false;  // guidance_scale was in the request (0 then means 0: Z-Image-Turbo's)
    std::string scheduler;        // Kiln: "" = the model's
    bool stream = false;          // progress as server-sent events (docs/serve.md)
    // Kiln: the scales of the server's LoRAs (--lora), in their order; empty = theirs. The parser checks the count
    // (1 .. kMaxLoraScales), each finite and within +-kMaxLoraScale; the server checks it against its LoRA count.
    std::vector<double> lora_scales;
    // Kiln: FLUX.2 [klein]'s text_encoder_out_layers (empty = the pipeline's; 1 .. kMaxTextEncoderLayers integers,
    // each within +-kMaxLayerIndex; the model checks them against its Qwen3); Z-Image's cfg_truncation (any finite)
    // and cfg_normalization (>= 0; true = 1, false = 0), at diffusers' defaults.
    std::vector<int> text_encoder_layers;
    double cfg_truncation = 1.0, cfg_normalization = 0.0;
};
constexpr size_t kMaxLoraScales = 16;
constexpr double kMaxLoraScale = 16;
constexpr size_t kMaxTextEncoderLayers = 16;
constexpr int kMaxLayerIndex = 1024;

// An answer other than 200: HTTP status and OpenAI's {"error": {"message", "type", "param", "code"}}.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // "" -> null
    std::string code;   // "" -> null
};

// Parses and checks `body`; false with *err filled when it is rejected (malformed JSON, a non-object, an unknown
// field, a wrong type, a value outside `limits`). Never throws.
bool parse_image_request(std::string_view body, const Limits& limits, ImageRequest* out, ApiError* err);

// {"error": {...}} as one line of JSON.
std::string error_json(const ApiError& e);

}  // namespace kiln::app::serve
