// diffusers' negative_prompt as a list, prompt_2, prompt_3, negative_prompt_2 and negative_prompt_3: each text
// reaches the encoder diffusers gives it to. Checked bitwise against encoding those texts as the prompts of a
// batch of the same size: an encoder computes every row on its own, so the same token rows give the same bits.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/core/forward.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
std::map<std::string, Tensor> encode(const models::ModelSource& src, const models::PromptOptions& po) {
    models::PromptOptions o = po;
    o.keep_intermediates = true;
    o.warn = [](const std::string&) {};
    auto enc = models::encode_prompts(&test::context(), src, o);
    std::map<std::string, Tensor> all(enc.intermediates.begin(), enc.intermediates.end());
    for (auto& [n, t] : enc.tensors) all[n] = t;
    return all;
}

void same(const std::map<std::string, Tensor>& a, const std::string& an, const std::map<std::string, Tensor>& b,
          const std::string& bn) {
    INFO(an << " against " << bn);
    REQUIRE(a.count(an));
    REQUIRE(b.count(bn));
    CHECK(a.at(an).shape == b.at(bn).shape);
    CHECK(a.at(an).bytes == b.at(bn).bytes);
}

// Rows [b][from, to) of a [B, L, D] tensor (the sequence positions from..to of every batch row).
std::vector<uint8_t> positions(const Tensor& t, int64_t from, int64_t to) {
    REQUIRE(t.shape.size() == 3);
    const size_t row = (size_t)t.shape[2] * dtype_size(t.dtype);
    std::vector<uint8_t> out;
    for (int64_t b = 0; b < t.shape[0]; ++b) {
        const uint8_t* p = t.bytes.data() + ((size_t)b * t.shape[1] + from) * row;
        out.insert(out.end(), p, p + (size_t)(to - from) * row);
    }
    return out;
}
}  // namespace

TEST_CASE("SD3: negative prompts, prompt_2 and prompt_3 reach CLIP-L, CLIP-G and T5 as in diffusers",
          "[models][t2i][prompt][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    models::PromptOptions po;
    po.prompts = {"a cat", "a dog"};
    po.negatives = {"blurry", "dark"};
    po.prompts_2 = {"an owl"};                // one for every prompt
    po.prompts_3 = {"a red barn", "a lake"};  // one per prompt
    po.negatives_3 = {"low quality"};
    const auto a = encode(src, po);
    // The same texts as the prompts of batches of two.
    models::PromptOptions ref;
    ref.cfg = false;
    ref.prompts = {"a cat", "a dog"};
    const auto plain = encode(src, ref);
    ref.prompts = {"an owl", "an owl"};
    const auto owl = encode(src, ref);
    ref.prompts = {"a red barn", "a lake"};
    const auto t5 = encode(src, ref);
    ref.prompts = {"blurry", "dark"};
    const auto neg = encode(src, ref);
    ref.prompts = {"low quality", "low quality"};
    const auto neg_t5 = encode(src, ref);
    for (const char* out : {"input_ids", "penultimate_hidden_state", "text_embeds"}) {
        const std::string o = out;
        same(a, "text_encoder_" + o, plain, "text_encoder_" + o);         // CLIP-L: the prompts
        same(a, "text_encoder_2_" + o, owl, "text_encoder_2_" + o);       // CLIP-G: prompt_2
        same(a, "text_encoder_negative_" + o, neg, "text_encoder_" + o);  // the negatives, one per prompt
        // negative_prompt_2 not given: CLIP-G reads the negative prompts.
        same(a, "text_encoder_2_negative_" + o, neg, "text_encoder_2_" + o);
    }
    same(a, "text_encoder_3_input_ids", t5, "text_encoder_3_input_ids");  // T5: prompt_3
    same(a, "text_encoder_3_negative_input_ids", neg_t5, "text_encoder_3_input_ids");
    // The conditioning: pooled = cat(CLIP-L of the prompt, CLIP-G of prompt_2); prompt_embeds' T5 positions
    // (after CLIP's 77) are prompt_3's.
    const Tensor& pooled = a.at("pooled_prompt_embeds");
    const Tensor &l = plain.at("text_encoder_text_embeds"), &g = owl.at("text_encoder_2_text_embeds");
    REQUIRE(pooled.shape == Shape{2, l.shape[1] + g.shape[1]});
    for (int64_t b = 0; b < 2; ++b) {
        const size_t rl = (size_t)l.shape[1] * 4, rg = (size_t)g.shape[1] * 4;
        CHECK(std::memcmp(pooled.bytes.data() + b * (rl + rg), l.bytes.data() + b * rl, rl) == 0);
        CHECK(std::memcmp(pooled.bytes.data() + b * (rl + rg) + rl, g.bytes.data() + b * rg, rg) == 0);
    }
    const Tensor& pe = a.at("prompt_embeds");
    CHECK(positions(pe, 77, pe.shape[1]) == positions(t5.at("prompt_embeds"), 77, pe.shape[1]));
    const Tensor& npe = a.at("negative_prompt_embeds");
    CHECK(positions(npe, 77, npe.shape[1]) == positions(neg_t5.at("prompt_embeds"), 77, npe.shape[1]));
    CHECK(positions(pe, 0, 77) != positions(t5.at("prompt_embeds"), 0, 77));  // CLIP's part is not prompt_3's

    // One empty prompt_2 is diffusers' `prompt_2 or prompt`: the prompt.
    models::PromptOptions empty2;
    empty2.prompts = {"a cat", "a dog"};
    empty2.cfg = false;
    empty2.prompts_2 = {""};
    same(encode(src, empty2), "prompt_embeds", plain, "prompt_embeds");
    // One negative prompt for both prompts is the list with it twice.
    models::PromptOptions one = po, twice = po;
    one.negatives = {"blurry"};
    twice.negatives = {"blurry", "blurry"};
    same(encode(src, one), "negative_prompt_embeds", encode(src, twice), "negative_prompt_embeds");
}

