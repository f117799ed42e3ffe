// SanaPipeline and SanaSprintPipeline end to end against diffusers 0.38 (tests/data/fixtures/sana_pipeline,
// sana_sprint_pipeline; stripped to the compared tensors: ids and masks, prompt embeddings (Sana), every step's
// transformer output, noise prediction and latents, final_latents_scaled, image (Sana)). Token ids exact; tensors
// within 1e-4 relative L2 at f32: f32 weights and activations, only the summation order differs from torch's f32 CPU
// run (~1e-6 per forward of the 2-layer encoder / transformer and the DC-AE), carried through 4 (2) steps.
#include <catch2/catch.hpp>
#include <fstream>

#include "models/pipelines/sana_pipeline.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
std::vector<std::string> prompts_of(const nlohmann::json& j) {
    std::vector<std::string> v;
    for (auto& p : j["prompt"]) v.push_back(p.get<std::string>());
    return v;
}

void check_close(const std::map<std::string, Tensor>& got, const SafeTensors& io, const std::string& name) {
    INFO(name);
    REQUIRE(got.count(name));
    REQUIRE(io.find(name));
    const Tensor ref = io.read(name);
    const Tensor& t = got.at(name);
    REQUIRE(t.shape == ref.shape);
    if (ref.dtype == DType::i64) {  // token ids and masks: exact
        CHECK(t.to_f32() == ref.to_f32());
        return;
    }
    const double err = rel_l2(t.to_f32(), ref.to_f32());
    INFO("relative L2 " << err);
    CHECK(err <= 1e-4);
}

// The fixture's call as diffusers ran it: prompts, steps, guidance, size, latents_init (and Sprint's step noise).
struct SanaCall {
    models::T2IOptions opt;
    models::PromptOptions po;
};
SanaCall fixture_call(const std::string& fixture, const SafeTensors& io) {
    const auto j = test::fixture_json(fixture);
    const auto& c = j["call"];
    SanaCall f;
    f.opt.steps = c["num_inference_steps"].get<int>();
    f.opt.guidance = c["guidance_scale"].get<double>();
    f.opt.height = c["height"].get<int>();
    f.opt.width = c["width"].get<int>();
    f.opt.resolution_binning = false;  // as the fixtures call it
    f.opt.latents_init = io.read("latents_init");
    f.opt.keep_intermediates = true;
    for (int i = 0; i < 8; ++i)
        if (const std::string n = "scm_noise_step" + std::to_string(i); io.find(n)) f.opt.inputs.noise[n] = io.read(n);
    f.po.prompts = prompts_of(j);
    if (j["negative_prompt"].is_string()) f.po.negatives = {j["negative_prompt"].get<std::string>()};
    f.po.keep_intermediates = true;
    return f;
}
}  // namespace

TEST_CASE("Sana prompts tokenize as _get_gemma_prompt_embeds does", "[models][sana][prompt]") {
    const std::string fixture = GENERATE("sana_pipeline", "sana_sprint_pipeline");
    INFO(fixture);
    const auto io = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
    const auto j = test::fixture_json(fixture);
    auto tok = text::load_tokenizer(text::read_tokenizer_folder(test::data_path("fixtures/" + fixture + "/tokenizer")),
                                    fixture);
    std::vector<std::string> warnings;
    auto warn = [&](const std::string& m) { warnings.push_back(m); };
    const models::SanaTokens t =
        models::sana_tokenize(*tok, prompts_of(j), 300, models::sana_default_instruction(), warn);
    CHECK(t.n_chi == j["assembly_checks"]["n_chi_prompt_tokens"].get<int>());
    std::map<std::string, Tensor> got{{"text_encoder_input_ids", t.ids},
                                      {"text_encoder_attention_mask", t.mask},
                                      {"prompt_attention_mask", models::sana_select(t.mask, 300)}};
    for (const auto& [name, v] : got) check_close(got, io, name);
    CHECK(warnings.empty());
    if (io.find("text_encoder_negative_input_ids")) {  // Sana: the negative prompt without the instruction
        const models::SanaTokens n = models::sana_tokenize(*tok, {"", ""}, 300, "", warn);
        std::map<std::string, Tensor> neg{{"text_encoder_negative_input_ids", n.ids},
                                          {"text_encoder_negative_attention_mask", n.mask},
                                          {"negative_prompt_attention_mask", n.mask}};
        for (const auto& [name, v] : neg) check_close(neg, io, name);
    }
}

