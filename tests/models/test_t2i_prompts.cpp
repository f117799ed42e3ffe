// Text-to-image from the prompt: tokenizers + text encoders (encode_prompts) + pipeline against diffusers'
// pipeline fixtures. Token ids must be exact; prompt embeddings and every step's latents within 1e-4 relative L2
// at f32 (f32 weights and activations; only summation order differs from PyTorch's f32 CPU run, ~1e-6 per
// encoder or transformer forward, carried through the steps).
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
// diffusers' negative_prompt as the fixture gives it: a string, a list (one per prompt) or null.
std::vector<std::string> negative_prompts(const nlohmann::json& j) {
    const auto& n = j["negative_prompt"];
    if (n.is_string()) return {n.get<std::string>()};
    if (n.is_array()) return n.get<std::vector<std::string>>();
    return {};
}

// The fixture's call (steps, guidance, size, latents_init) and its prompts, as diffusers ran it.
struct FixtureCall {
    models::T2IOptions opt;
    models::PromptOptions po;
};
FixtureCall fixture_call(const std::string& fixture, const SafeTensors& io) {
    auto j = test::fixture_json(fixture);
    const auto& s = j["call"]["scalars"];
    FixtureCall f;
    f.opt.steps = s["num_inference_steps"].get<int>();
    f.opt.guidance = s["guidance_scale"].get<double>();
    f.opt.height = s["height"].get<int>();
    f.opt.width = s["width"].get<int>();
    f.opt.resolution_binning = false;  // sample_size 16: diffusers has no bin table for it
    f.opt.latents_init = io.read("latents_init");
    f.opt.keep_intermediates = true;
    for (auto& p : j["prompt"]) f.po.prompts.push_back(p.get<std::string>());
    f.po.negatives = negative_prompts(j);
    return f;
}

void check_close(const std::map<std::string, Tensor>& got, const SafeTensors& io, const std::string& name,
                 const std::string& what) {
    INFO(what << " " << name);
    REQUIRE(got.count(name));
    REQUIRE(io.find(name));
    const Tensor ref = io.read(name);
    const Tensor& t = got.at(name);
    REQUIRE(t.shape == ref.shape);
    if (ref.dtype == DType::i64) {  // token ids and masks: exact
        CHECK(t.to_f32() == ref.to_f32());
        return;
    }
    double err = rel_l2(t.to_f32(), ref.to_f32());
    INFO("relative L2 " << err);
    CHECK(err <= 1e-4);
}
}  // namespace

TEST_CASE("prompts encode as diffusers' encode_prompt does", "[models][t2i][prompt][vulkan]") {
    auto [fixture, cpu] = GENERATE(table<const char*, bool>(
        {{"pixart_pipeline", false}, {"sd3_pipeline", false}, {"flux_pipeline", false}, {"sd3_pipeline", true}}));
    auto src = models::ModelSource::open(test::data_path(std::string("fixtures/") + fixture));
    auto io = SafeTensors::open(test::data_path(std::string("fixtures/") + fixture + "/io.safetensors"));
    auto j = test::fixture_json(fixture);
    models::PromptOptions po;
    for (auto& p : j["prompt"]) po.prompts.push_back(p.get<std::string>());
    po.negatives = negative_prompts(j);
    po.cfg = std::string(fixture) != "flux_pipeline";
    po.keep_intermediates = true;
    auto enc = models::encode_prompts(cpu ? nullptr : &test::context(), src, po);
    std::map<std::string, Tensor> got(enc.intermediates.begin(), enc.intermediates.end());
    for (auto& [n, t] : enc.tensors) got[n] = t;
    std::vector<std::string> names;
    for (auto& [n, t] : got) names.push_back(n);
    CHECK(names.size() >= 4);
    for (auto& n : names) check_close(got, io, n, std::string(fixture) + (cpu ? " cpu" : " vulkan"));
}

