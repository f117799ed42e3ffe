#pragma once
// Helpers of the C API tests: the built-in model's path, RAII owners of the handles, a generate call.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "include/kiln.h"

namespace kiln::capi_test {

// dit-digits.kiln, converted at build time (the default_model target).
inline std::string digits_model() { return std::string(KILN_BUILD_DIR) + "/dit-digits.kiln"; }

struct ContextDel {
    void operator()(kiln_context* c) const { kiln_context_destroy(c); }
};
struct ModelDel {
    void operator()(kiln_model* m) const { kiln_model_destroy(m); }
};
struct ResultDel {
    void operator()(kiln_result* r) const { kiln_result_destroy(r); }
};
using Context = std::unique_ptr<kiln_context, ContextDel>;
using Model = std::unique_ptr<kiln_model, ModelDel>;
using Result = std::unique_ptr<kiln_result, ResultDel>;

// A context on the default device with validation as the environment says (tests run with KILN_VALIDATION=1).
inline Context make_context() {
    kiln_context* c = nullptr;
    kiln_status s = kiln_context_create(nullptr, &c);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    return Context(c);
}

inline Model open_model(kiln_context* ctx, const std::string& path) {
    kiln_model* m = nullptr;
    kiln_status s = kiln_model_open(ctx, path.c_str(), &m);
    INFO(path << ": " << kiln_last_error());
    REQUIRE(s == KILN_OK);
    return Model(m);
}

// Generates class-label images (RGBA8) with few steps; the status, and the pixels in *pixels.
inline kiln_status generate_digits(kiln_model* m, const std::vector<int>& labels, uint64_t seed,
                                   std::vector<uint8_t>* pixels, int steps = 4, kiln_progress_fn progress = nullptr,
                                   void* user = nullptr) {
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = labels.data();
    p.class_label_count = (int)labels.size();
    p.seed = seed;
    p.steps = steps;
    p.progress = progress;
    p.progress_user = user;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGBA8;
    kiln_status s = kiln_generate(m, &p, &img);
    if (s != KILN_OK) return s;
    pixels->assign(img.required_bytes, 0);
    img.data = pixels->data();
    img.capacity = pixels->size();
    return kiln_generate(m, &p, &img);
}

}  // namespace kiln::capi_test
