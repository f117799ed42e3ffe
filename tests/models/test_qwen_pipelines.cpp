// ZImagePipeline and Flux2KleinPipeline end to end against diffusers 0.38 (tests/data/fixtures/z_image_pipeline,
// flux2_klein_pipeline: two runs each, tensors prefixed run0_ / run1_): from the prompt (chat template, Qwen3,
// hidden-state selection) through every step (transformer, guidance, scheduler) to the image. Token ids exact;
// tensors within 1e-4 relative L2: f32 weights and activations, only the summation order differs from torch's f32
// CPU run (~1e-6 per forward of these 1-3 block models), carried through at most 4 steps (io.json's
// assembly_checks put diffusers' own float64 re-implementation within 6e-7 of it).
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
void check_close(const Tensor& t, const Tensor& ref, const std::string& name) {
    INFO(name << ": got " << shape_str(t.shape) << ", diffusers " << shape_str(ref.shape));
    REQUIRE(t.shape == ref.shape);
    // Token ids and masks exact; so is the schedule: the same float64 / float32 arithmetic as the scheduler's.
    if (ref.dtype == DType::i64 || name == "sigmas" || name == "timesteps") {
        CHECK(t.to_f32() == ref.to_f32());
        return;
    }
    const double err = rel_l2(t.to_f32(), ref.to_f32());
    INFO("relative L2 " << err);
    CHECK(err <= 1e-4);
}

// Rows [r0, r0 + n) of a tensor's leading axis.
Tensor rows(const Tensor& t, int64_t r0, int64_t n) {
    const Tensor f = t.astype(DType::f32);
    const size_t row = (size_t)f.numel() / (size_t)f.shape[0];
    Shape s = f.shape;
    s[0] = n;
    std::vector<float> v(f.data<float>() + r0 * row, f.data<float>() + (r0 + n) * row);
    return Tensor::from_f32(s, v);
}

struct Run {
    models::T2IOptions opt;
    models::PromptOptions po;
};

// Run r of the fixture as diffusers called it.
Run fixture_run(const nlohmann::json& j, const SafeTensors& io, int r) {
    const auto& c = j["runs"][(size_t)r];
    Run run;
    run.opt.steps = c["num_inference_steps"].get<int>();
    run.opt.guidance = c["guidance_scale"].get<double>();
    run.opt.height = c["height"].get<int>();
    run.opt.width = c["width"].get<int>();
    run.opt.latents_init = io.read("run" + std::to_string(r) + "_latents_init");
    run.opt.keep_intermediates = true;
    if (c.contains("cfg_truncation")) run.opt.cfg_truncation = c["cfg_truncation"].get<double>();
    if (c.contains("cfg_normalization"))  // float(True) = 1.0
        run.opt.cfg_normalization = c["cfg_normalization"].is_boolean() ? (c["cfg_normalization"].get<bool>() ? 1 : 0)
                                                                        : c["cfg_normalization"].get<double>();
    for (auto& p : c["prompt"]) run.po.prompts.push_back(p.get<std::string>());
    if (c.contains("negative") && c["negative"].is_string()) run.po.negatives = {c["negative"].get<std::string>()};
    if (c.contains("text_encoder_out_layers"))
        run.po.text_encoder_layers = c["text_encoder_out_layers"].get<std::vector<int>>();
    run.po.max_sequence_length = c["max_sequence_length"].get<int>();
    run.po.keep_intermediates = true;
    return run;
}
}  // namespace

TEST_CASE("Z-Image and FLUX.2 [klein] prompts encode as the pipelines do", "[models][qwen_pipelines][prompt]") {
    // The CPU reference: ids exact; embeddings within 1e-4 relative L2 (f32, summation order only).
    const std::string fixture = GENERATE("z_image_pipeline", "flux2_klein_pipeline");
    const int r = GENERATE(0, 1);
    INFO(fixture << " run " << r);
    auto src = models::ModelSource::open(test::data_path("fixtures/" + fixture));
    const auto io = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
    Run run = fixture_run(test::fixture_json(fixture), io, r);
    const std::string pre = "run" + std::to_string(r) + "_";
    run.po.cfg = io.find(pre + "text_encoder_negative_input_ids") != nullptr;
    auto enc = models::encode_prompts(nullptr, src, run.po);
    std::map<std::string, Tensor> got(enc.intermediates.begin(), enc.intermediates.end());
    for (auto& kv : enc.tensors) got.insert(kv);
    int compared = 0;
    for (const char* name : {"text_encoder_input_ids", "text_encoder_attention_mask", "text_encoder_negative_input_ids",
                             "text_encoder_negative_attention_mask", "text_encoder_hidden_states_m2",
                             "text_encoder_negative_hidden_states_m2", "prompt_embeds", "negative_prompt_embeds"}) {
        if (!io.find(pre + name)) continue;
        REQUIRE(got.count(name));
        check_close(got.at(name), io.read(pre + name), name);
        ++compared;
    }
    CHECK(compared >= 3);
}

