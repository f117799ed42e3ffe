// kiln generate's Z-Image and FLUX.2 [klein] flags (--text-encoder-layers, --cfg-truncation, --cfg-normalization,
// --text-encoder/--llm): parsed into GenerateFlags, mapped into kiln_generate_params (generate_params.h), and, run
// as the binary, refused with one line for another pipeline or a bad value, before any model work and without a PNG.
// The pipelines here are configs with the fixtures' Qwen3 encoders (tests/support/qwen3_pipelines.h): nothing runs a
// transformer.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <limits>

#include "apps/kiln/generate_flags.h"
#include "apps/kiln/generate_params.h"
#include "tests/apps/cli_run.h"
#include "tests/support/qwen3_pipelines.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::app;
namespace fs = std::filesystem;

namespace {
struct Parsed {
    CLI::App app;
    GenerateFlags f;
    explicit Parsed(const std::string& args) {
        add_generate_flags(app, f);
        app.parse(args, false);
    }
};

// The kiln::Error message of fn ("" when it does not throw).
template <class Fn>
std::string error_of(Fn fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST_CASE("kiln generate Qwen3 flags: parsed, defaults, --cfg-normalization alone is 1", "[apps][flags]") {
    Parsed none("");
    CHECK(none.f.cfg_truncation == 1.0);
    CHECK(none.f.cfg_normalization == 0.0);
    CHECK(text_encoder_layers(none.f).empty());
    CHECK(none.f.first_text_only_given().empty());

    Parsed p("--text-encoder-layers 9,18,27 --cfg-truncation 0.7 --cfg-normalization --llm q.safetensors");
    CHECK(text_encoder_layers(p.f) == std::vector<int>{9, 18, 27});
    CHECK(p.f.cfg_truncation == 0.7);
    CHECK(p.f.cfg_normalization == 1.0);  // diffusers' True
    CHECK(p.f.parts.llm == "q.safetensors");
    CHECK(p.f.given("--cfg-normalization"));
    CHECK(!p.f.first_text_only_given().empty());  // what a DiT model refuses
    CHECK(Parsed("--cfg-normalization 0.5").f.cfg_normalization == 0.5);
    CHECK(Parsed("--cfg-normalization=2").f.cfg_normalization == 2.0);
    CHECK(Parsed("--text-encoder t").f.parts.llm == "t");
    CHECK(text_encoder_layers(Parsed("--text-encoder-layers=-2").f) == std::vector<int>{-2});
    CHECK(text_encoder_layers(Parsed("--text-encoder-layers=-1,0,36").f) == std::vector<int>{-1, 0, 36});

    for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
             {"--text-encoder-layers 9,x", "--text-encoder-layers: 'x' is not an integer"},
             {"--text-encoder-layers 9.5", "--text-encoder-layers: '9.5' is not an integer"},
             {"--text-encoder-layers 9,,18", "--text-encoder-layers: '' is not an integer"},
             {"--text-encoder-layers 99999999999", "'99999999999' is not an integer"},
             {"--text-encoder-layers EMPTY", "--text-encoder-layers is empty"}}) {
        Parsed q(args);
        if (q.f.text_encoder_layers == "EMPTY") q.f.text_encoder_layers.clear();  // given as ""
        const std::string e = error_of([&] { (void)text_encoder_layers(q.f); });
        INFO(args << ": " << e);
        CHECK(e.find(needle) != std::string::npos);
        CHECK(e.find('\n') == std::string::npos);
    }
    for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
             {"--cfg-truncation=nan", "--cfg-truncation is nan: not a finite number"},
             {"--cfg-truncation=-inf", "--cfg-truncation is -inf: not a finite number"},
             {"--cfg-normalization=-1", "--cfg-normalization is -1: outside [0, inf)"},
             {"--cfg-normalization=inf", "--cfg-normalization is inf: not a finite number"}}) {
        Parsed q(args);
        const std::string e = error_of([&] { check_float_flags(q.f); });
        INFO(args << ": " << e);
        CHECK(e.find(needle) != std::string::npos);
    }
    CHECK(error_of([] { check_float_flags(Parsed("--cfg-truncation=-3 --cfg-normalization=0").f); }).empty());
}