TEST_CASE("Flux: prompt_2 is what T5 reads; PixArt: negative prompts one per prompt", "[models][t2i][prompt][vulkan]") {
    auto flux = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    models::PromptOptions po;
    po.cfg = false;
    po.prompts = {"a castle"};
    po.prompts_2 = {"a castle on a hill at sunset, oil painting"};
    const auto a = encode(flux, po);
    models::PromptOptions ref = po;
    ref.prompts_2.clear();
    const auto clip = encode(flux, ref);
    ref.prompts = {"a castle on a hill at sunset, oil painting"};
    const auto t5 = encode(flux, ref);
    same(a, "pooled_prompt_embeds", clip, "pooled_prompt_embeds");  // CLIP: the prompt
    same(a, "prompt_embeds", t5, "prompt_embeds");                  // T5: prompt_2
    same(a, "text_encoder_2_input_ids", t5, "text_encoder_2_input_ids");

    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    models::PromptOptions px;
    px.prompts = {"a red fox", "a blue bird"};
    px.negatives = {"Blurry ", "dark"};  // lower-cased and stripped as the prompts are
    const auto b = encode(pixart, px);
    models::PromptOptions pref;
    pref.cfg = false;
    pref.prompts = {"blurry", "dark"};
    const auto nb = encode(pixart, pref);
    same(b, "negative_prompt_embeds", nb, "prompt_embeds");
    same(b, "negative_prompt_attention_mask", nb, "prompt_attention_mask");
    CHECK(b.at("prompt_embeds").bytes != nb.at("prompt_embeds").bytes);
}

TEST_CASE("prompt lists that do not fit the prompts or the pipeline are named", "[models][t2i][prompt]") {
    auto sd3 = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    auto flux = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    models::PromptOptions po;
    po.prompts = {"a", "b"};
    po.negatives = {"x", "y", "z"};
    CHECK_THROWS_WITH(models::check_prompts(sd3, po), Catch::Contains("negative_prompt: 3 texts for 2 prompts"));
    po.negatives = {"x", "y"};
    po.negatives_2 = {"x", "\xc3"};
    CHECK_THROWS_WITH(models::check_prompts(sd3, po),
                      Catch::Contains("negative_prompt_2[1]") && Catch::Contains("UTF-8"));
    po.negatives_2.clear();
    CHECK_NOTHROW(models::check_prompts(sd3, po));
    po.prompts_3 = {"long"};
    CHECK_NOTHROW(models::check_prompts(sd3, po));
    CHECK_THROWS_WITH(models::check_prompts(pixart, po), Catch::Contains("one text encoder (T5)"));
    CHECK_THROWS_WITH(models::check_prompts(flux, po), Catch::Contains("prompt_3 and negative_prompt_3 do not apply"));
    po.prompts_3 = {""};  // None
    CHECK_NOTHROW(models::check_prompts(pixart, po));
    po.prompts_2 = {"t5 text"};
    CHECK_NOTHROW(models::check_prompts(flux, po));
    CHECK_THROWS_WITH(models::encode_prompts(nullptr, pixart, po), Catch::Contains("prompt_2"));
}