TEST_CASE("Z-Image and FLUX.2 [klein] match diffusers from the prompt, step by step",
          "[models][qwen_pipelines][pipeline][vulkan]") {
    const std::string fixture = GENERATE("z_image_pipeline", "flux2_klein_pipeline");
    const int r = GENERATE(0, 1);
    INFO(fixture << " run " << r);
    auto src = models::ModelSource::open(test::data_path("fixtures/" + fixture));
    const auto io = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
    const auto j = test::fixture_json(fixture);
    Run run = fixture_run(j, io, r);
    const models::T2IPlan plan = models::plan_t2i(src, run.opt);
    CHECK(plan.pipeline == j["class"].get<std::string>());
    run.po.cfg = plan.cfg;
    std::vector<std::string> warnings;
    run.po.warn = [&](const std::string& m) { warnings.push_back(m); };
    auto enc = models::encode_prompts(&test::context(), src, run.po);
    run.opt.text = models::TextConditioning::from(enc.tensors);
    auto res = models::generate_t2i(test::context(), src, run.opt);
    std::map<std::string, Tensor> got(enc.intermediates.begin(), enc.intermediates.end());
    for (auto& kv : res.intermediates) got.insert(kv);
    for (auto& kv : enc.tensors) got.insert(kv);

    const std::string pre = "run" + std::to_string(r) + "_";
    const bool klein = fixture == "flux2_klein_pipeline";
    int compared = 0;
    for (const SafeTensorInfo& info : io.tensors()) {
        const std::string& key = info.name;
        if (key.rfind(pre, 0) != 0) continue;
        const std::string name = key.substr(pre.size());
        if (name == "latents_init" || name == "decoded" || name == "text_ids" || name == "img_ids") continue;
        if (name.find("_transformer_out_uncond") != std::string::npos) continue;  // with its step's cond below
        const Tensor ref = io.read(key);
        if (klein && name.find("_transformer_out") != std::string::npos && io.find(key + "_uncond")) {
            // Kiln runs klein's two calls as one batch [uncond, cond].
            REQUIRE(got.count(name));
            const int64_t B = ref.shape[0];
            check_close(rows(got.at(name), B, B), ref, name);
            check_close(rows(got.at(name), 0, B), io.read(key + "_uncond"), name + "_uncond");
            compared += 2;
            continue;
        }
        // The step's latents, and t / 1000 of the compared timesteps: klein's copies.
        if (klein && (name.find("_transformer_in") != std::string::npos ||
                      name.find("_transformer_timestep") != std::string::npos))
            continue;
        INFO(name);
        REQUIRE(got.count(name));
        check_close(got.at(name), ref, name);
        ++compared;
    }
    INFO("tensors compared: " << compared);
    CHECK(compared >= 5 + 3 * *run.opt.steps);  // ids, mask, embeddings, schedule, per step 3, the end
    CHECK(warnings.empty());
}

TEST_CASE("Z-Image skips the transformer call of its final dt = 0 step: the same image",
          "[models][qwen_pipelines][pipeline][vulkan]") {
    // diffusers' last step goes from sigma 0 to sigma 0 (sigma_min = 0): x + 0 * v is x bitwise, so the image without
    // that call must equal, bit for bit, the one of the run that makes it (kept intermediates make every call).
    auto src = models::ModelSource::open(test::data_path("fixtures/z_image_pipeline"));
    const auto io = SafeTensors::open(test::data_path("fixtures/z_image_pipeline/io.safetensors"));
    Run run = fixture_run(test::fixture_json("z_image_pipeline"), io, 1);
    run.po.cfg = models::plan_t2i(src, run.opt).cfg;
    run.opt.text = models::TextConditioning::from(models::encode_prompts(&test::context(), src, run.po).tensors);
    const auto all = models::generate_t2i(test::context(), src, run.opt);
    run.opt.keep_intermediates = false;
    const auto skipped = models::generate_t2i(test::context(), src, run.opt);
    CHECK(all.transformer_runs.size() == (size_t)*run.opt.steps);
    CHECK(skipped.transformer_runs.size() == (size_t)*run.opt.steps - 1);
    CHECK(skipped.step_ms.size() == (size_t)*run.opt.steps);
    REQUIRE(skipped.image.shape == all.image.shape);
    CHECK(std::memcmp(skipped.image.bytes.data(), all.image.bytes.data(), all.image.nbytes()) == 0);
}

