#include "apps/kiln/serve_request.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace kiln::app::serve {

namespace {
using json = nlohmann::json;

// Nesting deeper than any valid request is refused before nlohmann parses it: its parser keeps a stack per level, and
// a 64 KiB body of '[' would otherwise build 64 Ki levels.
bool nesting_within(std::string_view s, int max_depth) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : s) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return false;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return true;
}

ApiError bad(std::string param, std::string message, std::string code = "") {
    ApiError e;
    e.param = std::move(param);
    e.message = std::move(message);
    e.code = std::move(code);
    return e;
}

// "WxH" with both sides 1 .. max_side, digits only; "auto" = the model's size.
bool parse_size(const std::string& s, int max_side, int* w, int* h) {
    if (s == "auto") return *w = *h = 0, true;
    size_t x = s.find('x');
    if (x == std::string::npos || x == 0 || x + 1 >= s.size() || s.size() > 11) return false;
    long v[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
        std::string_view part = k == 0 ? std::string_view(s).substr(0, x) : std::string_view(s).substr(x + 1);
        for (char c : part) {
            if (c < '0' || c > '9') return false;
            v[k] = v[k] * 10 + (c - '0');
        }
        if (v[k] < 1 || v[k] > max_side) return false;
    }
    *w = (int)v[0], *h = (int)v[1];
    return true;
}

