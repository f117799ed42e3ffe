// kiln_generate_params' Z-Image and FLUX.2 [klein] fields (text_encoder_layers, cfg_truncation, cfg_normalization)
// and kiln_model_files.llm: each reaches the options the pipelines check (a value only those checks refuse is
// refused), and is KILN_INVALID_ARGUMENT with one line for another pipeline, a class-label model, prompt_embeds or a
// list that is not one. Size queries on config pipelines (tests/support/qwen3_pipelines.h): no transformer runs.
#include <cstddef>
#include <string>
#include <vector>

#include "tests/capi/capi_test.h"
#include "tests/support/qwen3_pipelines.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;

namespace {
// A size query of p on m: the status `want`, and kiln_last_error() holding `needle`.
void expect(kiln_model* m, const kiln_generate_params& p, kiln_status want, const std::string& needle = "") {
    kiln_image img = KILN_IMAGE_INIT;
    const kiln_status s = kiln_generate(m, &p, &img);
    const std::string err = kiln_last_error();
    INFO(err);
    CHECK(s == want);
    CHECK(err.find(needle) != std::string::npos);
    CHECK(err.find('\n') == std::string::npos);
}
}  // namespace

TEST_CASE("C API: text_encoder_layers, cfg_truncation, cfg_normalization reach the Qwen3 pipelines' options",
          "[capi][vulkan]") {
    kiln::test::TempDir tmp("kiln_capi_qwen3");
    auto ctx = make_context();
    auto zi = open_model(ctx.get(), kiln::test::write_qwen3_pipeline(tmp / "z_image", false));
    auto kl = open_model(ctx.get(), kiln::test::write_qwen3_pipeline(tmp / "klein", true));
    const char* prompts[1] = {"a fox"};
    kiln_generate_params base = KILN_GENERATE_PARAMS_INIT;
    base.prompts = prompts;
    base.prompt_count = 1;

    // klein: the layers go to check_prompts, which knows this Qwen3 has 28 layers (hidden_states -29 .. 28).
    const int good[3] = {9, 18, -2}, past[2] = {9, 29}, before[1] = {-30};
    kiln_generate_params p = base;
    p.text_encoder_layers = good;
    p.text_encoder_layer_count = 3;
    expect(kl.get(), p, KILN_OK);
    p.text_encoder_layers = past;
    p.text_encoder_layer_count = 2;
    expect(kl.get(), p, KILN_INVALID_ARGUMENT,
           "text_encoder_out_layers: 29 is not a hidden_states entry of this 28-layer Qwen3");
    p.text_encoder_layers = before;
    p.text_encoder_layer_count = 1;
    expect(kl.get(), p, KILN_INVALID_ARGUMENT, "-30 is not a hidden_states entry");
    p.text_encoder_layers = nullptr;
    p.text_encoder_layer_count = 2;
    expect(kl.get(), p, KILN_INVALID_ARGUMENT,
           "text_encoder_layers / text_encoder_layer_count (2) do not describe a list");
    p.text_encoder_layer_count = -1;
    expect(kl.get(), p, KILN_INVALID_ARGUMENT);
    // Z-Image takes no layers (its pipeline's __call__ has none).
    p = base;
    p.text_encoder_layers = good;
    p.text_encoder_layer_count = 1;
    expect(zi.get(), p, KILN_INVALID_ARGUMENT,
           "text_encoder_out_layers apply to Flux2KleinPipeline (ZImagePipeline's __call__ has none)");

    // Z-Image: cfg_truncation and cfg_normalization reach T2IOptions, which plan_t2i checks against the family.
    p = base;
    p.cfg_truncation = 0.7;
    p.cfg_normalization = 1.0;
    expect(zi.get(), p, KILN_OK);
    p.cfg_truncation = -2;  // any finite value (below 0: never guided)
    p.cfg_normalization = 0;
    expect(zi.get(), p, KILN_OK);
    p.cfg_normalization = -0.5;
    expect(zi.get(), p, KILN_INVALID_ARGUMENT, "cfg_normalization is -0.5: outside [0, inf)");
    for (kiln_model* m : {kl.get()}) {
        p = base;
        p.cfg_truncation = 0.5;
        expect(m, p, KILN_INVALID_ARGUMENT, "Flux2KleinPipeline: cfg_truncation applies to ZImagePipeline");
        p = base;
        p.cfg_normalization = 1;
        expect(m, p, KILN_INVALID_ARGUMENT, "Flux2KleinPipeline: cfg_normalization applies to ZImagePipeline");
    }
    // A caller compiled before these fields: its struct ends before them, read as the defaults.
    p = base;
    p.struct_size = offsetof(kiln_generate_params, text_encoder_layers);
    expect(kl.get(), p, KILN_OK);
    expect(zi.get(), p, KILN_OK);
}

