// `kiln generate` on the Z-Image and FLUX.2 [klein] fixtures, run as the binary: each fixture run end to end from its
// prompts with the pipeline's flags (--guidance 0 for Z-Image, --cfg-truncation, --cfg-normalization,
// --max-sequence-length, --text-encoder-layers), from the diffusers folder and from a converted Kiln file, the dump
// compared with diffusers' tensors under its names.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "converter/convert.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
std::string fixture(const std::string& name) { return test::data_path("fixtures/" + name); }

// The CLI arguments of run r of a fixture (its latents written to `latents` under the CLI's name, latents_init).
std::string run_args(const std::string& name, int r, const std::string& latents) {
    std::ifstream f(fixture(name) + "/io.json");
    const auto j = nlohmann::json::parse(f);
    const auto& c = j["runs"][(size_t)r];
    const auto io = SafeTensors::open(fixture(name) + "/io.safetensors");
    write_safetensors(latents, {{"latents_init", io.read("run" + std::to_string(r) + "_latents_init")}});
    std::string a = " --latents " + latents;
    for (auto& p : c["prompt"]) a += " --prompt '" + p.get<std::string>() + "'";
    a += " --steps " + std::to_string(c["num_inference_steps"].get<int>());
    a += " --guidance " + std::to_string(c["guidance_scale"].get<double>());
    a += " --width " + std::to_string(c["width"].get<int>()) + " --height " + std::to_string(c["height"].get<int>());
    a += " --max-sequence-length " + std::to_string(c["max_sequence_length"].get<int>());
    if (c.contains("cfg_truncation")) a += " --cfg-truncation " + std::to_string(c["cfg_truncation"].get<double>());
    if (c.contains("cfg_normalization") && c["cfg_normalization"].get<bool>())
        a += " --cfg-normalization 1";  // diffusers' True
    if (c.contains("text_encoder_out_layers")) {
        std::string l;
        for (auto& v : c["text_encoder_out_layers"]) l += (l.empty() ? "" : ",") + std::to_string(v.get<int>());
        a += " --text-encoder-layers " + l;
    }
    return a;
}

// Every tensor of run r that the dump also has, within 1e-4 relative L2 (ids exactly); returns how many.
int compare(const std::string& name, int r, const std::string& dump_path) {
    const auto dump = SafeTensors::open(dump_path);
    const auto io = SafeTensors::open(fixture(name) + "/io.safetensors");
    const std::string pre = "run" + std::to_string(r) + "_";
    int n = 0;
    for (const auto& t : io.tensors()) {
        if (t.name.rfind(pre, 0) != 0) continue;
        const std::string k = t.name.substr(pre.size());
        if (!dump.find(k) || k == "latents_init") continue;
        const Tensor got = dump.read(k), ref = io.read(t.name);
        if (got.shape != ref.shape) continue;  // klein's batched [uncond, cond] outputs: test_qwen_pipelines
        INFO(name << " run " << r << " " << k);
        if (ref.dtype == DType::i64)
            CHECK(got.to_f32() == ref.to_f32());
        else  // f32 throughout: summation order only, as test_qwen_pipelines
            CHECK(rel_l2(got.to_f32(), ref.to_f32()) <= 1e-4);
        ++n;
    }
    return n;
}
}  // namespace

TEST_CASE("kiln generate reproduces diffusers' Z-Image and FLUX.2 [klein] pipelines through the CLI",
          "[apps][generate][qwen_pipelines][vulkan]") {
    const std::string name = GENERATE(as<std::string>{}, "z_image_pipeline", "flux2_klein_pipeline");
    const int r = GENERATE(0, 1);
    test::TempDir tmp("kiln_qwen_cli");
    const std::string dump = tmp / "dump.safetensors";
    test::CliResult res =
        test::run_cli(tmp, "kiln",
                      "generate --model " + fixture(name) + run_args(name, r, tmp / "latents.safetensors") +
                          " --dump " + dump + " -o " + (tmp / "out.png"));
    INFO(res.err);
    REQUIRE(res.rc == 0);
    CHECK((fs::exists(tmp / "out.png") || fs::exists(tmp / "out-0.png")));
    const int n = compare(name, r, dump);
    CHECK(n >= 10);  // ids, masks, schedule, the steps' noise predictions and latents, the decode input, the image
}

TEST_CASE("kiln-convert of a Z-Image or FLUX.2 [klein] folder, then kiln generate from the .kiln",
          "[apps][generate][qwen_pipelines][vulkan]") {
    const std::string name = GENERATE(as<std::string>{}, "z_image_pipeline", "flux2_klein_pipeline");
    test::TempDir tmp("kiln_qwen_kiln");
    converter::Options o;
    o.quiet = true;
    o.dtype = DType::f32;  // the folder's weights as they are: the same run (the chat template travels too)
    const std::string file = tmp / "model.kiln";
    converter::convert_folder(fixture(name), file, o);
    const std::string dump = tmp / "dump.safetensors";
    test::CliResult res = test::run_cli(tmp, "kiln",
                                        "generate --model " + file + run_args(name, 1, tmp / "latents.safetensors") +
                                            " --dump " + dump + " -o " + (tmp / "out.png"));
    INFO(res.err);
    REQUIRE(res.rc == 0);
    CHECK(compare(name, 1, dump) >= 10);
}
