// `kiln generate --image / --mask`: diffusers' img2img and inpainting pipelines (SD3, Flux) step by step through
// the CLI (and so the C API), from the preprocessed tensors and from PNG files; and the bad inputs that must stop
// with one line, a non-zero exit and no image file.
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/core/source.h"
#include "models/vae/vae.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
using Tmp = test::TempDir;

using Result = test::CliResult;

Result generate(const Tmp& tmp, const std::string& args) { return test::run_cli(tmp, "kiln", "generate " + args); }

std::string fixture(const std::string& name) { return test::data_path("fixtures/" + name); }

nlohmann::json run_of(const std::string& name, int run) {
    std::ifstream f(fixture(name) + "/io.json");
    return nlohmann::json::parse(f)["runs"][run];
}

// The call's numbers, as diffusers was called.
std::string call_flags(const nlohmann::json& run) {
    const auto& c = run["call"];
    char buf[256];
    std::snprintf(buf, sizeof buf, " --steps %d --guidance %.17g --strength %.17g --width %d --height %d",
                  c["num_inference_steps"].get<int>(), c["guidance_scale"].get<double>(), c["strength"].get<double>(),
                  c["width"].get<int>(), c["height"].get<int>());
    return buf;
}

// A PNG of a uint8 tensor [H, W, 3] or [H, W] (stb_image_write; lossless).
std::string write_png(const Tmp& tmp, const std::string& file, const Tensor& u8) {
    const int h = (int)u8.shape[0], w = (int)u8.shape[1], c = u8.shape.size() == 3 ? (int)u8.shape[2] : 1;
    const std::string path = tmp / file;
    REQUIRE(stbi_write_png(path.c_str(), w, h, c, u8.bytes.data(), w * c));
    return path;
}

// diffusers' StableDiffusion3InpaintPipeline decodes latents / scaling_factor without + shift_factor; Kiln
// decodes as the text-to-image pipeline does, so those three tensors are checked against the CPU reference.
bool diffusers_decode(const std::string& name, const std::string& t) {
    return !(name == "sd3_inpaint" && (t == "final_latents_scaled" || t == "decoded" || t == "image"));
}
}  // namespace

// f32 throughout on both sides: only the summation order differs (dot products of at most a few hundred terms in
// the transformer and the VAE, ~1e-6 relative each, through at most 5 steps), so 1e-4 relative L2 holds with a
// wide margin, the bound of the text pipelines' test (test_generate_cli.cpp).
constexpr double kTol = 1e-4;

TEST_CASE("kiln generate --image-tensor --noise reproduces diffusers' img2img and inpainting step by step",
          "[apps][generate][images][vulkan]") {
    const std::string name =
        GENERATE(as<std::string>{}, "sd3_img2img", "flux_img2img", "sd3_inpaint", "flux_inpaint", "flux_fill");
    const bool inpaint = name.find("inpaint") != std::string::npos || name == "flux_fill";
    const std::string model = name == "flux_fill"
                                  ? fixture(name)  // its own transformer and VAE
                                  : fixture(name.rfind("sd3", 0) == 0 ? "sd3_pipeline" : "flux_pipeline");
    Tmp tmp("kiln_img");
    const std::string io_path = fixture(name) + "/io.safetensors";
    std::string args = "--model " + model + " --prompt-embeds " + io_path + " --image-tensor " + io_path + " --noise " +
                       io_path + call_flags(run_of(name, 0)) + " --dump " + (tmp / "dump.safetensors") + " -o " +
                       (tmp / "out.png");
    if (inpaint) args += " --mask-tensor " + io_path;
    const Result r = generate(tmp, args);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(fs::exists(tmp / "out.png"));
    auto dump = SafeTensors::open(tmp / "dump.safetensors");
    auto io = SafeTensors::open(io_path);
    int compared = 0;
    for (auto& t : io.tensors()) {
        if (!dump.find(t.name) || !diffusers_decode(name, t.name)) continue;
        INFO(name << " " << t.name);
        const Tensor got = dump.read(t.name), ref = io.read(t.name);
        REQUIRE(got.shape == ref.shape);
        CHECK(rel_l2(got.to_f32(), ref.to_f32()) <= kTol);
        ++compared;
    }
    for (const char* must : {"image_latents", "initial_latents", "timesteps", "sigmas", "step0_latents", "image"}) {
        INFO(name << " dump lacks " << must);
        CHECK(dump.find(must));
    }
    if (inpaint && name != "flux_fill") CHECK(dump.find("step0_init_latents_proper"));
    if (name == "flux_fill") {  // the conditioning the pipeline builds
        CHECK(dump.find("masked_image_latents"));
        CHECK(dump.find("mask_latents"));
        CHECK(r.err.find("FluxFillPipeline") != std::string::npos);
    }
    CHECK(compared >= 12);

    if (name == "sd3_inpaint") {
        // Decoded right: latents / scaling_factor + shift_factor, then the VAE on the CPU reference executor.
        const auto src = models::ModelSource::open(model);
        const auto vc = models::VaeConfig::from_json(src.config("vae"));
        const Tensor last = io.read("step2_latents");
        Tensor z(DType::f32, last.shape);
        for (int64_t i = 0; i < z.numel(); ++i)
            z.data<float>()[i] = last.data<float>()[i] / (float)vc.scaling_factor + (float)vc.shift_factor;
        CHECK(rel_l2(dump.read("final_latents_scaled").to_f32(), z.to_f32()) <= kTol);
        models::VaeRunner cpu(nullptr, src, "vae");
        const Tensor dec = cpu.decode(z);
        CHECK(rel_l2(dump.read("decoded").to_f32(), dec.to_f32()) <= kTol);
        CHECK(rel_l2(dump.read("image").to_f32(), io.read("image").to_f32()) > 1e-3);  // diffusers' differs
    }
}