TEST_CASE("C API: the Qwen3 fields on other models are one clear error", "[capi][vulkan]") {
    auto ctx = make_context();
    const int layers[1] = {9};
    const char* prompts[1] = {"a cat"};
    const int labels[1] = {3};
    {
        auto m = open_model(ctx.get(), kiln::test::data_path("fixtures/sd3_pipeline"));
        kiln_generate_params base = KILN_GENERATE_PARAMS_INIT;
        base.prompts = prompts;
        base.prompt_count = 1;
        kiln_generate_params p = base;
        p.text_encoder_layers = layers;
        p.text_encoder_layer_count = 1;
        expect(m.get(), p, KILN_INVALID_ARGUMENT, "text_encoder_out_layers apply to Flux2KleinPipeline");
        p = base;
        p.cfg_truncation = 0.5;
        expect(m.get(), p, KILN_INVALID_ARGUMENT, "StableDiffusion3Pipeline: cfg_truncation applies to ZImagePipeline");
        p = base;
        p.cfg_normalization = 2;
        expect(m.get(), p, KILN_INVALID_ARGUMENT, "cfg_normalization applies to ZImagePipeline");
        p = base;
        p.cfg_truncation = 1.0;  // diffusers' default, spelled out: nothing asked for
        expect(m.get(), p, KILN_OK);
        // prompt_embeds hold encoded prompts: no layers to pick.
        const int64_t shape[3] = {1, 4, 8};
        std::vector<float> zeros(32, 0.f);
        kiln_tensor t = {"prompt_embeds", KILN_F32, 3, shape, zeros.data()};
        p = KILN_GENERATE_PARAMS_INIT;
        p.prompt_embeds = &t;
        p.prompt_embeds_count = 1;
        p.text_encoder_layers = layers;
        p.text_encoder_layer_count = 1;
        expect(m.get(), p, KILN_INVALID_ARGUMENT, "text_encoder_layers apply to prompts");
    }
    {
        auto m = open_model(ctx.get(), digits_model());
        kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
        p.class_labels = labels;
        p.class_label_count = 1;
        p.cfg_truncation = 0.5;
        expect(m.get(), p, KILN_INVALID_ARGUMENT,
               "is a DiT model: cfg_truncation and cfg_normalization apply to ZImagePipeline");
        p.cfg_truncation = 0;
        p.text_encoder_layers = layers;
        p.text_encoder_layer_count = 1;
        expect(m.get(), p, KILN_INVALID_ARGUMENT, "prompts do not apply");
    }
}

TEST_CASE("C API: kiln_model_files.llm is the Qwen3 text encoder's file", "[capi][vulkan]") {
    kiln::test::TempDir tmp("kiln_capi_llm");
    auto ctx = make_context();
    const std::string flux = kiln::test::data_path("fixtures/flux_pipeline");
    const std::string transformer = flux + "/transformer/diffusion_pytorch_model.safetensors";
    const std::string missing = tmp / "qwen_3_4b.safetensors";
    kiln_model_files f = KILN_MODEL_FILES_INIT;
    f.diffusion_model = transformer.c_str();
    f.config = flux.c_str();
    f.llm = missing.c_str();
    kiln_model* m = nullptr;
    CHECK(kiln_model_open_files(ctx.get(), &f, &m) == KILN_NOT_FOUND);
    CHECK(std::string(kiln_last_error()).find(missing + ": no such file or folder") != std::string::npos);
    CHECK(m == nullptr);
    // A Qwen3 folder beside a FLUX.1 transformer: that pipeline has no such encoder.
    const std::string qwen = kiln::test::write_qwen3_pipeline(tmp / "z_image", false) + "/text_encoder";
    f.llm = qwen.c_str();
    CHECK(kiln_model_open_files(ctx.get(), &f, &m) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("Flux pipelines have no Qwen3 text encoder (--text-encoder)") !=
          std::string::npos);
    CHECK(m == nullptr);
}
