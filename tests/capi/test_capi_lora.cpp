// The C API with LoRAs: kiln_generate_params.loras on the Flux fixture gives the public runs' images as trained,
// scales change between calls on the same model, and bad LoRAs are KILN_INVALID_ARGUMENT / KILN_IO naming the file.
#include <cmath>

#include "runtime/core/safetensors.h"
#include "tests/capi/capi_test.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;

TEST_CASE("C API: loras reproduce the Flux LoRA runs; scales change between calls", "[capi][lora][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/flux_pipeline");
    const std::string ldir = kiln::test::data_path("fixtures/flux_lora/");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    const kiln::Tensor lat = kiln::SafeTensors::open(dir + "/io.safetensors").read("latents_init");
    auto ref = kiln::SafeTensors::open(ldir + "io.safetensors");
    const char* prompts[1] = {"a castle on a hill at sunset"};  // flux_lora's io.json
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 3;
    p.guidance = 3.5;
    p.width = p.height = 32;
    p.latents = lat.data<float>();
    p.latents_shape = lat.shape.data();
    p.latents_ndim = (int)lat.shape.size();
    const std::string peft = ldir + "lora_peft.safetensors", peft_b = ldir + "lora_peft_b.safetensors",
                      kohya = ldir + "lora_kohya.safetensors";
    auto image = [&](const std::vector<kiln_lora>& loras, int apply = KILN_LORA_APPLY_DEFAULT) {
        kiln_generate_params q = p;
        q.lora_apply = apply;
        q.loras = loras.data();
        q.lora_count = (int)loras.size();
        kiln_image img = KILN_IMAGE_INIT;
        img.format = KILN_PIXELS_RGB_F32;
        std::vector<float> px(32 * 32 * 3);
        img.data = px.data();
        img.capacity = px.size() * sizeof(float);
        INFO(kiln_last_error());
        REQUIRE(kiln_generate(m.get(), &q, &img) == KILN_OK);
        return px;
    };
    // f32 throughout, as the CLI's LoRA test: 1e-4 relative L2.
    CHECK(kiln::rel_l2(image({{peft.c_str(), 0.7}, {peft_b.c_str(), -0.4}}), ref.read("combo/image").to_f32()) <= 1e-4);
    CHECK(kiln::rel_l2(image({{kohya.c_str(), 1.0}}), ref.read("kohya_s1_as_trained/image").to_f32()) <= 1e-4);
    CHECK(kiln::rel_l2(image({{peft.c_str(), 0.7}, {peft_b.c_str(), -0.4}}, KILN_LORA_APPLY_RUNTIME),
                       ref.read("combo/image").to_f32()) <= 1e-4);
    // The same model, other scales: peft at 1 then at 0.6 (diffusers' joint_attention_kwargs scale).
    CHECK(kiln::rel_l2(image({{peft.c_str(), 1.0}}), ref.read("peft_s1/image").to_f32()) <= 1e-4);
    CHECK(kiln::rel_l2(image({{peft.c_str(), 0.6}}), ref.read("peft_jak/image").to_f32()) <= 1e-4);
    CHECK(kiln::rel_l2(image({}), ref.read("base/image").to_f32()) <= 1e-4);

    auto expect = [&](kiln_generate_params q, kiln_status want, const std::string& needle) {
        kiln_image i2 = KILN_IMAGE_INIT;
        kiln_status s = kiln_generate(m.get(), &q, &i2);
        INFO(kiln_last_error());
        CHECK(s == want);
        CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
    };
    kiln_generate_params q = p;
    q.lora_count = 1;
    expect(q, KILN_INVALID_ARGUMENT, "lora_count");
    const std::string sd3 = kiln::test::data_path("fixtures/sd3_lora/lora_peft.safetensors");
    kiln_lora bad[1] = {{sd3.c_str(), 1.0}};
    q.loras = bad;
    expect(q, KILN_INVALID_ARGUMENT, "match no module");
    q.lora_allow_unmatched = 1;  // a few keys match (block 0): applied, the rest warned about
    expect(q, KILN_OK, "");
    q.lora_allow_unmatched = 0;
    bad[0] = {peft.c_str(), std::nan("")};
    expect(q, KILN_INVALID_ARGUMENT, "scale");
    bad[0] = {peft.c_str(), 1.0};
    q.lora_apply = 7;
    expect(q, KILN_INVALID_ARGUMENT, "lora_apply");
}