// Reads one field of the object into `r`; false with *err for a wrong type or a value outside the limits.
bool read_field(const std::string& key, const json& v, const Limits& L, ImageRequest& r, ApiError* err) {
    auto text = [&](std::string& dst, size_t max) {
        if (!v.is_string()) return *err = bad(key, "'" + key + "' must be a string", "invalid_type"), false;
        dst = v.get<std::string>();
        if (dst.size() > max)
            return *err = bad(key, "'" + key + "' is longer than " + std::to_string(max) + " bytes", "too_long"), false;
        return true;
    };
    auto integer = [&](int& dst, int lo, int hi) {
        if (!v.is_number_integer()) return *err = bad(key, "'" + key + "' must be an integer", "invalid_type"), false;
        // nlohmann stores a non-negative literal as unsigned: compare it as such (0 must still meet lo).
        const bool in_range = v.is_number_unsigned()
                                  ? v.get<uint64_t>() >= (uint64_t)lo && v.get<uint64_t>() <= (uint64_t)hi
                                  : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
        if (!in_range)
            return *err = bad(key, "'" + key + "' must be in " + std::to_string(lo) + " .. " + std::to_string(hi),
                              "invalid_value"),
                   false;
        dst = (int)v.get<int64_t>();
        return true;
    };
    if (key == "prompt") return text(r.prompt, L.max_prompt);
    if (key == "negative_prompt") return text(r.negative_prompt, L.max_prompt);
    if (key == "model") return text(r.model, 256);
    if (key == "scheduler") return text(r.scheduler, 64);
    if (key == "user") {  // OpenAI's end-user id: accepted, unused
        std::string ignored;
        return text(ignored, 256);
    }
    if (key == "n") return integer(r.n, 1, L.max_n);
    if (key == "steps") return integer(r.steps, 1, L.max_steps);
    if (key == "size") {
        std::string s;
        if (!text(s, 64)) return false;
        if (parse_size(s, L.max_side, &r.width, &r.height)) return true;
        return *err = bad(key, "'size' must be \"WxH\" with sides 1 .. " + std::to_string(L.max_side) + ", or \"auto\"",
                          "invalid_value"),
               false;
    }
    if (key == "response_format") {
        std::string f;
        if (!text(f, 64)) return false;
        if (f == "b64_json") return true;
        return *err = bad(key, "'response_format' \"" + f + "\" is not supported: kiln serve answers b64_json only",
                          "unsupported_value"),
               false;
    }
    if (key == "seed") {
        if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
            return *err = bad(key, "'seed' must be an integer in 0 .. 2^64-1", "invalid_type"), false;
        r.seed = v.get<uint64_t>();
        return true;
    }
    if (key == "guidance_scale") {
        if (!v.is_number()) return *err = bad(key, "'guidance_scale' must be a number", "invalid_type"), false;
        r.guidance_scale = v.get<double>();
        r.guidance_given = true;
        if (std::isfinite(r.guidance_scale) && r.guidance_scale >= 0 && r.guidance_scale <= 100) return true;
        return *err = bad(key, "'guidance_scale' must be in 0 .. 100", "invalid_value"), false;
    }
    if (key == "lora_scales") {
        const std::string range = "numbers in -" + std::to_string((int)kMaxLoraScale) + " .. " +
                                  std::to_string((int)kMaxLoraScale) + ", one per LoRA of the server";
        if (!v.is_array()) return *err = bad(key, "'lora_scales' must be an array of " + range, "invalid_type"), false;
        if (v.empty() || v.size() > kMaxLoraScales)
            return *err = bad(key, "'lora_scales' must hold 1 .. " + std::to_string(kMaxLoraScales) + " " + range,
                              "invalid_value"),
                   false;
        for (const json& e : v) {
            if (!e.is_number()) return *err = bad(key, "'lora_scales' must hold " + range, "invalid_type"), false;
            const double x = e.get<double>();  // JSON has no NaN/Inf literals; a huge one still fails the bound
            if (!std::isfinite(x) || std::fabs(x) > kMaxLoraScale)
                return *err = bad(key, "'lora_scales' must hold " + range, "invalid_value"), false;
            r.lora_scales.push_back(x);
        }
        return true;
    }
    if (key == "text_encoder_layers") {
        const std::string range = std::to_string(kMaxTextEncoderLayers) + " integers in -" +
                                  std::to_string(kMaxLayerIndex) + " .. " + std::to_string(kMaxLayerIndex);
        if (!v.is_array())
            return *err = bad(key, "'text_encoder_layers' must be an array of 1 .. " + range, "invalid_type"), false;
        if (v.empty() || v.size() > kMaxTextEncoderLayers)
            return *err = bad(key, "'text_encoder_layers' must hold 1 .. " + range, "invalid_value"), false;
        for (const json& e : v) {
            if (!e.is_number_integer())
                return *err = bad(key, "'text_encoder_layers' must hold integers", "invalid_type"), false;
            const bool in = e.is_number_unsigned() ? e.get<uint64_t>() <= (uint64_t)kMaxLayerIndex
                                                   : e.get<int64_t>() >= -kMaxLayerIndex;
            if (!in) return *err = bad(key, "'text_encoder_layers' must hold 1 .. " + range, "invalid_value"), false;
            r.text_encoder_layers.push_back((int)e.get<int64_t>());
        }
        return true;
    }
    if (key == "cfg_truncation") {
        if (!v.is_number()) return *err = bad(key, "'cfg_truncation' must be a number", "invalid_type"), false;
        r.cfg_truncation = v.get<double>();
        if (std::isfinite(r.cfg_truncation)) return true;
        return *err = bad(key, "'cfg_truncation' must be finite", "invalid_value"), false;
    }
    if (key == "cfg_normalization") {  // diffusers takes a bool or a float
        if (v.is_boolean()) return r.cfg_normalization = v.get<bool>() ? 1.0 : 0.0, true;
        if (!v.is_number())
            return *err = bad(key, "'cfg_normalization' must be a number or true/false", "invalid_type"), false;
        r.cfg_normalization = v.get<double>();
        if (std::isfinite(r.cfg_normalization) && r.cfg_normalization >= 0) return true;
        return *err = bad(key, "'cfg_normalization' must be a number >= 0 (or true/false)", "invalid_value"), false;
    }
    if (key == "stream") {
        if (!v.is_boolean()) return *err = bad(key, "'stream' must be true or false", "invalid_type"), false;
        r.stream = v.get<bool>();
        return true;
    }
    *err = bad(key, "unknown field '" + key + "'", "unknown_parameter");
    return false;
}
}  // namespace

bool parse_image_request(std::string_view body, const Limits& limits, ImageRequest* out, ApiError* err) {
    *out = ImageRequest{};
    if (body.size() > limits.max_body) {
        *err = bad("", "the request body is over " + std::to_string(limits.max_body) + " bytes", "body_too_large");
        err->status = 413;
        return false;
    }
    if (!nesting_within(body, 8)) return *err = bad("", "the request body nests too deeply", "invalid_json"), false;
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return *err = bad("", "the request body is not valid JSON", "invalid_json"), false;
    if (!j.is_object()) return *err = bad("", "the request body must be a JSON object", "invalid_json"), false;
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!read_field(it.key(), it.value(), limits, *out, err)) return false;
    if (!j.contains("prompt")) return *err = bad("prompt", "'prompt' is required", "missing_required_parameter"), false;
    return true;
}

std::string error_json(const ApiError& e) {
    auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
    json j = {
        {"error", {{"message", e.message}, {"type", e.type}, {"param", or_null(e.param)}, {"code", or_null(e.code)}}}};
    // Invalid UTF-8 in an echoed field name is replaced, never thrown on.
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kiln::app::serve
