// kiln_model_open_files: the files people download, opened through the C API. Flux from Black Forest Labs' keys and
// city96's GGUF beside ae/clip_l/t5xxl, SD3 from Stability's single file: the same image as the diffusers folder of
// the same weights; bad files are statuses with one line in kiln_last_error().
#include <cstring>

#include "tests/capi/capi_test.h"
#include "tests/support/single_files.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;

namespace {
std::string fx(const std::string& rel) { return kiln::test::data_path("fixtures/" + rel); }
// A single file of the flux fixture (made from the diffusers folder: tests/support/single_files.h).
std::string sf(const std::string& f) { return kiln::test::single_file("flux", f); }

// A text generation (RGB f32) of the fixture prompt; the status.
kiln_status generate(kiln_model* m, std::vector<float>& px) {
    const char* prompts[1] = {"a castle on a hill at sunset"};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 2;
    p.seed = 3;
    p.width = p.height = 32;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    if (kiln_status s = kiln_generate(m, &p, &img); s != KILN_OK) return s;
    px.assign(img.required_bytes / sizeof(float), 0.f);
    img.data = px.data();
    img.capacity = img.required_bytes;
    return kiln_generate(m, &p, &img);
}

Model open_files(kiln_context* ctx, const kiln_model_files& f) {
    kiln_model* m = nullptr;
    kiln_status s = kiln_model_open_files(ctx, &f, &m);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    return Model(m);
}
}  // namespace

TEST_CASE("C API: kiln_model_open_files gives the diffusers folder's image", "[capi][vulkan][single_file]") {
    auto ctx = make_context();
    const std::string flux = fx("flux_pipeline");
    const std::string dit = sf("flux1-tiny.safetensors"), vae = sf("ae.safetensors"), clip = sf("clip_l.safetensors"),
                      t5 = sf("t5xxl.safetensors");
    std::vector<float> ref, got;
    auto folder = open_model(ctx.get(), flux);
    INFO(kiln_last_error());
    REQUIRE(generate(folder.get(), ref) == KILN_OK);

    kiln_model_files f = KILN_MODEL_FILES_INIT;
    f.diffusion_model = dit.c_str();
    f.vae = vae.c_str();
    f.clip_l = clip.c_str();
    f.t5xxl = t5.c_str();
    f.config = flux.c_str();
    auto m = open_files(ctx.get(), f);
    kiln_model_info info = KILN_MODEL_INFO_INIT;
    REQUIRE(kiln_model_get_info(m.get(), &info) == KILN_OK);
    CHECK(info.kind == KILN_MODEL_TEXT);
    CHECK(std::string(info.pipeline) == "FluxPipeline");
    REQUIRE(generate(m.get(), got) == KILN_OK);
    CHECK(got == ref);  // the same weights, bitwise, in the same graph

    // SD3: everything from Stability's single file, configs and tokenizers from the folder.
    const std::string sd3 = fx("sd3_pipeline"), sd3_file = kiln::test::single_file("sd3", "sd3-tiny.safetensors");
    auto sd3_folder = open_model(ctx.get(), sd3);
    REQUIRE(generate(sd3_folder.get(), ref) == KILN_OK);
    kiln_model_files g = KILN_MODEL_FILES_INIT;
    g.model = sd3_file.c_str();
    g.config = sd3.c_str();
    auto m3 = open_files(ctx.get(), g);
    REQUIRE(generate(m3.get(), got) == KILN_OK);
    CHECK(got == ref);
}

TEST_CASE("C API: kiln_model_open_files refuses bad files with a status and one line", "[capi][single_file]") {
    auto ctx = make_context();
    const std::string flux = fx("flux_pipeline");
    const std::string dit = sf("flux1-tiny.safetensors"), clip = sf("clip_l.safetensors"),
                      none = fx("flux_pipeline_singlefile/nope.gguf");
    kiln_model* m = nullptr;
    kiln_model_files f = KILN_MODEL_FILES_INIT;
    CHECK(kiln_model_open_files(ctx.get(), &f, &m) == KILN_INVALID_ARGUMENT);  // names no file
    f.diffusion_model = none.c_str();
    CHECK(kiln_model_open_files(ctx.get(), &f, &m) == KILN_NOT_FOUND);
    f.diffusion_model = dit.c_str();
    f.vae = clip.c_str();  // a CLIP given as the VAE
    f.config = flux.c_str();
    CHECK(kiln_model_open_files(ctx.get(), &f, &m) == KILN_INVALID_ARGUMENT);
    CHECK(std::strstr(kiln_last_error(), "given as --vae") != nullptr);
    CHECK(std::strchr(kiln_last_error(), '\n') == nullptr);
    f.vae = nullptr;
    f.config = nullptr;  // a tiny Flux: no published config
    CHECK(kiln_model_open_files(ctx.get(), &f, &m) == KILN_INVALID_ARGUMENT);
    CHECK(std::strstr(kiln_last_error(), "--config") != nullptr);
    CHECK(m == nullptr);
    CHECK(kiln_model_open_files(ctx.get(), nullptr, &m) == KILN_INVALID_ARGUMENT);
}