TEST_CASE("C API: loras on a class-label model are refused", "[capi][lora][vulkan]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    const int labels[1] = {3};
    const std::string peft = kiln::test::data_path("fixtures/flux_lora/lora_peft.safetensors");
    const kiln_lora l[1] = {{peft.c_str(), 1.0}};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = labels;
    p.class_label_count = 1;
    p.loras = l;
    p.lora_count = 1;
    kiln_image img = KILN_IMAGE_INIT;
    CHECK(kiln_generate(m.get(), &p, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("class-label model") != std::string::npos);
}

// keep_transformer and kiln_model_set_lora_scales: the resident transformer's runtime LoRA scales change without
// planning, recording or uploading anything, and the image equals bit for bit a fresh model's at those scales: the
// same graph planned on the same device (kernel choice from the device's saved table), the same weights and A/B
// bytes (the user scales are not folded into them), the same scale values, so the same dispatches on the same data.
TEST_CASE("C API: kiln_model_set_lora_scales on a resident transformer", "[capi][lora][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/flux_pipeline");
    const std::string ldir = kiln::test::data_path("fixtures/flux_lora/");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    const kiln::Tensor lat = kiln::SafeTensors::open(dir + "/io.safetensors").read("latents_init");
    const char* prompts[1] = {"a castle on a hill at sunset"};
    const std::string peft = ldir + "lora_peft.safetensors", peft_b = ldir + "lora_peft_b.safetensors";
    auto image = [&](kiln_model* model, const std::vector<kiln_lora>& loras, int keep, int apply, int* reused) {
        kiln_generate_params q = KILN_GENERATE_PARAMS_INIT;
        q.prompts = prompts;
        q.prompt_count = 1;
        q.steps = 2;
        q.width = q.height = 32;
        q.latents = lat.data<float>();
        q.latents_shape = lat.shape.data();
        q.latents_ndim = (int)lat.shape.size();
        q.loras = loras.data();
        q.lora_count = (int)loras.size();
        q.lora_apply = apply;
        q.keep_transformer = keep;
        kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
        q.stats = &st;
        kiln_image img = KILN_IMAGE_INIT;
        img.format = KILN_PIXELS_RGB_F32;
        std::vector<float> px(32 * 32 * 3);
        img.data = px.data();
        img.capacity = px.size() * sizeof(float);
        INFO(kiln_last_error());
        REQUIRE(kiln_generate(model, &q, &img) == KILN_OK);
        if (reused) *reused = st.transformer_reused;
        return px;
    };
    auto set_error = [&](const std::vector<double>& s, const std::string& needle) {
        CHECK(kiln_model_set_lora_scales(m.get(), s.data(), (int)s.size()) == KILN_INVALID_ARGUMENT);
        INFO(kiln_last_error());
        CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
    };
    set_error({1.0}, "no resident transformer");
    int reused = -1;
    const std::vector<kiln_lora> s1 = {{peft.c_str(), 0.7}, {peft_b.c_str(), -0.4}};
    const auto a1 = image(m.get(), s1, 1, KILN_LORA_APPLY_DEFAULT, &reused);
    CHECK(reused == 0);
    set_error({1.0}, "1 LoRA scales given, the resident transformer has 2");
    set_error({1.0, std::nan("")}, "scales[1] is nan: not a finite number");
    const std::vector<double> s2 = {1.2, 0.5};
    REQUIRE(kiln_model_set_lora_scales(m.get(), s2.data(), 2) == KILN_OK);
    const auto a2 = image(m.get(), s1, 1, KILN_LORA_APPLY_DEFAULT, &reused);  // s1 given; the set scales apply
    CHECK(reused == 1);
    CHECK(a2 != a1);

    auto fresh = open_model(ctx.get(), dir);
    const auto f2 =
        image(fresh.get(), {{peft.c_str(), s2[0]}, {peft_b.c_str(), s2[1]}}, 0, KILN_LORA_APPLY_DEFAULT, &reused);
    CHECK(reused == 0);
    CHECK(f2 == a2);  // bit for bit

    // Other LoRA files replace the resident transformer (and the scales set for the old one).
    const auto b1 = image(m.get(), {{peft.c_str(), 1.0}}, 1, KILN_LORA_APPLY_DEFAULT, &reused);
    CHECK(reused == 0);
    const auto b2 = image(m.get(), {{peft.c_str(), 1.0}}, 1, KILN_LORA_APPLY_DEFAULT, &reused);
    CHECK(reused == 1);
    CHECK(b1 == b2);
    // Merged LoRAs are baked into the weights.
    image(m.get(), {{peft.c_str(), 1.0}}, 1, KILN_LORA_APPLY_MERGE, &reused);
    set_error({0.5}, "baked");
    // keep_transformer 0 frees it.
    image(m.get(), {}, 0, KILN_LORA_APPLY_DEFAULT, &reused);
    set_error({0.5}, "no resident transformer");
}
