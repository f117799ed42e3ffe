// kiln_generate_params' options as the pipelines receive them: host_loop runs the loop on the host with the same
// bits as the device loop (DiT and a text pipeline), and an older caller's struct, which ends before host_loop,
// keeps the default (the device loop).
#include <cstddef>
#include <cstring>

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
