// `kiln generate --lora`: every public run of the flux_lora / sd3_lora fixtures through the CLI, compared with the
// answer as trained (io.json's `<run>_as_trained` tensors where a run has them, diffusers' otherwise), the bad
// LoRAs that must stop with one line and no image, and LoRAs with text-encoder modules.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "models/core/source.h"
#include "models/layouts/lora.h"
#include "models/pipelines/text_encode.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/single_files.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
using Result = test::CliResult;

Result generate(const test::TempDir& tmp, const std::string& args) {
    return test::run_cli(tmp, "kiln", "generate " + args);
}

std::string fixture(const std::string& name) { return test::data_path("fixtures/" + name); }

nlohmann::json io_json(const std::string& c) {
    std::ifstream f(fixture(c + "_lora") + "/io.json");
    return nlohmann::json::parse(f);
}

// The fixture call of case c ("flux", "sd3"): model, latents, prompt, steps, guidance, size.
std::string base_args(const std::string& c, const nlohmann::json& io) {
    const auto& s = io["call"]["scalars"];
    const std::string m = fixture(c + "_pipeline");
    std::string a = "--model " + m + " --latents " + m + "/io.safetensors";
    for (auto& p : io["prompt"]) a += " --prompt '" + p.get<std::string>() + "'";
    return a + " --steps " + std::to_string(s["num_inference_steps"].get<int>()) + " --guidance " +
           std::to_string(s["guidance_scale"].get<double>()) + " --width " + std::to_string(s["width"].get<int>()) +
           " --height " + std::to_string(s["height"].get<int>());
}

// --lora FILE:SCALE for each LoRA of a run: SCALE = set_adapters weight x joint_attention_kwargs scale x
// fuse_lora's lora_scale (the ones the run does not call are 1).
std::string lora_args(const std::string& c, const nlohmann::json& io, const nlohmann::json& run) {
    std::string a;
    for (size_t i = 0; i < run["loras"].size(); ++i) {
        double s = 1;
        if (!run["adapter_weights"].is_null()) s *= run["adapter_weights"][i].get<double>();
        if (!run["joint_attention_kwargs_scale"].is_null()) s *= run["joint_attention_kwargs_scale"].get<double>();
        if (!run["fuse_lora_scale"].is_null()) s *= run["fuse_lora_scale"].get<double>();
        const std::string file = io["loras"][run["loras"][i].get<std::string>()]["file"];
        a += " --lora " + fixture(c + "_lora/" + file) + ":" + std::to_string(s);
    }
    return a;
}
}  // namespace

TEST_CASE("kiln generate --lora: every public LoRA run as trained", "[apps][lora][vulkan]") {
    const std::string c = GENERATE(as<std::string>{}, "flux", "sd3");
    const std::string apply = GENERATE(as<std::string>{}, "merge", "runtime");
    const auto io = io_json(c);
    auto ref = SafeTensors::open(fixture(c + "_lora") + "/io.safetensors");
    int runs = 0;
    for (const auto& run : io["runs"]) {
        const std::string name = run["name"];
        test::TempDir tmp("kiln_lora");
        const std::string dump = tmp / "dump.safetensors";
        Result r = generate(tmp, base_args(c, io) + lora_args(c, io, run) + " --lora-apply " + apply + " --dump " +
                                     dump + " -o " + (tmp / "out.png"));
        INFO(c << " " << name << " " << apply << "\n" << r.err);
        REQUIRE(r.rc == 0);
        // Each LoRA's count is reported.
        for (size_t i = 0; i < run["loras"].size(); ++i) CHECK(r.err.find("tensors matched") != std::string::npos);
        auto got = SafeTensors::open(dump);
        for (const char* t : {"step0_transformer_out", "final_latents_scaled", "image"}) {
            const std::string at = name + "_as_trained/" + t;
            const std::string key = ref.find(at) ? at : name + "/" + t;
            INFO(key);
            REQUIRE(got.find(t));
            // f32 throughout as the pipeline fixtures (1e-4 relative L2, summation order): the merged weight
            // W + s B A differs from diffusers' W x + s B (A x) by one f32 rounding per element (~6e-8 relative),
            // the runtime side path is diffusers' order; both far inside it (observed ~6e-6, the pipeline's own).
            CHECK(rel_l2(got.read(t).to_f32(), ref.read(key).to_f32()) <= 1e-4);
        }
        ++runs;
    }
    CHECK(runs == (int)io["runs"].size());
}