TEST_CASE("Flux true CFG: negative + s * (prompt - negative) of diffusers' two transformer calls",
          "[models][pipeline][t2i][prompt][vulkan]") {
    // diffusers' FluxPipeline with true_cfg_scale > 1 and a negative prompt calls the transformer twice per step
    // (prompt, then negative, both with the embedded guidance) and combines them. Kiln runs the two as rows of one
    // batch. The reference here is those two calls on the CPU reference executor, batch 1 each: f32 throughout,
    // so only summation order differs (1e-4 relative L2, as the pipeline fixtures).
    const std::string dir = test::data_path("fixtures/flux_pipeline");
    auto src = models::ModelSource::open(dir);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    models::T2IOptions opt;
    opt.steps = 2;
    opt.height = opt.width = 32;
    opt.latents_init = io.read("latents_init");
    opt.keep_intermediates = true;
    opt.true_cfg_scale = 4.0;
    const auto plan = models::plan_t2i(src, opt);
    REQUIRE(plan.cfg);
    CHECK(plan.cfg_scale == 4.0);
    CHECK(plan.guidance == 3.5);  // the embedded guidance stays the pipeline's
    models::PromptOptions po;
    po.prompts = {"a castle on a hill at sunset"};
    po.negatives = {"blurry, dark"};
    po.cfg = plan.cfg;
    const auto enc = encode(src, po);
    REQUIRE(enc.count("negative_prompt_embeds"));
    REQUIRE(enc.count("negative_pooled_prompt_embeds"));
    opt.text = models::TextConditioning::from(enc);
    auto run = [&](bool host_loop) {
        opt.host_loop = host_loop;
        auto r = models::generate_t2i(test::context(), src, opt);
        return std::map<std::string, Tensor>(r.intermediates.begin(), r.intermediates.end());
    };
    const auto got = run(false);
    // Step 0's transformer inputs: the packed initial latents (channel c*4 + dy*2 + dx), t / 1000, the ids.
    const Tensor& lat = *opt.latents_init;
    const int64_t C = lat.shape[1], h = lat.shape[2], w = lat.shape[3], S = (h / 2) * (w / 2);
    Tensor packed(DType::f32, {1, S, 4 * C}), img_ids(DType::f32, {S, 3});
    for (int64_t i = 0; i < h / 2; ++i)
        for (int64_t j = 0; j < w / 2; ++j) {
            const int64_t s = i * (w / 2) + j;
            img_ids.data<float>()[s * 3 + 1] = (float)i, img_ids.data<float>()[s * 3 + 2] = (float)j;
            for (int64_t c = 0; c < C; ++c)
                for (int dy = 0; dy < 2; ++dy)
                    for (int dx = 0; dx < 2; ++dx)
                        packed.data<float>()[s * 4 * C + c * 4 + dy * 2 + dx] =
                            lat.data<float>()[(c * h + 2 * i + dy) * w + 2 * j + dx];
        }
    const float t0 = got.at("timesteps").data<float>()[0] / 1000.f;
    auto call = [&](const std::string& pre) {
        std::map<std::string, Tensor> in{{"hidden_states", packed},
                                         {"encoder_hidden_states", enc.at(pre + "prompt_embeds")},
                                         {"pooled_projections", enc.at(pre + "pooled_prompt_embeds")},
                                         {"timestep", Tensor::from_f32({1}, {t0})},
                                         {"guidance", Tensor::from_f32({1}, {3.5f})},
                                         {"img_ids", img_ids},
                                         {"txt_ids", got.at("text_ids")}};
        return models::forward_component(nullptr, src, "transformer", in).at("sample").to_f32();
    };
    const auto pos = call(""), neg = call("negative_");
    std::vector<float> want(pos.size());
    for (size_t k = 0; k < pos.size(); ++k) want[k] = neg[k] + 4.f * (pos[k] - neg[k]);
    const auto noise = got.at("step0_noise_pred").to_f32();
    REQUIRE(noise.size() == want.size());
    const double err = rel_l2(noise, want);
    INFO("relative L2 against the two CPU-reference calls: " << err);
    CHECK(err <= 1e-4);
    CHECK(rel_l2(pos, want) > 1e-2);  // the negative really moves the prediction
    // The host loop (guidance on the CPU) gives the device loop's bits.
    const auto host = run(true);
    CHECK(host.at("image").bytes == got.at("image").bytes);
    CHECK(host.at("step1_latents").bytes == got.at("step1_latents").bytes);
}