TEST_CASE("Sana prompts over max_sequence_length are truncated with a warning", "[models][sana][prompt]") {
    auto tok =
        text::load_tokenizer(text::read_tokenizer_folder(test::data_path("fixtures/sana_pipeline/tokenizer")), "sana");
    std::string longp;
    for (int i = 0; i < 40; ++i) longp += "red fox ";
    std::vector<std::string> warnings;
    const models::SanaTokens t = models::sana_tokenize(*tok, {longp}, 16, models::sana_default_instruction(),
                                                       [&](const std::string& m) { warnings.push_back(m); });
    CHECK(t.ids.shape == Shape{1, t.n_chi + 14});
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("truncated to max_sequence_length 16"));
    // every position a real token: the mask is all ones, the last id is not padding
    const Tensor sel = models::sana_select(t.mask, 16);
    for (int64_t i = 0; i < 16; ++i) CHECK(sel.data<int64_t>()[i] == 1);
    CHECK_THROWS_WITH(models::sana_tokenize(*tok, {"a"}, 1, "", {}), Catch::Contains("max_sequence_length 1"));
}

TEST_CASE("Sana pipelines match diffusers from the prompt, step by step", "[models][sana][pipeline][vulkan]") {
    const std::string fixture = GENERATE("sana_pipeline", "sana_sprint_pipeline");
    INFO(fixture);
    auto src = models::ModelSource::open(test::data_path("fixtures/" + fixture));
    const auto io = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
    auto call = fixture_call(fixture, io);
    const models::T2IPlan plan = models::plan_t2i(src, call.opt);
    call.po.cfg = plan.cfg;
    auto enc = models::encode_prompts(&test::context(), src, call.po);
    call.opt.text = models::TextConditioning::from(enc.tensors);
    auto r = models::generate_t2i(test::context(), src, call.opt);
    std::map<std::string, Tensor> got(enc.intermediates.begin(), enc.intermediates.end());
    for (auto& kv : r.intermediates) got.insert(kv);
    for (auto& kv : enc.tensors) got.insert(kv);
    std::vector<std::string> names = {"text_encoder_input_ids", "text_encoder_attention_mask", "prompt_attention_mask",
                                      "final_latents_scaled"};
    for (int i = 0; i < *call.opt.steps; ++i)
        for (const char* k : {"_transformer_out", "_noise_pred", "_latents"}) {
            if (fixture == "sana_sprint_pipeline" && std::string(k) == "_noise_pred") continue;  // folded: scm.cpp
            names.push_back("step" + std::to_string(i) + k);
        }
    if (io.find("prompt_embeds")) names.push_back("prompt_embeds");
    if (io.find("image")) names.push_back("image");
    for (const auto& n : names) check_close(got, io, n);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Sana folders: registry defaults and bad input", "[models][sana]") {
    auto sana = models::ModelSource::open(test::data_path("fixtures/sana_pipeline"));
    auto sprint = models::ModelSource::open(test::data_path("fixtures/sana_sprint_pipeline"));
    CHECK(models::t2i_pipeline_class(sana) == "SanaPipeline");
    CHECK(models::t2i_pipeline_class(sprint) == "SanaSprintPipeline");
    models::T2IOptions opt;
    opt.resolution_binning = false;
    const models::T2IPlan p = models::plan_t2i(sana, opt);
    CHECK(p.steps == 20);
    CHECK(p.guidance == 4.5);
    CHECK(p.cfg);
    CHECK(p.vae_scale_factor == 32);
    CHECK(p.latent_channels == 32);
    const models::T2IPlan q = models::plan_t2i(sprint, opt);
    CHECK(q.steps == 2);
    CHECK_FALSE(q.cfg);  // embedded guidance
    CHECK(models::default_max_sequence_length(sana) == 300);
    // sizes must be multiples of 32 (vae_scale_factor x patch 1)
    opt.height = 100;
    opt.width = 96;
    CHECK_THROWS_WITH(models::plan_t2i(sana, opt), Catch::Contains("multiples of 32"));
    // true CFG is Flux's
    models::T2IOptions t;
    t.true_cfg_scale = 2.0;
    CHECK_THROWS_WITH(models::plan_t2i(sprint, t), Catch::Contains("true_cfg_scale applies to"));
    // a step noise beyond the schedule
    auto io = SafeTensors::open(test::data_path("fixtures/sana_sprint_pipeline/io.safetensors"));
    std::vector<std::vector<float>> noise(2, std::vector<float>(384));
    std::map<std::string, Tensor> given{{"scm_noise_step2", io.read("scm_noise_step0")}};
    CHECK_THROWS_WITH(models::given_step_noise(noise, given, io.read("scm_noise_step0").shape),
                      Catch::Contains("scm_noise_step2 given, but this call draws 2"));
}