TEST_CASE("kiln generate Qwen3 options into kiln_generate_params", "[apps][flags]") {
    models::T2IOptions t;
    models::PromptOptions x;
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    set_guidance(p, t, x);  // the defaults: the C API's zeros
    CHECK(p.cfg_truncation == 0.0);
    CHECK(p.cfg_normalization == 0.0);
    CHECK(p.text_encoder_layers == nullptr);
    CHECK(p.text_encoder_layer_count == 0);
    CHECK(p.guidance == 0.0);

    t.cfg_truncation = 0.7, t.cfg_normalization = 1.0, t.guidance = 4.0;
    x.text_encoder_layers = {9, 18, -2};
    set_guidance(p, t, x);
    CHECK(p.cfg_truncation == 0.7);
    CHECK(p.cfg_normalization == 1.0);
    CHECK(p.guidance == 4.0);
    REQUIRE(p.text_encoder_layer_count == 3);
    CHECK(p.text_encoder_layers == x.text_encoder_layers.data());
    // diffusers' cfg_truncation 0: guidance where (1000 - t) / 1000 (an f32) is 0 only, as the smallest positive
    // double gives it; the C API's 0 would be the default 1.
    t.cfg_truncation = 0.0;
    set_guidance(p, t, x);
    CHECK(p.cfg_truncation > 0.0);
    CHECK(p.cfg_truncation < (double)std::numeric_limits<float>::denorm_min());
    CHECK(cfg_truncation_param(1.0) == 0.0);
    CHECK(cfg_truncation_param(1.5) == 1.5);
    CHECK(cfg_truncation_param(-0.25) == -0.25);
}

TEST_CASE("kiln generate Qwen3 flags: one line for another pipeline or a bad value, no PNG", "[apps][generate]") {
    test::TempDir tmp("kiln_qwen3_flags");
    const std::string zi = test::write_qwen3_pipeline(tmp / "z_image", false);
    const std::string kl = test::write_qwen3_pipeline(tmp / "klein", true);
    const std::string png = tmp / "out.png";
    const std::string sd3 = " --model " + test::data_path("fixtures/sd3_pipeline") + " --prompt a";
    const std::string flux = " --model " + test::data_path("fixtures/flux_pipeline") + " --prompt a";
    const std::string flux_transformer =
        test::data_path("fixtures/flux_pipeline/transformer/diffusion_pytorch_model.safetensors");
    for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
             {sd3 + " --text-encoder-layers 9,18,27",
              "--text-encoder-layers applies to Flux2KleinPipeline; this model's pipeline is "
              "StableDiffusion3Pipeline"},
             {" --model " + zi + " --prompt a --text-encoder-layers -2",
              "--text-encoder-layers applies to Flux2KleinPipeline; this model's pipeline is ZImagePipeline"},
             {flux + " --cfg-truncation 0.5",
              "--cfg-truncation applies to ZImagePipeline; this model's pipeline is "
              "FluxPipeline"},
             {flux + " --cfg-normalization", "--cfg-normalization applies to ZImagePipeline"},
             {" --model " + kl + " --prompt a --cfg-truncation 1",
              "--cfg-truncation applies to ZImagePipeline; "
              "this model's pipeline is Flux2KleinPipeline"},
             {" --cfg-truncation 0.5", "--cfg-truncation does not apply"},  // the built-in DiT
             {" --text-encoder-layers 9", "--text-encoder-layers does not apply"},
             {" --model " + kl + " --prompt a --text-encoder-layers 9,x",
              "--text-encoder-layers: 'x' is not an integer"},
             // The values reach check_prompts: each an entry of this 28-layer Qwen3's hidden_states (-29 .. 28).
             {" --model " + kl + " --prompt a --text-encoder-layers 9,29",
              "text_encoder_out_layers: 29 is not a hidden_states entry of this 28-layer Qwen3 (-29..28)"},
             {" --model " + kl + " --prompt a --text-encoder-layers=-30", "-30 is not a hidden_states entry"},
             {" --model " + zi + " --prompt a --cfg-truncation=nan", "--cfg-truncation is nan: not a finite number"},
             {" --model " + zi + " --prompt a --cfg-normalization=-0.5", "--cfg-normalization is -0.5: outside [0, "},
             {" --model " + kl + " --prompt-embeds " +
                  test::data_path("fixtures/qwen3_encoder_pipelines/io.safetensors") + " --text-encoder-layers 9",
              "--text-encoder-layers applies to --prompt"},
             // --llm reaches the assembly as the Qwen3 text encoder's file: named when missing, refused beside
             // a family without one.
             {" --diffusion-model " + flux_transformer + " --config " + test::data_path("fixtures/flux_pipeline") +
                  " --llm " + (tmp / "q.safetensors") + " --prompt a",
              "q.safetensors: no such file or folder (--text-encoder)"},
             {" --diffusion-model " + flux_transformer + " --config " + test::data_path("fixtures/flux_pipeline") +
                  " --text-encoder " + zi + "/text_encoder --prompt a",
              "Flux pipelines have no Qwen3 text encoder (--text-encoder)"}}) {
        const test::CliResult r = test::run_cli(tmp, "kiln", "generate" + args + " -o " + png);
        INFO(args << "\n" << r.err);
        CHECK(r.rc == 1);
        CHECK(r.err.find("kiln: error: ") == 0);
        CHECK(r.err.find(needle) != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(!fs::exists(png));
    }
}