TEST_CASE("text-to-image from a prompt matches diffusers step by step", "[models][pipeline][t2i][prompt][vulkan]") {
    auto fixture = GENERATE(as<std::string>{}, "pixart_pipeline", "sd3_pipeline", "flux_pipeline");
    auto src = models::ModelSource::open(test::data_path("fixtures/" + fixture));
    auto io = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
    auto [opt, po] = fixture_call(fixture, io);
    const auto plan = models::plan_t2i(src, opt);
    po.cfg = plan.cfg;
    auto enc = models::encode_prompts(&test::context(), src, po);
    opt.text = models::TextConditioning::from(enc.tensors);
    auto r = models::generate_t2i(test::context(), src, opt);
    std::map<std::string, Tensor> got(r.intermediates.begin(), r.intermediates.end());
    for (int i = 0; i < *opt.steps; ++i) check_close(got, io, "step" + std::to_string(i) + "_latents", fixture);
    check_close(got, io, "image", fixture);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("prompt errors are clear", "[models][t2i][prompt]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    models::PromptOptions po;
    po.prompts = {"a \xff cat"};
    CHECK_THROWS_WITH(models::encode_prompts(nullptr, src, po), Catch::Contains("invalid UTF-8"));
    po.prompts = {};
    CHECK_THROWS_WITH(models::encode_prompts(nullptr, src, po), Catch::Contains("no prompt"));
    auto dit = models::ModelSource::open(test::data_path("fixtures/dit_pipeline_ddim"));
    po.prompts = {"a cat"};
    CHECK_THROWS(models::encode_prompts(nullptr, dit, po));
    // An over-long prompt is truncated with a warning, as diffusers does.
    std::string longp;
    for (int i = 0; i < 100; ++i) longp += "cat ";
    po.prompts = {longp};
    std::vector<std::string> warnings;
    po.warn = [&](const std::string& w) { warnings.push_back(w); };
    auto enc = models::encode_prompts(nullptr, src, po);
    CHECK(warnings.size() >= 2);  // both CLIP tokenizers (77) at least
    CHECK(enc.tensors.at("prompt_embeds").shape == Shape{1, 333, 64});
}

TEST_CASE("PixArt's prompt preprocessing is Python's lower().strip()", "[models][t2i][prompt]") {
    CHECK(models::python_lower_strip("  A Red FOX\t\n") == "a red fox");
    CHECK(models::python_lower_strip("\xc3\x89T\xc3\x89 \xce\xa9\xce\x9c") ==
          "\xc3\xa9t\xc3\xa9 \xcf\x89\xce\xbc");                            // ÉTÉ ΩΜ
    CHECK(models::python_lower_strip("\xe3\x80\x80x\xe3\x80\x80") == "x");  // ideographic spaces stripped
    CHECK(models::python_lower_strip("") == "");
}

TEST_CASE("batched prompts: each row is what that prompt alone gives", "[models][pipeline][t2i][prompt][vulkan]") {
    // Two prompts, the fixture's first: row 0 of every step must match the fixture's single-prompt run (the CFG
    // batch is cat([negatives, prompts]) and every row is computed independently), the second prompt (Unicode and
    // over-long for CLIP's 77 tokens) must not leak into it.
    auto fixture = GENERATE(as<std::string>{}, "pixart_pipeline", "sd3_pipeline", "flux_pipeline");
    auto src = models::ModelSource::open(test::data_path("fixtures/" + fixture));
    auto io = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
    auto [opt, po] = fixture_call(fixture, io);
    const Tensor l1 = io.read("latents_init");
    Tensor l2(DType::f32, {2, l1.shape[1], l1.shape[2], l1.shape[3]});
    for (int r = 0; r < 2; ++r) std::memcpy(l2.bytes.data() + r * l1.nbytes(), l1.bytes.data(), l1.nbytes());
    opt.latents_init = l2;
    po.prompts.resize(1);
    po.prompts.push_back("");
    for (int i = 0; i < 40; ++i) po.prompts[1] += "caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac ";
    po.cfg = models::plan_t2i(src, opt).cfg;
    po.warn = [](const std::string&) {};
    auto enc = models::encode_prompts(&test::context(), src, po);
    opt.text = models::TextConditioning::from(enc.tensors);
    auto r = models::generate_t2i(test::context(), src, opt);
    REQUIRE(r.image.shape[0] == 2);
    std::map<std::string, Tensor> got(r.intermediates.begin(), r.intermediates.end());
    for (int i = 0; i < *opt.steps; ++i) {
        const std::string name = "step" + std::to_string(i) + "_latents";
        const Tensor ref = io.read(name);
        REQUIRE(got.count(name));
        REQUIRE(got[name].shape[0] == 2);
        auto all = got[name].to_f32();
        std::vector<float> row0(all.begin(), all.begin() + ref.numel()), row1(all.begin() + ref.numel(), all.end());
        double err = rel_l2(row0, ref.to_f32());
        INFO(fixture << " " << name << " row 0 relative L2 " << err);
        CHECK(err <= 1e-4);
        CHECK(rel_l2(row1, ref.to_f32()) > 1e-3);  // the other prompt really conditions its row
    }
}

TEST_CASE("resident encoders (--keep-encoders) give the same embeddings without re-planning",
          "[models][t2i][prompt][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    models::PromptOptions po;
    po.prompts = {"a photo of a cat on a chair"};
    const auto fresh = models::encode_prompts(&test::context(), src, po);
    CHECK(fresh.reused_encoders == 0);
    models::EncoderCache cache;
    po.keep = &cache;
    auto first = models::encode_prompts(&test::context(), src, po);
    CHECK(cache.size() == 3);  // CLIP-L, CLIP-G, T5 stay uploaded
    CHECK(cache.device_bytes() > 0);
    CHECK(first.reused_encoders == 0);
    po.prompts = {"a dog"};
    auto other = models::encode_prompts(&test::context(), src, po);
    po.prompts = {"a photo of a cat on a chair"};
    auto again = models::encode_prompts(&test::context(), src, po);
    CHECK(again.reused_encoders == 3);
    for (auto& [name, t] : fresh.tensors) {
        INFO(name);
        CHECK(again.tensors.at(name).bytes == t.bytes);  // bitwise: same recording, same inputs
        CHECK(first.tensors.at(name).bytes == t.bytes);
    }
    CHECK(other.tensors.at("prompt_embeds").bytes != fresh.tensors.at("prompt_embeds").bytes);
    cache.clear();
    CHECK(cache.size() == 0);
}