TEST_CASE("SD3 without T5: prompt_3 is ignored with a warning, T5's part is zeros", "[models][t2i][prompt][vulkan]") {
    // A pipeline saved without its third encoder (model_index: text_encoder_3 and tokenizer_3 null), as SD3 can be.
    test::TempDir tmp("kiln_no_t5");
    const std::string dir = tmp / "sd3";
    std::filesystem::copy(test::data_path("fixtures/sd3_pipeline"), dir, std::filesystem::copy_options::recursive);
    std::filesystem::remove_all(dir + "/text_encoder_3");
    std::filesystem::remove_all(dir + "/tokenizer_3");
    nlohmann::json mi;
    std::ifstream(dir + "/model_index.json") >> mi;
    mi["text_encoder_3"] = mi["tokenizer_3"] = nlohmann::json::array({nullptr, nullptr});
    std::ofstream(dir + "/model_index.json") << mi.dump();
    auto src = models::ModelSource::open(dir);
    models::PromptOptions po;
    po.prompts = {"a cat"};
    po.cfg = false;
    std::vector<std::string> warnings;
    po.warn = [&](const std::string& w) { warnings.push_back(w); };
    const auto plain = models::encode_prompts(&test::context(), src, po);
    CHECK(warnings.empty());
    po.prompts_3 = {"a long description"};
    const auto with3 = models::encode_prompts(&test::context(), src, po);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("no text_encoder_3 (T5): prompt_3 and negative_prompt_3 are ignored") != std::string::npos);
    const Tensor& pe = with3.tensors.at("prompt_embeds");
    CHECK(pe.bytes == plain.tensors.at("prompt_embeds").bytes);
    const auto t5_part = positions(pe, 77, pe.shape[1]);
    CHECK(std::all_of(t5_part.begin(), t5_part.end(), [](uint8_t v) { return v == 0; }));
}

TEST_CASE("SD3 clip_skip: the prompts' CLIP embeddings from hidden_states[-(k + 2)], the negatives' unchanged",
          "[models][t2i][prompt][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    models::PromptOptions po;
    po.prompts = {"a cat", "a dog"};
    po.negatives = {"blurry"};
    const auto plain = encode(src, po);
    po.clip_skip = 1;
    const auto skip = encode(src, po);
    // prompt_embeds = [CLIP-L state | CLIP-G state, zero-padded to T5's width] over 77 positions, then T5.
    const Tensor& pe = skip.at("prompt_embeds");
    const Tensor& l = skip.at("text_encoder_clip_skip_hidden_state");
    const Tensor& g = skip.at("text_encoder_2_clip_skip_hidden_state");
    REQUIRE((l.shape[1] == 77 && g.shape[1] == 77));
    const int64_t dl = l.shape[2], dg = g.shape[2], D = pe.shape[2];
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t s = 0; s < 77; ++s) {
            const float* row = pe.data<float>() + (b * pe.shape[1] + s) * D;
            REQUIRE(std::memcmp(row, l.data<float>() + (b * 77 + s) * dl, (size_t)dl * 4) == 0);
            REQUIRE(std::memcmp(row + dl, g.data<float>() + (b * 77 + s) * dg, (size_t)dg * 4) == 0);
        }
    CHECK(positions(pe, 0, 77) != positions(plain.at("prompt_embeds"), 0, 77));  // another layer's state
    CHECK(positions(pe, 77, pe.shape[1]) == positions(plain.at("prompt_embeds"), 77, pe.shape[1]));  // T5's part
    // diffusers encodes the negative prompts with clip_skip None, and the pooled embeddings are the last layer's.
    same(skip, "negative_prompt_embeds", plain, "negative_prompt_embeds");
    same(skip, "pooled_prompt_embeds", plain, "pooled_prompt_embeds");
    same(skip, "negative_pooled_prompt_embeds", plain, "negative_pooled_prompt_embeds");
    // Only SD3's __call__ takes clip_skip.
    auto flux = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    CHECK_THROWS_WITH(models::check_prompts(flux, po),
                      Catch::Contains("clip_skip applies to StableDiffusion3Pipeline"));
}

