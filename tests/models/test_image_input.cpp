// models/pipelines/image_input.h: the strength's cut, the resize filter, the image and mask preprocessing.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/pipelines/image_input.h"
#include "models/pipelines/t2i_pipeline.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::models;

TEST_CASE("strength_t_start is diffusers' get_timesteps with Python floats", "[models][images]") {
    // t_start = int(max(N - min(N * strength, N), 0)); the fixtures' runs and the facts' float cases.
    CHECK(strength_t_start(5, 0.6) == 2);
    CHECK(strength_t_start(3, 1.0) == 0);
    CHECK(strength_t_start(4, 0.75) == 1);
    CHECK(strength_t_start(4, 0.9) == 0);  // 4 - 3.6 = 0.4 -> 0
    CHECK(strength_t_start(5, 0.9) == 0);  // 5 - 4.5 = 0.5 -> 0
    CHECK(strength_t_start(28, 0.6) == 11);
}

TEST_CASE("resize_lanczos: a copy at the same size, constants stay constant, a ramp stays monotone",
          "[models][images]") {
    const int w = GENERATE(3, 13, 40), h = GENERATE(1, 7, 24), W = GENERATE(5, 16, 64), H = GENERATE(2, 9, 32);
    std::vector<uint8_t> flat((size_t)w * h * 3, 77), ramp((size_t)w * h);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) ramp[(size_t)y * w + x] = (uint8_t)(x * 255 / std::max(1, w - 1));
    CHECK(resize_lanczos(flat, w, h, 3, w, h) == flat);
    const auto r = resize_lanczos(flat, w, h, 3, W, H);  // normalised weights: exactly 77 after rounding
    CHECK(r == std::vector<uint8_t>((size_t)W * H * 3, 77));
    const auto g = resize_lanczos(ramp, w, h, 1, W, H);
    INFO(w << "x" << h << " -> " << W << "x" << H);
    // The ramp keeps its direction and, the weights being normalised, about its mean (ringing and 8-bit rounding
    // move it a few levels).
    double mean_in = 0, mean_out = 0;
    for (uint8_t v : ramp) mean_in += v / (double)ramp.size();
    for (uint8_t v : g) mean_out += v / (double)g.size();
    CHECK(std::abs(mean_out - mean_in) <= 16);
    for (int y = 0; y < H; ++y) CHECK(g[(size_t)y * W] < g[(size_t)y * W + W - 1]);
}

TEST_CASE("preprocess_image and preprocess_mask: diffusers' [-1, 1] and binarised at 0.5", "[models][images]") {
    ImageInputs in;
    in.image = {{0, 128, 255, 7, 255, 0, 64, 200}, 2, 1};  // two RGBA pixels, alpha ignored
    const Tensor t = preprocess_image(in, 2, 1);
    REQUIRE(t.shape == Shape{1, 3, 1, 2});
    const float* v = t.data<float>();
    CHECK(v[0] == 2.f * (0.f / 255.f) - 1.f);    // R of pixel 0
    CHECK(v[1] == 2.f * (255.f / 255.f) - 1.f);  // R of pixel 1
    CHECK(v[2] == 2.f * (128.f / 255.f) - 1.f);  // G of pixel 0
    CHECK(v[5] == 2.f * (64.f / 255.f) - 1.f);   // B of pixel 1
    // PIL's convert("L"): (19595 R + 38470 G + 7471 B + 0x8000) >> 16; 127 -> 0, 128 -> 1.
    in.mask = {{127, 127, 127, 255, 128, 128, 128, 0}, 2, 1};
    const Tensor m = preprocess_mask(in, 2, 1);
    REQUIRE(m.shape == Shape{1, 1, 1, 2});
    CHECK(m.data<float>()[0] == 0.f);
    CHECK(m.data<float>()[1] == 1.f);
    // A tensor in [0, 1] is normalised; one with values below 0 is taken as it is (diffusers' check).
    ImageInputs tin;
    tin.image_tensor = Tensor::from_f32({1, 3, 1, 1}, {0.f, 0.5f, 1.f});
    CHECK(preprocess_image(tin, 1, 1).data<float>()[1] == 0.f);
    tin.image_tensor = Tensor::from_f32({1, 3, 1, 1}, {-0.5f, 0.5f, 1.f});
    CHECK(preprocess_image(tin, 1, 1).data<float>()[0] == -0.5f);
}

TEST_CASE("plan_t2i with images: pipelines, strength's cut, Fill's channels, Kontext's sizes", "[models][images]") {
    auto fixture = [](const char* name) { return ModelSource::open(test::data_path(std::string("fixtures/") + name)); };
    Pixels px;
    px.width = 48, px.height = 40;
    px.rgba.assign((size_t)48 * 40 * 4, 100);
    {
        T2IOptions o;
        o.inputs.image = px;
        o.steps = 28, o.width = 64, o.height = 64;
        const T2IPlan p = plan_t2i(fixture("sd3_pipeline"), o);
        CHECK(p.pipeline == "StableDiffusion3Img2ImgPipeline");
        CHECK(p.strength == 0.6);  // diffusers' default
        CHECK(p.t_start == 11);
        o.inputs.mask = px;
        CHECK(plan_t2i(fixture("sd3_pipeline"), o).pipeline == "StableDiffusion3InpaintPipeline");
    }
    {
        T2IOptions o;
        o.inputs.image = px, o.inputs.mask = px;
        o.width = 48, o.height = 48;
        const T2IPlan p = plan_t2i(fixture("flux_fill"), o);
        CHECK(p.pipeline == "FluxFillPipeline");
        CHECK((p.fill && !p.inpaint));
        CHECK(p.latent_channels == 16);
        CHECK(p.cond_channels == 64 + 4 * 8 * 8);  // masked-image latents + the mask of an 8x VAE
        CHECK(p.guidance == 30);
        CHECK(p.strength == 1);
        o.inputs.mask = {};
        CHECK_THROWS_WITH(plan_t2i(fixture("flux_fill"), o), Catch::Contains("needs an image and a mask"));
    }
    {
        // Kontext (VAE factor 2 here: sizes in multiples of 4): the default 256x256 request at max_area 4096 is
        // 64x64; the 48x40 reference (aspect 1.2) goes to the preferred (1104, 944) (aspect 1.169), or stays 48x40.
        T2IOptions o;
        o.inputs.image = px;
        o.inputs.max_area = 4096;
        T2IPlan p = plan_t2i(fixture("flux_kontext"), o);
        CHECK(p.pipeline == "FluxKontextPipeline");
        CHECK((p.width == 64 && p.height == 64));
        CHECK((p.ref_width == 1104 && p.ref_height == 944));
        o.inputs.auto_resize = false;
        o.width = 40, o.height = 24, o.inputs.max_area = 960;
        p = plan_t2i(fixture("flux_kontext"), o);
        CHECK((p.width == 40 && p.height == 24));
        CHECK((p.ref_width == 48 && p.ref_height == 40));
        o.inputs.mask = px;
        CHECK_THROWS_WITH(plan_t2i(fixture("flux_kontext"), o), Catch::Contains("cannot inpaint"));
    }
}
