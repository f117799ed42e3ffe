// `kiln generate` on the Sana fixtures, run as the binary: SanaPipeline and SanaSprintPipeline end to end from the
// prompt (--latents, Sprint's --noise with scm_noise_step{i}, --dump with diffusers' names), and the bad inputs
// that must stop with one clear line: a missing component, an unsupported config option; --complex-human-instruction.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "converter/convert.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
using Result = test::CliResult;

// `kiln generate ARGS`, stderr captured.
Result generate(const test::TempDir& tmp, const std::string& args) {
    return test::run_cli(tmp, "kiln", "generate " + args);
}

std::string fixture(const std::string& name) { return test::data_path("fixtures/" + name); }

nlohmann::json io_json(const std::string& name) {
    std::ifstream f(fixture(name) + "/io.json");
    return nlohmann::json::parse(f);
}

// A copy of a fixture folder with `drop` left out and `edit` applied to the transformer config.
std::string copy_fixture(const test::TempDir& tmp, const std::string& name, const std::string& drop,
                         const std::function<void(nlohmann::json&)>& edit = {}) {
    const fs::path dst = fs::path(tmp / "model");
    fs::copy(fixture(name), dst, fs::copy_options::recursive);
    if (!drop.empty()) fs::remove_all(dst / drop);
    if (edit) {
        const fs::path cfg = dst / "transformer" / "config.json";
        nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
        edit(j);
        fs::permissions(cfg, fs::perms::owner_write, fs::perm_options::add);
        std::ofstream(cfg) << j.dump(2);
    }
    return dst.string();
}
}  // namespace

TEST_CASE("kiln generate reproduces diffusers' Sana pipelines through the CLI", "[apps][generate][sana][vulkan]") {
    const std::string name = GENERATE(as<std::string>{}, "sana_pipeline", "sana_sprint_pipeline");
    const bool sprint = name == "sana_sprint_pipeline";
    test::TempDir tmp("kiln_sana");
    const auto j = io_json(name);
    const auto& c = j["call"];
    const std::string io_path = fixture(name) + "/io.safetensors";
    std::string args = "--model " + fixture(name) + " --latents " + io_path + " --no-resolution-binning";
    if (sprint) args += " --noise " + io_path;  // scm_noise_step0, scm_noise_step1
    for (auto& p : j["prompt"]) args += " --prompt '" + p.get<std::string>() + "'";
    args += " --steps " + std::to_string(c["num_inference_steps"].get<int>()) + " --guidance " +
            std::to_string(c["guidance_scale"].get<double>()) + " --width " + std::to_string(c["width"].get<int>()) +
            " --height " + std::to_string(c["height"].get<int>()) + " --dump " + (tmp / "dump.safetensors") + " -o " +
            (tmp / "out.png");
    Result r = generate(tmp, args);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(fs::exists(tmp / "out-0.png"));  // two prompts: out-0.png, out-1.png
    auto dump = SafeTensors::open(tmp / "dump.safetensors");
    auto io = SafeTensors::open(io_path);
    int compared = 0;
    for (auto& t : io.tensors()) {
        // Sprint's step{i}_noise_pred is diffusers' trigflow velocity; Kiln's SCM step takes the raw transformer
        // output (models/schedulers/scm.cpp), so the dump's noise_pred is that output: not compared.
        if (!dump.find(t.name) || t.name == "latents_init") continue;
        // diffusers' timesteps there also hold the final angle 0 (the loop's are the first two): checked exactly in
        // tests/schedulers/test_sana_schedulers.cpp.
        if (sprint && (t.name.find("_noise_pred") != std::string::npos || t.name == "timesteps")) continue;
        Tensor got = dump.read(t.name), ref = io.read(t.name);
        INFO(name << " " << t.name);
        REQUIRE(got.shape == ref.shape);
        if (ref.dtype == DType::i64)
            CHECK(got.to_f32() == ref.to_f32());
        else  // f32 throughout: summation order only (~1e-6 per forward), through 4 (2) steps and the DC-AE
            CHECK(rel_l2(got.to_f32(), ref.to_f32()) <= 1e-4);
        ++compared;
    }
    for (const char* must : {"text_encoder_input_ids", "prompt_attention_mask", "step0_latents", "step1_latents",
                             "final_latents_scaled"}) {
        INFO(name << " dump lacks " << must);
        CHECK(dump.find(must));
    }
    // Sprint: ids, two masks, 2 x (transformer_out, latents), final_latents_scaled
    CHECK(compared >= (sprint ? 8 : 10));
}

TEST_CASE("kiln generate on bad Sana folders stops with one clear line", "[apps][generate][sana]") {
    {
        test::TempDir tmp("kiln_sana_bad");
        const std::string m = copy_fixture(tmp, "sana_pipeline", "vae");
        Result r = generate(tmp, "--model " + m + " --prompt fox -o " + (tmp / "x.png"));
        CHECK(r.rc != 0);
        CHECK_THAT(r.err, Catch::Contains("vae"));
        CHECK_FALSE(fs::exists(tmp / "x.png"));
    }
    {
        test::TempDir tmp("kiln_sana_bad");
        const std::string m = copy_fixture(tmp, "sana_pipeline", "text_encoder");
        Result r = generate(tmp, "--model " + m + " --prompt fox -o " + (tmp / "x.png"));
        CHECK(r.rc != 0);
        CHECK_THAT(r.err, Catch::Contains("text_encoder"));
    }
    {
        test::TempDir tmp("kiln_sana_bad");
        const std::string m =
            copy_fixture(tmp, "sana_pipeline", "", [](nlohmann::json& j) { j["qk_norm"] = "layer_norm"; });
        Result r = generate(tmp, "--model " + m + " --prompt fox -o " + (tmp / "x.png"));
        CHECK(r.rc != 0);
        CHECK_THAT(r.err, Catch::Contains("qk_norm"));
    }
}