TEST_CASE("kiln generate --lora: bad LoRAs stop with one line and no image", "[apps][lora]") {
    test::TempDir tmp("kiln_lora_err");
    const std::string png = tmp / "out.png";
    const auto io = io_json("flux");
    const std::string flux = base_args("flux", io);
    auto expect_error = [&](const std::string& args, const std::string& needle) {
        Result r = generate(tmp, args + " -o " + png);
        INFO(args << "\n" << r.err);
        CHECK(r.rc != 0);
        CHECK(r.err.find("kiln: error:") != std::string::npos);
        CHECK(r.err.find(needle) != std::string::npos);
        CHECK(!fs::exists(png));
    };
    // An SD3 LoRA on Flux: keys of blocks the model lacks, the layout guessed.
    expect_error(flux + " --lora " + fixture("sd3_lora/lora_peft.safetensors"), "an SD3 LoRA?");
    // A Flux LoRA on SD3: named as such.
    expect_error(base_args("sd3", io_json("sd3")) + " --lora " + fixture("flux_lora/lora_kohya.safetensors"),
                 "a LoRA for Flux (kohya layout); the model is SD3");
    // An SD3 LoRA in kohya names on Flux: named as such.
    const std::string k = "lora_unet_joint_blocks_0_x_block_attn_proj.";
    write_safetensors(tmp / "sd3k.safetensors", {{k + "lora_down.weight", test::random_tensor({2, 32}, 1)},
                                                 {k + "lora_up.weight", test::random_tensor({32, 2}, 2)}});
    expect_error(flux + " --lora " + (tmp / "sd3k.safetensors"), "a LoRA for SD3 (kohya layout); the model is Flux");
    // A truncated file.
    fs::copy_file(fixture("flux_lora/lora_peft.safetensors"), tmp / "cut.safetensors");
    fs::resize_file(tmp / "cut.safetensors", 1000);
    expect_error(flux + " --lora " + (tmp / "cut.safetensors"), "cut.safetensors: header length");
    expect_error(flux + " --lora " + (tmp / "missing.safetensors"), "missing.safetensors");
    expect_error(flux + " --lora " + fixture("flux_lora/lora_peft.safetensors") + " --lora-apply fold",
                 "runtime or merge");
    // A DiT model takes no LoRA.
    expect_error("--model " + fixture("dit_pipeline_ddim") + " --lora " + fixture("flux_lora/lora_peft.safetensors"),
                 "--lora");
}

