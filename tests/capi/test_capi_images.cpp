// kiln_generate with images in: pixel buffers (RGBA8), named draws and the argument errors, as an app calls it.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/core/safetensors.h"
#include "tests/capi/capi_test.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;

namespace {
// A tensor view of t under `name` (t and shape outlive the call).
kiln_tensor view(const char* name, const kiln::Tensor& t, std::vector<int64_t>& shape) {
    shape.assign(t.shape.begin(), t.shape.end());
    kiln_tensor v;
    v.name = name;
    v.dtype = KILN_F32;
    v.ndim = (int)shape.size();
    v.shape = shape.data();
    v.data = t.bytes.data();
    return v;
}

// [H, W, 3] or [H, W] uint8 -> RGBA8 pixels (grey repeated, alpha 255).
std::vector<uint8_t> rgba(const kiln::Tensor& u8) {
    const int64_t n = u8.shape[0] * u8.shape[1], c = u8.shape.size() == 3 ? u8.shape[2] : 1;
    std::vector<uint8_t> out((size_t)n * 4, 255);
    for (int64_t i = 0; i < n; ++i)
        for (int k = 0; k < 3; ++k) out[(size_t)i * 4 + k] = u8.bytes[(size_t)(i * c + (c == 1 ? 0 : k))];
    return out;
}
}  // namespace

TEST_CASE("C API: inpainting from RGBA8 pixel buffers reproduces diffusers' FluxInpaintPipeline",
          "[capi][vulkan][images]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), kiln::test::data_path("fixtures/flux_pipeline"));
    auto io = kiln::SafeTensors::open(kiln::test::data_path("fixtures/flux_inpaint/io.safetensors"));
    const kiln::Tensor pe = io.read("prompt_embeds"), pooled = io.read("pooled_prompt_embeds");
    const kiln::Tensor eps = io.read("image_vae_sample_noise"), noise = io.read("noise");
    std::vector<int64_t> s[4];
    const kiln_tensor embeds[2] = {view("prompt_embeds", pe, s[0]), view("pooled_prompt_embeds", pooled, s[1])};
    const kiln_tensor draws[2] = {view("image_vae_sample_noise", eps, s[2]), view("noise", noise, s[3])};
    std::vector<uint8_t> image_px = rgba(io.read("image_u8")), mask_px = rgba(io.read("mask_u8"));
    kiln_image image = KILN_IMAGE_INIT, mask = KILN_IMAGE_INIT;
    image.format = mask.format = KILN_PIXELS_RGBA8;
    image.width = mask.width = image.height = mask.height = 32;
    image.data = image_px.data(), mask.data = mask_px.data();

    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;  // io.json's run 0
    p.prompt_embeds = embeds;
    p.prompt_embeds_count = 2;
    p.steps = 5;
    p.guidance = 3.5;
    p.width = p.height = 32;
    p.image = &image;
    p.mask = &mask;
    p.strength = 0.6;
    p.noise = draws;
    p.noise_count = 2;
    kiln_result* inter = nullptr;
    p.intermediates = &inter;
    kiln_image out = KILN_IMAGE_INIT;
    out.format = KILN_PIXELS_RGB_F32;
    std::vector<float> px(32 * 32 * 3);
    out.data = px.data();
    out.capacity = px.size() * sizeof(float);
    INFO(kiln_last_error());
    REQUIRE(kiln_generate(m.get(), &p, &out) == KILN_OK);
    Result owned(inter);
    // f32 throughout, the bound of the CLI tests (summation order only).
    CHECK(kiln::rel_l2(px, io.read("image").to_f32()) <= 1e-4);
    bool found = false;
    for (int i = 0; i < kiln_result_count(inter); ++i) {
        kiln_tensor t;
        REQUIRE(kiln_result_get(inter, i, &t) == KILN_OK);
        if (std::string(t.name) != "step2_latents") continue;
        found = true;
        const kiln::Tensor ref = io.read("step2_latents");
        const std::vector<float> got((const float*)t.data, (const float*)t.data + ref.numel());
        CHECK(kiln::rel_l2(got, ref.to_f32()) <= 1e-4);
    }
    CHECK(found);

    // The argument errors: one line, KILN_INVALID_ARGUMENT, before any work.
    auto expect = [&](kiln_generate_params q, const char* needle) {
        q.intermediates = nullptr;
        kiln_image i2 = KILN_IMAGE_INIT;
        CHECK(kiln_generate(m.get(), &q, &i2) == KILN_INVALID_ARGUMENT);
        INFO(kiln_last_error());
        CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
    };
    kiln_generate_params q = p;
    q.strength = 1.5;
    expect(q, "outside (0, 1]");
    kiln_image small = mask;
    small.width = small.height = 16;
    q = p;
    q.mask = &small;
    expect(q, "the mask is 16x16, the image 32x32");
    q = p;
    q.image = nullptr;
    expect(q, "a mask needs the image");
    kiln_image f32 = image;
    f32.format = KILN_PIXELS_RGB_F32;
    q = p;
    q.image = &f32;
    expect(q, "KILN_PIXELS_RGBA8");

    auto dit = open_model(ctx.get(), digits_model());
    const int label = 1;
    kiln_generate_params d = KILN_GENERATE_PARAMS_INIT;
    d.class_labels = &label;
    d.class_label_count = 1;
    d.image = &image;
    kiln_image i3 = KILN_IMAGE_INIT;
    CHECK(kiln_generate(dit.get(), &d, &i3) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("no image-to-image pipeline") != std::string::npos);
}