TEST_CASE("kiln generate --image FILE --mask FILE --prompt: the second runs from PNGs, through the C API",
          "[apps][generate][images][vulkan]") {
    const std::string name =
        GENERATE(as<std::string>{}, "sd3_img2img", "flux_img2img", "sd3_inpaint", "flux_inpaint", "flux_fill");
    const bool sd3 = name.rfind("sd3", 0) == 0, fill = name == "flux_fill";
    const bool inpaint = name.find("inpaint") != std::string::npos || fill;
    Tmp tmp("kiln_img");
    const auto run = run_of(name, 1);
    const std::string io_path = fixture(name) + "/run1.safetensors";
    auto io = SafeTensors::open(io_path);
    // Images of the call's size: no resize, so the PNG's pixels give diffusers' preprocessed tensor exactly.
    std::string args = "--model " +
                       fixture(fill  ? name
                               : sd3 ? "sd3_pipeline"
                                     : "flux_pipeline") +
                       " --image " + write_png(tmp, "image.png", io.read("image_u8")) + " --noise " + io_path +
                       call_flags(run);
    // Fill's folder has no text encoders (they are flux_pipeline's): diffusers' prompt_embeds
    args += fill ? " --prompt-embeds " + io_path : " --prompt '" + run["prompt"][0].get<std::string>() + "'";
    if (run["call"].contains("negative_prompt") && run["call"]["negative_prompt"].is_string())
        args += " --negative-prompt '" + run["call"]["negative_prompt"].get<std::string>() + "'";
    if (inpaint) args += " --mask " + write_png(tmp, "mask.png", io.read("mask_u8"));
    const Result r = generate(tmp, args + " --dump " + (tmp / "dump.safetensors") + " -o " + (tmp / "out.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    auto dump = SafeTensors::open(tmp / "dump.safetensors");
    const int loop_steps = (int)run["derived"]["num_loop_steps"].get<int>();
    std::vector<std::string> names;
    names.push_back("step" + std::to_string(loop_steps - 1) + "_latents");  // the last (the file keeps no other)
    if (diffusers_decode(name, "image")) names.push_back("image");
    for (const auto& t : names) {
        INFO(name << " " << t);
        REQUIRE(dump.find(t));
        CHECK(rel_l2(dump.read(t).to_f32(), io.read(t).to_f32()) <= kTol);
    }
}

TEST_CASE("kiln generate: bad images, masks and strengths stop with one line and no image",
          "[apps][generate][images]") {
    Tmp tmp("kiln_img");
    const std::string sd3 = "--model " + fixture("sd3_pipeline") + " --prompt cat --steps 2 --width 32 --height 32";
    auto io = SafeTensors::open(fixture("sd3_inpaint") + "/io.safetensors");
    const std::string png = write_png(tmp, "image.png", io.read("image_u8"));  // 32x32
    Tensor small(DType::u8, {16, 16});
    const std::string small_png = write_png(tmp, "small.png", small);
    {
        std::ofstream(tmp / "text.png") << "not an image\n";
        std::ifstream f(png, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(f)), {});
        std::ofstream(tmp / "truncated.png", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    }
    struct Case {
        std::string args, message;
    };
    const std::vector<Case> cases = {
        {sd3 + " --image " + (tmp / "missing.png"), "cannot open the image"},
        {sd3 + " --image " + (tmp / "text.png"), "not a readable PNG or JPEG"},
        {sd3 + " --image " + (tmp / "truncated.png"), "not a readable PNG or JPEG"},
        {sd3 + " --image " + png + " --mask " + small_png, "the mask is 16x16, the image 32x32"},
        {sd3 + " --image " + png + " --strength 0", "--strength is 0: outside (0, 1]"},
        {sd3 + " --image " + png + " --strength 1.5", "--strength is 1.5: outside (0, 1]"},
        {sd3 + " --strength 0.5", "apply with an image"},
        {"--model " + fixture("pixart_pipeline") + " --prompt cat --image " + png + " --mask " + png, "cannot inpaint"},
        {"--model " + fixture("pixart_pipeline") + " --prompt cat --image " + png,
         "no image-to-image pipeline for PixArt"},
        {"--class-labels 1 --image " + png, "--image does not apply"},
        {"--model " + fixture("flux_kontext") + " --prompt cat --image " + png + " --mask " + png, "cannot inpaint"},
    };
    for (const auto& c : cases) {
        const Result r = generate(tmp, c.args + " -o " + (tmp / "out.png"));
        INFO(c.args << "\n" << r.err);
        CHECK(r.rc != 0);
        CHECK(r.err.find(c.message) != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(!fs::exists(tmp / "out.png"));
    }
}

TEST_CASE("kiln generate on Flux Kontext: the reference's tokens join the sequence, as diffusers",
          "[apps][generate][images][vulkan]") {
    Tmp tmp("kiln_img");
    const std::string model = fixture("flux_kontext");  // flux_pipeline's weights, model_index FluxKontextPipeline
    // Run 0: the preprocessed reference (diffusers resized the 48x40 image to the preferred 68x56) at its size, the
    // default 256x256 request brought to max_area 4096: 64x64.
    const std::string io_path = fixture("flux_kontext") + "/io.safetensors";
    Result r = generate(tmp, "--model " + model + " --prompt-embeds " + io_path + " --image-tensor " + io_path +
                                 " --noise " + io_path + " --max-area 4096 --steps 3 --guidance 2.5 --dump " +
                                 (tmp / "d0.safetensors") + " -o " + (tmp / "o0.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("FluxKontextPipeline") != std::string::npos);
    auto dump = SafeTensors::open(tmp / "d0.safetensors");
    auto io = SafeTensors::open(io_path);
    for (const char* t : {"img_ids", "timesteps", "sigmas", "step2_latents"}) {
        INFO(t);
        REQUIRE(dump.find(t));
        CHECK(rel_l2(dump.read(t).to_f32(), io.read(t).to_f32()) <= kTol);
    }
    // Run 1: a 32x32 PNG kept at its size (--no-auto-resize), 40x24 at max_area 960, prompts encoded by Kiln.
    const auto run = run_of("flux_kontext", 1);
    const std::string io1 = fixture("flux_kontext") + "/run1.safetensors";
    auto ref1 = SafeTensors::open(io1);
    r = generate(tmp, "--model " + model + " --image " + write_png(tmp, "ref.png", ref1.read("image_u8")) +
                          " --noise " + io1 + " --prompt '" + run["prompt"][0].get<std::string>() +
                          "' --no-auto-resize --max-area 960 --width 40 --height 24 --steps 2 --guidance 3.5 --dump " +
                          (tmp / "d1.safetensors") + " -o " + (tmp / "o1.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    auto dump1 = SafeTensors::open(tmp / "d1.safetensors");
    for (const char* t : {"step1_latents", "image"}) {
        INFO(t);
        REQUIRE(dump1.find(t));
        CHECK(rel_l2(dump1.read(t).to_f32(), ref1.read(t).to_f32()) <= kTol);
    }
}
