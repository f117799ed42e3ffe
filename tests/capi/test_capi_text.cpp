// The C API on a text-to-image pipeline: the PixArt fixture's prompt and initial latents through kiln_generate
// give diffusers' image; text-model argument errors.
#include <cstring>

#include "runtime/core/safetensors.h"
#include "tests/capi/capi_test.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;

TEST_CASE("C API: kiln_generate with a prompt reproduces diffusers' PixArt pipeline", "[capi][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/pixart_pipeline");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    kiln_model_info info = KILN_MODEL_INFO_INIT;
    REQUIRE(kiln_model_get_info(m.get(), &info) == KILN_OK);
    CHECK(info.kind == KILN_MODEL_TEXT);
    CHECK(std::string(info.pipeline).rfind("PixArt", 0) == 0);
    CHECK(info.class_count == 0);

    auto io = kiln::SafeTensors::open(dir + "/io.safetensors");
    const kiln::Tensor lat = io.read("latents_init").astype(kiln::DType::f32), ref = io.read("image");
    const char* prompts[1] = {"a red fox in the snow"};  // io.json's prompt and call scalars
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 4;
    p.guidance = 4.5;
    p.width = p.height = 32;
    p.latents = lat.data<float>();
    p.latents_shape = lat.shape.data();
    p.latents_ndim = (int)lat.shape.size();
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    CHECK(img.width == 32);
    CHECK(img.count == 1);
    std::vector<float> px(img.required_bytes / sizeof(float));
    img.data = px.data();
    img.capacity = img.required_bytes;
    INFO(kiln_last_error());
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    REQUIRE(ref.numel() == (int64_t)px.size());
    // f32 throughout, as the CLI test of the same fixture: summation order only.
    CHECK(kiln::rel_l2(px, ref.to_f32()) <= 1e-4);

    // Text-model argument errors.
    auto expect = [&](kiln_generate_params q, kiln_status want, const char* needle) {
        kiln_image i2 = KILN_IMAGE_INIT;
        kiln_status s = kiln_generate(m.get(), &q, &i2);
        INFO(kiln_last_error());
        CHECK(s == want);
        CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
    };
    kiln_generate_params q = p;
    int labels[1] = {1};
    q.class_labels = labels;
    q.class_label_count = 1;
    expect(q, KILN_INVALID_ARGUMENT, "class_labels do not apply");
    q = p;
    q.prompt_count = 0;
    expect(q, KILN_INVALID_ARGUMENT, "give prompts");
    q = p;
    const char* bad[2] = {"ok", "a \xff cat"};
    q.prompts = bad;
    q.prompt_count = 2;
    q.latents = nullptr;
    expect(q, KILN_INVALID_ARGUMENT, "UTF-8");
    const char* null_prompt[1] = {nullptr};
    q.prompts = null_prompt;
    q.prompt_count = 1;
    expect(q, KILN_INVALID_ARGUMENT, "prompts[0] is NULL");
    q = p;
    q.width = 30;
    q.latents = nullptr;
    expect(q, KILN_INVALID_ARGUMENT, "multiple");
    q = p;
    q.max_sequence_length = -4;
    expect(q, KILN_INVALID_ARGUMENT, "max_sequence_length");
}