TEST_CASE("kiln-convert of a Sana folder, then kiln generate from the .kiln", "[apps][generate][sana][vulkan]") {
    test::TempDir tmp("kiln_sana_kiln");
    const std::string name = "sana_pipeline";
    const std::string io_path = fixture(name) + "/io.safetensors";
    const auto j = io_json(name);
    std::string args =
        " --latents " + io_path + " --no-resolution-binning --steps 4 --guidance 4.5 --width 128 " + "--height 128";
    for (auto& p : j["prompt"]) args += " --prompt '" + p.get<std::string>() + "'";
    const auto io = SafeTensors::open(io_path);
    // f32: the folder's weights as they are, so the run is the folder's (summation order only: 1e-4 as above).
    // q8_0: the linear weights and the 1x1 convs read as linears quantized (the other convs, embeddings and norms
    // stay f16 / f32): it runs end to end.
    for (DType dt : {DType::f32, DType::q8_0}) {
        INFO(dtype_name(dt));
        converter::Options o;
        o.quiet = true;
        o.dtype = dt;
        const std::string file = tmp / (std::string("sana_") + dtype_name(dt) + ".kiln");
        const converter::Summary s = converter::convert_folder(fixture(name), file, o);
        CHECK(s.stored.count(dt));
        const std::string dump = tmp / "dump.safetensors";
        Result r = generate(tmp, "--model " + file + args + " --dump " + dump + " -o " + (tmp / "out.png"));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        CHECK(fs::exists(tmp / "out-0.png"));  // two prompts: out-0.png, out-1.png
        const auto d = SafeTensors::open(dump);
        CHECK(d.read("text_encoder_input_ids").to_f32() == io.read("text_encoder_input_ids").to_f32());
        if (dt == DType::f32) CHECK(rel_l2(d.read("image").to_f32(), io.read("image").to_f32()) <= 1e-4);
        for (float v : d.read("image").to_f32()) REQUIRE((v >= 0.f && v <= 1.f));
    }
}

TEST_CASE("kiln generate --complex-human-instruction: none, a file of lines, a bad file",
          "[apps][generate][sana][vulkan]") {
    test::TempDir tmp("kiln_sana_chi");
    const std::string name = "sana_pipeline";
    const std::string io_path = fixture(name) + "/io.safetensors";
    const auto io = SafeTensors::open(io_path);
    const std::string base = "--model " + fixture(name) + " --latents " + io_path +
                             " --no-resolution-binning --steps 1 --guidance 4.5 --width 128 --height 128 --dump " +
                             (tmp / "dump.safetensors") + " -o " + (tmp / "out.png");
    {
        // none: _get_gemma_prompt_embeds tokenizes the prompt alone to max_sequence_length (300) and select_index
        // keeps all 300 positions: the very path of the fixture's negative prompt "" (no instruction, no selection).
        // So the prompts "" give exactly diffusers' negative ids and mask, and the negative rows' embeddings (the
        // same encoder inputs in the same batch: bitwise).
        Result r = generate(tmp, base + " --prompt '' --prompt '' --complex-human-instruction none");
        INFO(r.err);
        REQUIRE(r.rc == 0);
        const auto d = SafeTensors::open(tmp / "dump.safetensors");
        CHECK(d.read("text_encoder_input_ids").to_f32() == io.read("text_encoder_negative_input_ids").to_f32());
        CHECK(d.read("prompt_attention_mask").to_f32() == io.read("negative_prompt_attention_mask").to_f32());
        CHECK(d.read("prompt_embeds").to_f32() == d.read("negative_prompt_embeds").to_f32());
    }
    {
        // @FILE: the default list (tok_gemma's io.json records it) as lines, CRLF and a final newline: diffusers'
        // "\n".join(list), so the fixture's default-instruction ids and embeddings come back.
        const auto tj = nlohmann::json::parse(std::ifstream(fixture("tok_gemma") + "/io.json"));
        std::ofstream f(tmp / "chi.txt", std::ios::binary);
        for (auto& line : tj["complex_human_instruction"]) f << line.get<std::string>() << "\r\n";
        f.close();
        std::string args = base + " --complex-human-instruction @" + (tmp / "chi.txt");
        const auto j = io_json(name);
        for (auto& p : j["prompt"]) args += " --prompt '" + p.get<std::string>() + "'";
        Result r = generate(tmp, args);
        INFO(r.err);
        REQUIRE(r.rc == 0);
        const auto d = SafeTensors::open(tmp / "dump.safetensors");
        CHECK(d.read("text_encoder_input_ids").to_f32() == io.read("text_encoder_input_ids").to_f32());
        CHECK(rel_l2(d.read("prompt_embeds").to_f32(), io.read("prompt_embeds").to_f32()) <= 1e-4);
    }
    {
        Result r = generate(tmp, base + " --prompt fox --complex-human-instruction @" + (tmp / "missing.txt"));
        CHECK(r.rc != 0);
        CHECK_THAT(r.err, Catch::Contains("--complex-human-instruction @") && Catch::Contains("missing.txt"));
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') <= 1);
    }
    {
        // PixArt's __call__ has no complex_human_instruction: refused before any work.
        Result r = generate(tmp, "--model " + fixture("pixart_pipeline") +
                                     " --prompt fox --complex-human-instruction none -o " + (tmp / "p.png"));
        CHECK(r.rc != 0);
        CHECK_THAT(r.err, Catch::Contains("complex_human_instruction applies to SanaPipeline"));
        CHECK_FALSE(fs::exists(tmp / "p.png"));
    }
}