namespace {
// A copy of a fixture pipeline folder in the tests' temp folder without `drop` (a component folder), with `swap`'s
// folder as `as` when given.
std::string variant(const std::string& fixture, const std::string& tag, const std::string& drop,
                    const std::string& swap = "", const std::string& as = "") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / "kiln_test_qwen_pipelines" / (fixture + "_" + tag);
    fs::remove_all(dir);
    fs::create_directories(dir.parent_path());
    fs::copy(test::data_path("fixtures/" + fixture), dir, fs::copy_options::recursive);
    if (!drop.empty()) fs::remove_all(dir / drop);
    if (!swap.empty()) {
        fs::remove_all(dir / as);
        fs::copy(test::data_path(swap), dir / as, fs::copy_options::recursive);
    }
    return dir.string();
}
}  // namespace

TEST_CASE("Z-Image and FLUX.2 [klein]: bad inputs get one clear line", "[models][qwen_pipelines][errors]") {
    models::PromptOptions po;
    po.prompts = {"a fox"};
    po.cfg = false;
    SECTION("no tokenizer") {
        auto src = models::ModelSource::open(variant("z_image_pipeline", "notok", "tokenizer"));
        CHECK_THROWS_WITH(models::encode_prompts(nullptr, src, po),
                          Catch::Contains("has no 'tokenizer'") && Catch::Contains("--prompt-embeds"));
    }
    SECTION("no text encoder") {
        auto src = models::ModelSource::open(variant("flux2_klein_pipeline", "noenc", "text_encoder"));
        CHECK_THROWS_WITH(models::encode_prompts(nullptr, src, po),
                          Catch::Contains("has no 'text_encoder'") && Catch::Contains("--llm"));
    }
    SECTION("a klein transformer with a FLUX.1-style AutoencoderKL of the same latent channels") {
        auto src = models::ModelSource::open(variant("flux2_klein_pipeline", "flux1vae", "", "fixtures/vae", "vae"));
        models::T2IOptions o;
        o.height = o.width = 32;
        CHECK_THROWS_WITH(models::plan_t2i(src, o), Catch::Contains("decodes with AutoencoderKLFlux2") &&
                                                        Catch::Contains("this vae is AutoencoderKL"));
    }
    SECTION("a prompt over max_sequence_length: truncated with a warning, as diffusers") {
        auto src = models::ModelSource::open(test::data_path("fixtures/flux2_klein_pipeline"));
        std::vector<std::string> warnings;
        po.warn = [&](const std::string& m) { warnings.push_back(m); };
        po.max_sequence_length = 16;
        po.prompts = {"a very long prompt about a small red fox floating above a misty forest in soft morning light"};
        auto enc = models::encode_prompts(nullptr, src, po);
        CHECK(enc.tensors.at("prompt_embeds").shape[1] == 16);
        REQUIRE(warnings.size() == 1);
        CHECK_THAT(warnings[0], Catch::Contains("truncated to 16"));
    }
    SECTION("options of the other pipeline") {
        auto src = models::ModelSource::open(test::data_path("fixtures/z_image_pipeline"));
        po.text_encoder_layers = {9};
        CHECK_THROWS_WITH(models::encode_prompts(nullptr, src, po), Catch::Contains("Flux2KleinPipeline"));
        auto klein = models::ModelSource::open(test::data_path("fixtures/flux2_klein_pipeline"));
        po.text_encoder_layers = {40};
        CHECK_THROWS_WITH(models::encode_prompts(nullptr, klein, po), Catch::Contains("40"));
        po.text_encoder_layers = {};
        po.negatives = {"blurry"};
        CHECK_THROWS_WITH(models::encode_prompts(nullptr, klein, po), Catch::Contains("negative_prompt"));
    }
}
