// kiln_generate_params' options as the pipelines receive them: host_loop runs the loop on the host with the same
// bits as the device loop (DiT and a text pipeline), and an older caller's struct, which ends before host_loop,
// keeps the default (the device loop).
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/safetensors.h"
#include "tests/capi/capi_test.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;

namespace {
// Generates with p (RGB f32 pixels) and fills stats; the status of the call.
kiln_status generate(kiln_model* m, kiln_generate_params p, std::vector<float>& px, kiln_generate_stats& stats) {
    stats = KILN_GENERATE_STATS_INIT;
    p.stats = &stats;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    if (kiln_status s = kiln_generate(m, &p, &img); s != KILN_OK) return s;
    px.assign(img.required_bytes / sizeof(float), 0.f);
    img.data = px.data();
    img.capacity = img.required_bytes;
    return kiln_generate(m, &p, &img);
}
}  // namespace

TEST_CASE("C API: host_loop runs the loop on the host, bitwise the device loop's image", "[capi][vulkan]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    const int labels[2] = {3, 7};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = labels;
    p.class_label_count = 2;
    p.steps = 3;
    p.seed = 5;
    std::vector<float> dev, host, old;
    kiln_generate_stats st;
    INFO(kiln_last_error());
    REQUIRE(generate(m.get(), p, dev, st) == KILN_OK);
    CHECK(st.device_loop == 1);
    p.host_loop = 1;
    REQUIRE(generate(m.get(), p, host, st) == KILN_OK);
    CHECK(st.device_loop == 0);
    CHECK(st.steps == 3);
    CHECK(std::memcmp(dev.data(), host.data(), dev.size() * sizeof(float)) == 0);
    // A caller compiled before host_loop: its struct ends there; the library reads the rest as zero (device loop).
    kiln_generate_params before = p;
    before.struct_size = offsetof(kiln_generate_params, host_loop);
    REQUIRE(generate(m.get(), before, old, st) == KILN_OK);
    CHECK(st.device_loop == 1);
    CHECK(old == dev);
}

TEST_CASE("C API: host_loop on a text pipeline (SD3 fixture), the same image", "[capi][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/sd3_pipeline");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    const char* prompts[1] = {"a cat"};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 2;
    std::vector<float> dev, host;
    kiln_generate_stats st;
    INFO(kiln_last_error());
    REQUIRE(generate(m.get(), p, dev, st) == KILN_OK);
    CHECK(st.device_loop == 1);
    p.host_loop = 1;
    REQUIRE(generate(m.get(), p, host, st) == KILN_OK);
    CHECK(st.device_loop == 0);
    CHECK(dev == host);
}

// Every double field of kiln_generate_params, for a class-label and a text model: NaN, infinities and values out of
// the field's range are KILN_INVALID_ARGUMENT naming the field, before any work (the CLI's checks are these: it calls
// the C API).
TEST_CASE("C API: every double field refuses NaN, infinities and values out of range", "[capi][vulkan]") {
    auto ctx = make_context();
    struct Field {
        double kiln_generate_params::*field;
        const char* name;
        double out_of_range;  // NaN: the range has no finite end
    };
    const double nan = std::nan("");
    const Field fields[] = {
        {&kiln_generate_params::guidance, "guidance", -1},
        {&kiln_generate_params::true_cfg_scale, "true_cfg_scale", -1},
        {&kiln_generate_params::strength, "strength", 1.5},
        {&kiln_generate_params::eta, "eta", -1},
        {&kiln_generate_params::skip_layer_guidance_scale, "skip_layer_guidance_scale", nan},
        {&kiln_generate_params::skip_layer_guidance_start, "skip_layer_guidance_start", 2},
        {&kiln_generate_params::skip_layer_guidance_stop, "skip_layer_guidance_stop", -0.5},
        {&kiln_generate_params::cfg_truncation, "cfg_truncation", nan},
        {&kiln_generate_params::cfg_normalization, "cfg_normalization", -1},
    };
    const int labels[1] = {3};
    const char* prompts[1] = {"a cat"};
    for (const std::string& path : {digits_model(), kiln::test::data_path("fixtures/sd3_pipeline")}) {
        auto m = open_model(ctx.get(), path);
        kiln_generate_params base = KILN_GENERATE_PARAMS_INIT;
        if (path == digits_model()) {
            base.class_labels = labels;
            base.class_label_count = 1;
        } else {
            base.prompts = prompts;
            base.prompt_count = 1;
        }
        auto expect = [&](const kiln_generate_params& p, const std::string& needle) {
            kiln_image img = KILN_IMAGE_INIT;  // a size query: the checks come first
            INFO(path << ": " << needle);
            CHECK(kiln_generate(m.get(), &p, &img) == KILN_INVALID_ARGUMENT);
            CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
        };
        for (const Field& f : fields) {
            std::vector<double> bad = {nan, HUGE_VAL, -HUGE_VAL};
            if (!std::isnan(f.out_of_range)) bad.push_back(f.out_of_range);
            for (double v : bad) {
                kiln_generate_params p = base;
                p.*f.field = v;
                expect(p, std::string(f.name) + " is ");
            }
        }
        kiln_generate_params p = base;
        const double sigmas[2] = {1, nan};
        p.sigmas = sigmas;
        p.sigma_count = 2;
        expect(p, "sigmas[1] is nan: not a finite number");
        p = base;
        const double timesteps[2] = {999, HUGE_VAL};
        p.timesteps = timesteps;
        p.timestep_count = 2;
        expect(p, "timesteps[1] is inf: not a finite number");
        kiln_lora lora = {"absent.safetensors", nan};
        p = base;
        p.loras = &lora;
        p.lora_count = 1;
        expect(p, path == digits_model() ? "loras apply to the text-to-image" : "loras[0].scale is nan");
    }
}