TEST_CASE("SD3 skip-layer guidance: diffusers' extra call on the prompt rows at the steps in its window",
          "[models][pipeline][t2i][vulkan]") {
    // diffusers' StableDiffusion3Pipeline with skip_guidance_layers: after CFG, at the steps i with
    // start * N < i < stop * N, transformer(latents, t, original_prompt_embeds, skip_layers) and
    // noise_pred += (noise_pred_text - noise_pred_skip) * scale. The reference call is the CPU reference executor on
    // the latents Kiln stepped to (f32 both sides: summation order only, 1e-4 relative L2 as the fixtures).
    const std::string dir = test::data_path("fixtures/sd3_pipeline");
    auto src = models::ModelSource::open(dir);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    models::T2IOptions opt;
    opt.steps = 3;
    opt.height = opt.width = 32;
    opt.latents_init = io.read("latents_init");
    opt.keep_intermediates = true;
    models::PromptOptions po;
    po.prompts = {"a cat", "a dog"};
    po.negatives = {"blurry"};
    const auto enc = encode(src, po);
    opt.text = models::TextConditioning::from(enc);
    auto lat = io.read("latents_init");
    Tensor two(DType::f32, {2, lat.shape[1], lat.shape[2], lat.shape[3]});
    std::memcpy(two.bytes.data(), lat.bytes.data(), lat.nbytes());
    std::memcpy(two.bytes.data() + lat.nbytes(), lat.bytes.data(), lat.nbytes());
    opt.latents_init = two;
    auto run = [&] {
        auto r = models::generate_t2i(test::context(), src, opt);
        return std::map<std::string, Tensor>(r.intermediates.begin(), r.intermediates.end());
    };
    const auto plain = run();
    opt.skip_guidance_layers = {0};
    opt.skip_layer_guidance_start = 0.0;
    opt.skip_layer_guidance_stop = 0.7;  // 3 steps: 0 < i < 2.1 -> step 1 and step 2
    CHECK(models::plan_t2i(src, opt).slg_steps == std::vector<int>{1, 2});
    opt.skip_layer_guidance_stop = 0.5;  // 0 < i < 1.5 -> step 1 only
    REQUIRE(models::plan_t2i(src, opt).slg_steps == std::vector<int>{1});
    const auto got = run();
    CHECK(!got.count("step0_skip_layers_out"));
    CHECK(!got.count("step2_skip_layers_out"));
    CHECK(got.at("step0_noise_pred").bytes == plain.at("step0_noise_pred").bytes);  // before the window: unchanged
    REQUIRE(got.count("step1_skip_layers_out"));
    // The skip call: the latents after step 0, t1, the prompts' embeddings (not the negatives'), block 0 left out.
    const float t1 = got.at("timesteps").data<float>()[1];
    models::ComponentOptions co;
    co.skip_layers = {0};
    const auto want_skip = models::forward_component(nullptr, src, "transformer",
                                                     {{"hidden_states", got.at("step0_latents")},
                                                      {"timestep", Tensor::from_f32({2}, {t1, t1})},
                                                      {"encoder_hidden_states", enc.at("prompt_embeds")},
                                                      {"pooled_projections", enc.at("pooled_prompt_embeds")}},
                                                     exec::Mode::regional, co)
                               .at("sample");
    const auto skip = got.at("step1_skip_layers_out");
    const double err = rel_l2(skip.to_f32(), want_skip.to_f32());
    INFO("skip call against the CPU reference: relative L2 " << err);
    CHECK(err <= 1e-4);
    // noise_pred = uncond + 7 * (text - uncond) + (text - skip) * 2.8, from the rows of the same step.
    const auto out = got.at("step1_transformer_out").to_f32(), s = skip.to_f32();
    const auto noise = got.at("step1_noise_pred").to_f32();
    const size_t row = s.size() / 2;
    std::vector<float> want(noise.size());
    for (size_t b = 0; b < 2; ++b)
        for (size_t k = 0; k < row; ++k) {
            const float unc = out[b * row + k], txt = out[(b + 2) * row + k];
            const float v = unc + 7.0f * (txt - unc);
            want[b * row + k] = v + (txt - s[b * row + k]) * 2.8f;
        }
    CHECK(rel_l2(noise, want) <= 1e-6);
    CHECK(rel_l2(noise, plain.at("step1_noise_pred").to_f32()) > 1e-3);  // the guidance moved the prediction
    // Without classifier-free guidance there is none, as in diffusers (a warning in the plan).
    opt.guidance = 1.0;
    const auto p1 = models::plan_t2i(src, opt);
    CHECK(p1.slg_steps.empty());
    CHECK(!p1.warnings.empty());
    opt.guidance.reset();
    opt.skip_guidance_layers = {2};
    CHECK_THROWS_WITH(models::plan_t2i(src, opt), Catch::Contains("skip_guidance_layers: 2 is not a block"));
    auto flux = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    opt.skip_guidance_layers = {0};
    CHECK_THROWS_WITH(models::plan_t2i(flux, opt), Catch::Contains("applies to StableDiffusion3Pipeline"));
}