TEST_CASE("kiln generate --lora-allow-unmatched: a warning, the rest applied", "[apps][lora][vulkan]") {
    test::TempDir tmp("kiln_lora_unm");
    // The public peft file plus a key for a block the model lacks.
    auto src = SafeTensors::open(fixture("flux_lora/lora_peft.safetensors"));
    std::vector<std::pair<std::string, Tensor>> t;
    for (const auto& i : src.tensors()) t.push_back({i.name, src.read(i.name)});
    t.push_back({"transformer.transformer_blocks.9.attn.to_q.lora_A.weight", Tensor(DType::f32, {4, 32})});
    write_safetensors(tmp / "extra.safetensors", t, src.metadata());
    const auto io = io_json("flux");
    const std::string args = base_args("flux", io) + " --lora " + (tmp / "extra.safetensors");
    Result r = generate(tmp, args + " -o " + (tmp / "a.png"));
    CHECK(r.rc != 0);
    CHECK(r.err.find("transformer_blocks.9.attn.to_q.lora_A.weight") != std::string::npos);
    r = generate(tmp, args + " --lora-allow-unmatched --dump " + (tmp / "d.safetensors") + " -o " + (tmp / "b.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("26 tensors matched, 13 modules, 1 keys unmatched") != std::string::npos);
    CHECK(r.err.find("warning: lora") != std::string::npos);
    auto ref = SafeTensors::open(fixture("flux_lora/io.safetensors"));
    CHECK(rel_l2(SafeTensors::open(tmp / "d.safetensors").read("image").to_f32(), ref.read("peft_s1/image").to_f32()) <=
          1e-4);
}

TEST_CASE("kiln generate --lora-apply runtime under a budget: streamed blocks carry their LoRA weights",
          "[apps][lora][vulkan]") {
    test::TempDir tmp("kiln_lora_stream");
    const auto io = io_json("flux");
    Result r = generate(tmp, base_args("flux", io) + " --lora " + fixture("flux_lora/lora_kohya.safetensors") +
                                 " --lora-apply runtime --vram-budget 300000 --profile --dump " +
                                 (tmp / "d.safetensors") + " -o " + (tmp / "o.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    // The budget is raised to the minimum working set, two ring slots. On unified memory (lavapipe, integrated GPUs)
    // one of this fixture's two blocks is read in place from host memory; on a discrete GPU the two slots would hold
    // both blocks, so they stay resident and nothing streams (kiln picks the device this test's context picks).
    static vk::Context& ctx = test::exit_safe_context();
    if (ctx.info().unified_memory)
        CHECK(r.err.find("streaming: 1 of 2 blocks") != std::string::npos);
    else
        CHECK(r.err.find("streaming:") == std::string::npos);
    auto ref = SafeTensors::open(fixture("flux_lora/io.safetensors"));
    CHECK(rel_l2(SafeTensors::open(tmp / "d.safetensors").read("final_latents_scaled").to_f32(),
                 ref.read("kohya_s1_as_trained/final_latents_scaled").to_f32()) <= 1e-4);
}

TEST_CASE("kiln-convert --lora bakes LoRAs into the file: the runs as trained without --lora", "[apps][lora][vulkan]") {
    test::TempDir tmp("kiln_lora_conv");
    auto convert = [&](const std::string& args) { return test::run_cli(tmp, "kiln-convert", args); };
    // (case, run): two LoRAs with adapter weights on Flux (kohya as trained), one on SD3.
    for (auto [c, run_name] : {std::pair{"flux", "combo"}, std::pair{"flux", "kohya_s1"}, std::pair{"sd3", "combo"}}) {
        const auto io = io_json(c);
        const nlohmann::json* run = nullptr;
        for (const auto& r : io["runs"])
            if (r["name"] == run_name) run = &r;
        REQUIRE(run);
        const std::string out = tmp / (std::string(c) + ".kiln");
        Result r =
            convert(fixture(std::string(c) + "_pipeline") + " --dtype f32" + lora_args(c, io, *run) + " -o " + out);
        INFO(c << " " << run_name << "\n" << r.err);
        REQUIRE(r.rc == 0);
        CHECK(r.err.find("tensors matched") != std::string::npos);
        std::string args = base_args(c, io);  // the same call on the converted file, no --lora
        args.replace(args.find("--model ") + 8, fixture(std::string(c) + "_pipeline").size(), out);
        r = generate(tmp, args + " --dump " + (tmp / "d.safetensors") + " -o " + (tmp / "o.png"));
        REQUIRE(r.rc == 0);
        auto ref = SafeTensors::open(fixture(std::string(c) + "_lora") + "/io.safetensors");
        const std::string at = std::string(run_name) + "_as_trained/image";
        // f32 file: the same weights as --lora-apply merge, 1e-4 as there.
        CHECK(rel_l2(SafeTensors::open(tmp / "d.safetensors").read("image").to_f32(),
                     ref.read(ref.find(at) ? at : std::string(run_name) + "/image").to_f32()) <= 1e-4);
    }
    // A quantized base with merge: refused with one line, no image (merge would requantize it).
    Result q = convert(fixture("flux_pipeline") + " --dtype q8_0 -o " + (tmp / "q8.kiln"));
    REQUIRE(q.rc == 0);
    std::string qargs = base_args("flux", io_json("flux"));
    qargs.replace(qargs.find("--model ") + 8, fixture("flux_pipeline").size(), tmp / "q8.kiln");
    q = generate(tmp, qargs + " --lora " + fixture("flux_lora/lora_peft.safetensors") + " --lora-apply merge -o " +
                          (tmp / "q.png"));
    INFO(q.err);
    CHECK(q.rc != 0);
    CHECK(q.err.find("is stored as q8_0; --lora-apply merge folds LoRAs into f32, f16 or bf16 weights only") !=
          std::string::npos);
    CHECK(!fs::exists(tmp / "q.png"));
    // The runtime side path on that quantized base: the q8_0 weights stay as they are, the LoRA applies. q8_0
    // alone moves the final latents 7e-3 (relative L2) from the f32 base's; the LoRA moves them 1e-1.
    q = generate(tmp, qargs + " --lora " + fixture("flux_lora/lora_peft.safetensors") +
                          " --lora-apply runtime --dump " + (tmp / "q.safetensors") + " -o " + (tmp / "q.png"));
    REQUIRE(q.rc == 0);
    {
        auto ref = SafeTensors::open(fixture("flux_lora/io.safetensors"));
        auto got = SafeTensors::open(tmp / "q.safetensors").read("final_latents_scaled").to_f32();
        CHECK(rel_l2(got, ref.read("peft_s1/final_latents_scaled").to_f32()) <= 2e-2);
        CHECK(rel_l2(got, ref.read("base/final_latents_scaled").to_f32()) >= 5e-2);
    }
    // A LoRA that does not fit: one line, no file.
    Result r = convert(fixture("flux_pipeline") + " --lora " + fixture("sd3_lora/lora_peft.safetensors") + " -o " +
                       (tmp / "bad.kiln"));
    CHECK(r.rc != 0);
    CHECK(r.err.find("match no module") != std::string::npos);
    CHECK(!fs::exists(tmp / "bad.kiln"));
}

namespace {
// A LoRA with a transformer module and text-encoder modules of the fixture pipeline c: Flux's CLIP-L in kohya names
// (lora_te1_, alpha 2 of rank 4); SD3's CLIP-L and CLIP-G in diffusers' names (text_encoder. / text_encoder_2.).
// with_te false: the transformer module only.
std::string write_te_lora(const test::TempDir& tmp, const std::string& c, bool with_te) {
    std::vector<std::pair<std::string, Tensor>> t = {
        {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", test::random_tensor({4, 32}, 7)},
        {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", test::random_tensor({32, 4}, 8, -.05f, .05f)}};
    unsigned seed = 20;
    auto add = [&](const std::string& key, const std::string& down, const std::string& up, int in, int out) {
        seed += 2;
        t.push_back({key + down, test::random_tensor({4, in}, seed)});
        t.push_back({key + up, test::random_tensor({out, 4}, seed + 1, -.05f, .05f)});
    };
    for (int l = 0; with_te && l < 3; ++l)
        for (auto [m, in, out] : {std::tuple{"self_attn.q_proj", 32, 32}, std::tuple{"self_attn.out_proj", 32, 32},
                                  std::tuple{"mlp.fc1", 32, 64}}) {
            std::string under = m;
            for (char& ch : under)
                if (ch == '.') ch = '_';
            const std::string layer = "text_model.encoder.layers." + std::to_string(l) + ".";
            if (c == "flux" && l < 2) {
                const std::string k = "lora_te1_text_model_encoder_layers_" + std::to_string(l) + "_" + under;
                add(k, ".lora_down.weight", ".lora_up.weight", in, out);
                t.push_back({k + ".alpha", Tensor::from_f32({}, {2.f})});
            }
            if (c == "sd3" && l < 2) add("text_encoder." + layer + m, ".lora_A.weight", ".lora_B.weight", in, out);
            if (c == "sd3") add("text_encoder_2." + layer + m, ".lora_A.weight", ".lora_B.weight", in, out);
        }
    const std::string p = tmp / (c + (with_te ? "_te.safetensors" : "_tr.safetensors"));
    write_safetensors(p, t);
    return p;
}
}  // namespace

// A LoRA with transformer and text-encoder modules through `kiln generate`: the summary names the encoders, the
// text encoders' outputs are the CPU reference's with the delta merged into their weights, the image is not the one
// of the transformer module alone, and with --prompt-embeds the text-encoder keys are named as not applied.
TEST_CASE("kiln generate --lora: text-encoder modules applied to the CLIP encoders", "[apps][lora][vulkan]") {
    const std::string c = GENERATE(as<std::string>{}, "flux", "sd3");
    test::TempDir tmp("kiln_lora_te");
    const auto io = io_json(c);
    const std::string te = write_te_lora(tmp, c, true), tr = write_te_lora(tmp, c, false);
    const std::string args = base_args(c, io);
    Result r =
        generate(tmp, args + " --lora " + te + ":0.9 --dump " + (tmp / "te.safetensors") + " -o " + (tmp / "te.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find(c == "flux"
                         ? "7 modules (6 of them text-encoder modules, applied to CLIP-L)"
                         : "16 modules (15 of them text-encoder modules, applied to 6 on CLIP-L, 9 on CLIP-G)") !=
          std::string::npos);
    Result r2 =
        generate(tmp, args + " --lora " + tr + ":0.9 --dump " + (tmp / "tr.safetensors") + " -o " + (tmp / "tr.png"));
    REQUIRE(r2.rc == 0);
    auto got = SafeTensors::open(tmp / "te.safetensors");
    auto without = SafeTensors::open(tmp / "tr.safetensors");
    // The encoders on the CPU with the LoRA merged (f64 accumulation, one f32 rounding), the CLI's prompts.
    auto src = models::ModelSource::open(fixture(c + "_pipeline"));
    models::PromptOptions po;
    for (auto& p : io["prompt"]) po.prompts.push_back(p.get<std::string>());
    po.cfg = c == "sd3";  // SD3 with guidance > 1 encodes the negative prompts too; Flux without true CFG does not
    po.keep_intermediates = true;
    po.lora.files = {{te, 0.9}};
    po.lora.apply = "merge";
    const auto ref = models::encode_prompts(nullptr, src, po);
    int compared = 0;
    for (const auto& [name, t] : ref.intermediates) {
        if (t.dtype != DType::f32 || !got.find(name)) continue;
        INFO(name);
        // f32 both sides: the side path's W x + B (s (A x)) against (W + s B A) x and the summation order (the
        // CLIP test of tests/models/test_lora_runtime.cpp): 1e-5 relative L2.
        CHECK(rel_l2(got.read(name).to_f32(), t.to_f32()) <= 1e-5);
        // And the LoRA moved them: far beyond that.
        CHECK(rel_l2(without.read(name).to_f32(), t.to_f32()) > 1e-3);
        ++compared;
    }
    CHECK(compared >= (c == "flux" ? 1 : 4));
    CHECK(rel_l2(got.read("image").to_f32(), without.read("image").to_f32()) > 1e-4);

    // prompt_embeds: the text encoders do not run; their keys are named as not applied, the transformer's apply.
    std::string embeds = args.substr(0, args.find(" --prompt ")) + args.substr(args.find(" --steps "));
    embeds += " --prompt-embeds " + fixture(c + "_pipeline") + "/io.safetensors";
    Result r3 = generate(tmp, embeds + " --lora " + te + " -o " + (tmp / "e.png"));
    INFO(r3.err);
    CHECK(r3.rc == 0);
    CHECK(r3.err.find("text-encoder keys not applied (CLIP-L (text_encoder) does not run: prompt_embeds given)") !=
          std::string::npos);
}

// kiln-convert --lora with transformer and CLIP modules: each module is merged into the component it targets, so
// the f32 file converted with the LoRA, run without --lora, is `kiln generate --lora-apply merge` on the folder bit
// for bit: both fold the same LoRA into the same f32 weights with layouts::lora_merge (f64 sums, one rounding), and
// --dtype f32 stores those bytes unchanged, so both runs execute the same graphs on the same bytes. A transformer
// converted alone names the text-encoder keys in one warning line per encoder.
TEST_CASE("kiln-convert --lora bakes text-encoder modules too: the image of --lora-apply merge",
          "[apps][lora][vulkan]") {
    const std::string c = GENERATE(as<std::string>{}, "flux", "sd3");
    test::TempDir tmp("kiln_lora_conv_te");
    const auto io = io_json(c);
    const std::string te = write_te_lora(tmp, c, true), folder = fixture(c + "_pipeline"), out = tmp / "te.kiln";
    Result r = test::run_cli(tmp, "kiln-convert", folder + " --dtype f32 --lora " + te + ":0.9 -o " + out);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find(c == "flux" ? "(6 of them text-encoder modules, applied to CLIP-L) (merged)"
                                 : "(15 of them text-encoder modules, applied to 6 on CLIP-L, 9 on CLIP-G) (merged)") !=
          std::string::npos);
    CHECK(r.err.find("warning") == std::string::npos);

    // Every targeted weight in the file: the folder's weight merged, not the folder's weight.
    const std::string family = c == "flux" ? "Flux" : "SD3";
    std::map<std::string, std::unique_ptr<layouts::TensorSet>> base;
    base["transformer"] = layouts::open_safetensors(folder + "/transformer/diffusion_pytorch_model.safetensors");
    layouts::LoraTargets targets;
    for (const std::string& e : layouts::lora_text_encoders(family))
        base[e] = layouts::open_safetensors(folder + "/" + e + "/model.safetensors");
    for (const auto& [name, set] : base) {
        auto fn = [s = set.get()](const std::string& w) -> std::optional<Shape> {
            const layouts::TensorInfo* i = s->find(w);
            return i ? std::optional<Shape>(i->shape) : std::nullopt;
        };
        if (name == "transformer")
            targets.transformer = fn;
        else
            targets.text_encoders[name] = fn;
    }
    const layouts::LoraFile f = layouts::read_lora(te, family, targets, false);
    int merged = 0;
    for (const layouts::LoraModule& m : f.modules) {
        INFO(m.component << "." << m.module);
        const Tensor got = layouts::open_kiln_component(out, m.component)->read(m.module + ".weight");
        const Tensor w = base.at(m.component)->read(m.module + ".weight");
        CHECK(got.bytes == layouts::lora_merge(w, {{&m, 0.9}}).bytes);
        CHECK(got.bytes != w.bytes);
        merged += m.component != "transformer";
    }
    CHECK(merged == (c == "flux" ? 6 : 15));

    // The same weights as single files (bitwise re-layouts of the folder: tests/support/single_files.h), converted
    // with the LoRA: every targeted weight as from the folder.
    const std::string single = tmp / "single.kiln";
    const std::string files = c == "flux" ? "--diffusion-model " + test::single_file(c, "flux1-tiny.safetensors") +
                                                " --vae " + test::single_file(c, "ae.safetensors") + " --clip-l " +
                                                test::single_file(c, "clip_l.safetensors") + " --t5xxl " +
                                                test::single_file(c, "t5xxl.safetensors")
                                          : test::single_file(c, "sd3-tiny.safetensors");
    r = test::run_cli(tmp, "kiln-convert",
                      files + " --config " + folder + " --dtype f32 --lora " + te + ":0.9 -o " + single);
    REQUIRE(r.rc == 0);
    for (const layouts::LoraModule& m : f.modules) {
        INFO(m.component << "." << m.module);
        CHECK(layouts::open_kiln_component(single, m.component)->read(m.module + ".weight").bytes ==
              layouts::open_kiln_component(out, m.component)->read(m.module + ".weight").bytes);
    }

    // The converted file without --lora against the folder with --lora-apply merge: every dumped tensor bitwise.
    const std::string args = base_args(c, io);
    std::string on_file = args;
    on_file.replace(on_file.find("--model ") + 8, folder.size(), out);
    Result a = generate(tmp, args + " --lora " + te + ":0.9 --lora-apply merge --dump " + (tmp / "a.safetensors") +
                                 " -o " + (tmp / "a.png"));
    Result b = generate(tmp, on_file + " --dump " + (tmp / "b.safetensors") + " -o " + (tmp / "b.png"));
    INFO(a.err << b.err);
    REQUIRE(a.rc == 0);
    REQUIRE(b.rc == 0);
    auto da = SafeTensors::open(tmp / "a.safetensors"), db = SafeTensors::open(tmp / "b.safetensors");
    int same = 0;
    for (const auto& t : da.tensors()) {
        INFO(t.name);
        REQUIRE(db.find(t.name));
        CHECK(da.read(t.name).bytes == db.read(t.name).bytes);
        ++same;
    }
    CHECK(same >= 3);
    CHECK(da.find("image"));

    // The transformer converted alone: its module merged, the text-encoder keys named in one warning line per
    // encoder, worded as not applied (no "(merged)").
    r = test::run_cli(tmp, "kiln-convert",
                      folder + "/transformer --dtype f32 --lora " + te + " -o " + (tmp / "tr.kiln"));
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("1 modules (merged)") != std::string::npos);
    std::vector<std::string> warnings;
    for (size_t p = r.err.find("warning: "); p != std::string::npos; p = r.err.find("warning: ", p + 1))
        warnings.push_back(r.err.substr(p, r.err.find('\n', p) - p));
    const std::vector<std::string> expect =
        c == "flux" ? std::vector<std::string>{"18 text-encoder keys not applied (CLIP-L (text_encoder) is not part "
                                               "of this conversion): "}
                    : std::vector<std::string>{"18 text-encoder keys not applied (CLIP-G (text_encoder_2) is not part "
                                               "of this conversion): ",
                                               "12 text-encoder keys not applied (CLIP-L (text_encoder) is not part "
                                               "of this conversion): "};
    REQUIRE(warnings.size() == expect.size());
    for (size_t i = 0; i < expect.size(); ++i) {
        CHECK(warnings[i].find("warning: lora " + te + ": " + expect[i]) == 0);
        CHECK(warnings[i].find("(merged)") == std::string::npos);
    }
    // No transformer to merge into (it used to be ignored): one line, no file.
    r = test::run_cli(tmp, "kiln-convert", folder + "/vae --lora " + te + " -o " + (tmp / "vae.kiln"));
    CHECK(r.rc != 0);
    CHECK(r.err.find("--lora: no transformer to merge LoRAs into (converting vae)") != std::string::npos);
    CHECK(!fs::exists(tmp / "vae.kiln"));
}

namespace {
// One LoRA for the sd3_pipeline fixture (2 blocks, the last context_pre_only) in kohya sd-scripts' names
// (lora_unet_<Stability's MMDiT path with '_'>, lora_te1_ / lora_te2_ / lora_te3_) and the same LoRA in
// diffusers/PEFT names (per diffusers module: A, its rows of B, the halves swapped where the base weight's are, the
// module's alpha). Fused qkv, the adaLN of both blocks (the pre-only one swapped), embedders, final layer (swapped),
// CLIP-L, CLIP-G, and a T5 module both drop with a warning. `extra`: a key of no module added to the kohya file.
std::pair<std::string, std::string> write_sd3_kohya(const test::TempDir& tmp, const std::string& extra = "") {
    struct M {
        std::string original;  // kohya's, with '.'
        std::string component;
        std::vector<std::string> modules;  // diffusers', B's row parts in order
        bool swap = false;
    };
    const std::string b0 = "transformer_blocks.0.", b1 = "transformer_blocks.1.", tr = "transformer";
    const std::vector<M> mods = {
        {"joint_blocks.0.x_block.attn.qkv", tr, {b0 + "attn.to_q", b0 + "attn.to_k", b0 + "attn.to_v"}},
        {"joint_blocks.0.x_block.adaLN_modulation.1", tr, {b0 + "norm1.linear"}},
        {"joint_blocks.0.x_block.mlp.fc1", tr, {b0 + "ff.net.0.proj"}},
        {"joint_blocks.0.context_block.attn.proj", tr, {b0 + "attn.to_add_out"}},
        {"joint_blocks.1.context_block.attn.qkv",
         tr,
         {b1 + "attn.add_q_proj", b1 + "attn.add_k_proj", b1 + "attn.add_v_proj"}},
        {"joint_blocks.1.context_block.adaLN_modulation.1", tr, {b1 + "norm1_context.linear"}, true},
        {"joint_blocks.1.x_block.mlp.fc2", tr, {b1 + "ff.net.2"}},
        {"context_embedder", tr, {"context_embedder"}},
        {"t_embedder.mlp.0", tr, {"time_text_embed.timestep_embedder.linear_1"}},
        {"y_embedder.mlp.2", tr, {"time_text_embed.text_embedder.linear_2"}},
        {"final_layer.linear", tr, {"proj_out"}},
        {"final_layer.adaLN_modulation.1", tr, {"norm_out.linear"}, true},
        {"text_model.encoder.layers.0.self_attn.q_proj",
         "text_encoder",
         {"text_model.encoder.layers.0.self_attn.q_proj"}},
        {"text_model.encoder.layers.1.mlp.fc1", "text_encoder_2", {"text_model.encoder.layers.1.mlp.fc1"}},
    };
    std::map<std::string, SafeTensors> weights;
    for (const char* c : {"transformer", "text_encoder", "text_encoder_2"})
        weights.emplace(c,
                        SafeTensors::open(fixture("sd3_pipeline/") + c +
                                          (c == tr ? "/diffusion_pytorch_model.safetensors" : "/model.safetensors")));
    std::vector<std::pair<std::string, Tensor>> kohya, peft;
    unsigned seed = 300;
    for (size_t i = 0; i < mods.size(); ++i) {
        const M& m = mods[i];
        const int64_t r = i % 2 ? 2 : 4;
        const Tensor alpha = Tensor::from_f32({}, {(float)(1 + i % 3)});
        int64_t rows = 0, in = 0;
        for (const std::string& d : m.modules) {
            const Shape& s = weights.at(m.component).at(d + ".weight").shape;
            rows += s[0];
            in = s[1];
        }
        const Tensor A = test::random_tensor({r, in}, seed++), up = test::random_tensor({rows, r}, seed++, -.05f, .05f);
        std::string k = m.original;
        for (char& c : k)
            if (c == '.') c = '_';
        k = (m.component == tr ? "lora_unet_" : m.component == "text_encoder" ? "lora_te1_" : "lora_te2_") + k;
        kohya.push_back({k + ".lora_down.weight", A});
        kohya.push_back({k + ".lora_up.weight", up});
        kohya.push_back({k + ".alpha", alpha});
        Tensor b = up;  // [shift; scale] -> [scale; shift]
        const size_t half = (size_t)(rows / 2 * r) * sizeof(float);
        if (m.swap) {
            std::memcpy(b.bytes.data(), up.bytes.data() + half, half);
            std::memcpy(b.bytes.data() + half, up.bytes.data(), half);
        }
        int64_t r0 = 0;
        for (const std::string& d : m.modules) {
            const int64_t n = weights.at(m.component).at(d + ".weight").shape[0];
            Tensor part(DType::f32, {n, r});
            std::memcpy(part.bytes.data(), b.bytes.data() + (size_t)(r0 * r) * sizeof(float), part.nbytes());
            r0 += n;
            peft.push_back({m.component + "." + d + ".lora_A.weight", A});
            peft.push_back({m.component + "." + d + ".lora_B.weight", part});
            peft.push_back({m.component + "." + d + ".alpha", alpha});
        }
    }
    kohya.push_back(
        {"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_down.weight", test::random_tensor({2, 48}, 1)});
    kohya.push_back(
        {"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_up.weight", test::random_tensor({48, 2}, 2)});
    peft.push_back(
        {"text_encoder_3.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight", test::random_tensor({2, 48}, 1)});
    peft.push_back(
        {"text_encoder_3.encoder.block.0.layer.0.SelfAttention.q.lora_B.weight", test::random_tensor({48, 2}, 2)});
    if (!extra.empty()) kohya.push_back({extra, test::random_tensor({2, 32}, 3)});
    const std::string kp = tmp / (extra.empty() ? "sd3_kohya.safetensors" : "sd3_kohya_extra.safetensors");
    write_safetensors(kp, kohya);
    write_safetensors(tmp / "sd3_peft.safetensors", peft);
    return {kp, tmp / "sd3_peft.safetensors"};
}

// Every tensor of two --dump files, bit for bit.
void check_same_dump(const std::string& a, const std::string& b) {
    auto x = SafeTensors::open(a), y = SafeTensors::open(b);
    REQUIRE(x.tensors().size() == y.tensors().size());
    for (const auto& t : x.tensors()) {
        INFO(t.name);
        REQUIRE(y.find(t.name));
        CHECK(x.read(t.name).bytes == y.read(t.name).bytes);
    }
}
}  // namespace

// kohya sd-scripts' SD3 LoRAs (diffusers refuses them): the same modules, A, B and alpha / r as the PEFT file, so the
// same side paths / merged weights, so the same bytes in every dumped tensor. And the LoRA moves the result.
TEST_CASE("kiln generate --lora: an SD3 kohya file equals the same LoRA in PEFT names", "[apps][lora][vulkan]") {
    const std::string apply = GENERATE(as<std::string>{}, "merge", "runtime");
    test::TempDir tmp("kiln_lora_sd3k");
    const auto [kohya, peft] = write_sd3_kohya(tmp);
    const std::string args = base_args("sd3", io_json("sd3")) + " --lora-apply " + apply;
    Result k =
        generate(tmp, args + " --lora " + kohya + ":0.8 --dump " + (tmp / "k.safetensors") + " -o " + (tmp / "k.png"));
    INFO(k.err);
    REQUIRE(k.rc == 0);
    Result p =
        generate(tmp, args + " --lora " + peft + ":0.8 --dump " + (tmp / "p.safetensors") + " -o " + (tmp / "p.png"));
    INFO(p.err);
    REQUIRE(p.rc == 0);
    // 12 transformer modules in 16 diffusers modules + 2 CLIP modules, 3 tensors each; T5 named as not applied.
    CHECK(k.err.find("(kohya): 42 tensors matched, 18 modules (2 of them text-encoder modules, applied to 1 on CLIP-L, "
                     "1 on CLIP-G)") != std::string::npos);
    CHECK(p.err.find("(diffusers/PEFT): 54 tensors matched, 18 modules") != std::string::npos);
    for (const Result* r : {&k, &p})
        CHECK(r->err.find("2 text-encoder keys not applied (T5: diffusers does not apply T5 LoRAs to SD3 either)") !=
              std::string::npos);
    check_same_dump(tmp / "k.safetensors", tmp / "p.safetensors");
    auto ref = SafeTensors::open(fixture("sd3_lora") + "/io.safetensors");
    CHECK(rel_l2(SafeTensors::open(tmp / "k.safetensors").read("final_latents_scaled").to_f32(),
                 ref.read("base/final_latents_scaled").to_f32()) > 1e-3);

    if (apply != "runtime") return;
    // A key of no module: one line naming it and the layout, no image; allowed, a warning and the rest applied.
    const std::string bad = "lora_unet_joint_blocks_0_x_block_attn_qkvz.lora_down.weight";
    const std::string extra = write_sd3_kohya(tmp, bad).first;
    Result e = generate(tmp, args + " --lora " + extra + ":0.8 -o " + (tmp / "e.png"));
    CHECK(e.rc != 0);
    CHECK(e.err.find("1 keys match no module of this SD3 transformer (layout guessed: kohya, SD3): " + bad) !=
          std::string::npos);
    CHECK(!fs::exists(tmp / "e.png"));
    e = generate(tmp, args + " --lora " + extra + ":0.8 --lora-allow-unmatched --dump " + (tmp / "e.safetensors") +
                          " -o " + (tmp / "e.png"));
    INFO(e.err);
    REQUIRE(e.rc == 0);
    CHECK(e.err.find("warning: lora " + extra + ": 1 keys match no module and are not applied, e.g. " + bad) !=
          std::string::npos);
    check_same_dump(tmp / "e.safetensors", tmp / "k.safetensors");
}
