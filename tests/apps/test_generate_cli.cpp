// `kiln generate` from a prompt, run as the binary: the fixtures' pipelines end to end through the CLI (--latents,
// --dump with diffusers' names), and the bad inputs that must stop with one clear error, a non-zero exit and
// no PNG.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/kiln/generate_flags.h"
#include "models/core/generate_options.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
using Tmp = test::TempDir;

struct Result {
    int rc = -1;
    std::string err;
};

// Runs `kiln generate ARGS` through /bin/sh; stderr captured.
Result generate(const Tmp& tmp, const std::string& args, const std::string& env = "") {
    const std::string err_file = tmp / "stderr.txt";
    const std::string cmd = env + " " + kiln::test::cli_binary("kiln") + " generate " + args + " 2>" + err_file;
    int status = std::system(cmd.c_str());
    Result r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(err_file);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    return r;
}

std::string fixture(const std::string& name) { return test::data_path("fixtures/" + name); }

nlohmann::json io_json(const std::string& name) {
    std::ifstream f(fixture(name) + "/io.json");
    return nlohmann::json::parse(f);
}
}  // namespace

TEST_CASE("kiln generate --prompt reproduces diffusers' pipelines through the CLI", "[apps][generate][vulkan]") {
    const std::string name = GENERATE(as<std::string>{}, "pixart_pipeline", "sd3_pipeline", "flux_pipeline");
    Tmp tmp("kiln_gen");
    auto j = io_json(name);
    const auto& s = j["call"]["scalars"];
    std::string args = "--model " + fixture(name) + " --latents " + fixture(name) + "/io.safetensors";
    for (auto& p : j["prompt"]) args += " --prompt '" + p.get<std::string>() + "'";
    args += " --steps " + std::to_string(s["num_inference_steps"].get<int>()) + " --guidance " +
            std::to_string(s["guidance_scale"].get<double>()) + " --width " + std::to_string(s["width"].get<int>()) +
            " --height " + std::to_string(s["height"].get<int>()) + " --dump " + (tmp / "dump.safetensors") + " -o " +
            (tmp / "out.png");
    Result r = generate(tmp, args);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(fs::exists(tmp / "out.png"));
    auto dump = SafeTensors::open(tmp / "dump.safetensors");
    auto io = SafeTensors::open(fixture(name) + "/io.safetensors");
    int compared = 0;
    for (auto& t : io.tensors()) {
        // Everything the pipeline fixture records that Kiln dumps under the same name: ids exact, floats 1e-4
        // relative L2 (f32 throughout; summation order only).
        if (!dump.find(t.name) || t.name == "latents_init") continue;
        Tensor got = dump.read(t.name), ref = io.read(t.name);
        INFO(name << " " << t.name);
        REQUIRE(got.shape == ref.shape);
        if (ref.dtype == DType::i64)
            CHECK(got.to_f32() == ref.to_f32());
        else
            CHECK(rel_l2(got.to_f32(), ref.to_f32()) <= 1e-4);
        ++compared;
    }
    for (const char* must : {"prompt_embeds", "text_encoder_input_ids", "step0_latents", "decoded", "image"}) {
        INFO(name << " dump lacks " << must);
        CHECK(dump.find(must));
    }
    CHECK(compared >= 10);
}

TEST_CASE("kiln generate --prompt-embeds and --prompt-file --keep-encoders through the CLI",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    const std::string name = "pixart_pipeline";
    const auto j = io_json(name);
    const auto& s = j["call"]["scalars"];
    const std::string common = "--model " + fixture(name) + " --latents " + fixture(name) + "/io.safetensors" +
                               " --steps " + std::to_string(s["num_inference_steps"].get<int>()) + " --guidance " +
                               std::to_string(s["guidance_scale"].get<double>()) + " --no-resolution-binning";
    auto io = SafeTensors::open(fixture(name) + "/io.safetensors");
    const Tensor ref = io.read("image");
    // diffusers' encode_prompt outputs in io.safetensors: the text encoders are skipped, the image is diffusers'.
    Result r = generate(tmp, common + " --prompt-embeds " + fixture(name) + "/io.safetensors --dump " +
                                 (tmp / "embeds.safetensors") + " -o " + (tmp / "embeds.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("text:") == std::string::npos);  // no encoder ran
    CHECK(rel_l2(SafeTensors::open(tmp / "embeds.safetensors").read("image").to_f32(), ref.to_f32()) <= 1e-4);

    // Two lines of a prompt file, encoders kept: the second finds them resident; one PNG per line.
    {
        std::ofstream f(tmp / "prompts.txt");
        f << j["prompt"][0].get<std::string>() << "\n\na lighthouse at night\n";
    }
    r = generate(tmp, common + " --prompt-file " + (tmp / "prompts.txt") + " --keep-encoders --dump " +
                          (tmp / "file.safetensors") + " -o " + (tmp / "file.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    const size_t kept = r.err.find("kept resident"), reused = r.err.find("resident (reused)");
    CHECK(kept != std::string::npos);
    CHECK(reused != std::string::npos);
    CHECK(kept < reused);
    CHECK(fs::exists(tmp / "file-0.png"));
    CHECK(fs::exists(tmp / "file-1.png"));
    CHECK(!fs::exists(tmp / "file-2.png"));  // the blank line is skipped
    // The fixture's prompt, encoded by Kiln: diffusers' image.
    CHECK(rel_l2(SafeTensors::open(tmp / "file-0.safetensors").read("image").to_f32(), ref.to_f32()) <= 1e-4);
}

TEST_CASE("kiln generate --host-loop: the same PNG and dump as the device loop", "[apps][generate][loop][vulkan]") {
    Tmp tmp("kiln_gen");
    const std::string base = "--model " + fixture("sd3_pipeline") + " --prompt 'a cat' --steps 3 ";
    Result dev = generate(tmp, base + "--dump " + (tmp / "dev.safetensors") + " -o " + (tmp / "dev.png"));
    INFO(dev.err);
    REQUIRE(dev.rc == 0);
    CHECK(dev.err.find("loop on the device") != std::string::npos);
    Result host =
        generate(tmp, base + "--host-loop --dump " + (tmp / "host.safetensors") + " -o " + (tmp / "host.png"));
    INFO(host.err);
    REQUIRE(host.rc == 0);
    CHECK(host.err.find("loop on the host") != std::string::npos);
    auto bytes = [](const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    CHECK(bytes(tmp / "dev.png") == bytes(tmp / "host.png"));
    auto d = SafeTensors::open(tmp / "dev.safetensors"), h = SafeTensors::open(tmp / "host.safetensors");
    for (const char* name : {"step2_latents", "step2_noise_pred", "final_latents_scaled", "image"}) {
        INFO(name);
        REQUIRE(d.find(name));
        CHECK(d.read(name).bytes == h.read(name).bytes);
    }
}

TEST_CASE("kiln generate under a budget: ring copies in the step or in batches of their own, the same PNG",
          "[apps][generate][loop][stream][vulkan]") {
    // The built-in digits model (six blocks) streams all of them through two ring slots at the minimum budget, on
    // the device loop (steps in flight). --transfer-queue split puts each ring copy in a batch of its own,
    // ordered by timeline semaphores as on a transfer queue; the next step's first copies wait for the last one.
    Tmp tmp("kiln_gen");
    const std::string base = "--class-labels 1,7 --steps 4 --grid ";
    Result ref = generate(tmp, base + "-o " + (tmp / "ref.png"));
    INFO(ref.err);
    REQUIRE(ref.rc == 0);
    auto bytes = [](const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    for (std::string q : {"0", "split"}) {
        Result r =
            generate(tmp, base + "--vram-budget 1 --profile --transfer-queue " + q + " -o " + (tmp / (q + ".png")),
                     "KILN_BLOCK_WEIGHTS=device KILN_STREAM_IN_PLACE=0");
        INFO(q << "\n" << r.err);
        REQUIRE(r.rc == 0);
        CHECK(r.err.find("loop on the device") != std::string::npos);
        CHECK(r.err.find("6 of 6 blocks from host memory (2 ring slots)") != std::string::npos);
        CHECK(r.err.find(q == "0" ? "ring copies in_step" : "ring copies split") != std::string::npos);
        CHECK(bytes(tmp / (q + ".png")) == bytes(tmp / "ref.png"));
    }
}

TEST_CASE("kiln generate rejects bad prompts and options before writing anything", "[apps][generate]") {
    Tmp tmp("kiln_gen");
    const std::string png = tmp / "out.png";
    auto expect_error = [&](const std::string& args, const std::string& needle) {
        Result r = generate(tmp, args + " -o " + png);
        INFO(args << "\n" << r.err);
        CHECK(r.rc != 0);
        CHECK(r.err.find("kiln: error:") != std::string::npos);
        CHECK(r.err.find(needle) != std::string::npos);
        CHECK(!fs::exists(png));
    };
    const std::string sd3 = " --model " + fixture("sd3_pipeline");
    // Invalid UTF-8 in a prompt (printf writes the byte 0xFF).
    expect_error(sd3 + " --prompt \"$(printf 'a \\377 cat')\"", "invalid UTF-8");
    // --prompt given to a DiT model; --class-labels given to a text model.
    expect_error(" --model " + fixture("dit_pipeline_ddim") + " --prompt 'a cat'", "does not apply");
    expect_error(sd3 + " --class-labels 1", "--class-labels does not apply");
    // A size that is not a multiple of vae_scale_factor x patch size.
    expect_error(sd3 + " --prompt 'a cat' --width 30", "multiples of");
    // No prompt at all.
    expect_error(sd3, "--prompt");
    // A pipeline folder whose tokenizer files are missing.
    fs::copy(fixture("flux_pipeline"), tmp / "flux", fs::copy_options::recursive);
    fs::remove_all(tmp / "flux/tokenizer_2");
    expect_error(" --model " + (tmp / "flux") + " --prompt 'a cat'", "tokenizer_2");
    // Text lists: one for every prompt or one per prompt; only where the pipeline has the encoder.
    expect_error(sd3 + " --prompt a --prompt b --negative-prompt x --negative-prompt y --negative-prompt z",
                 "negative_prompt: 3 texts for 2 prompts");
    expect_error(" --model " + fixture("pixart_pipeline") + " --prompt a --prompt-2 b", "one text encoder (T5)");
    expect_error(" --model " + fixture("flux_pipeline") + " --prompt a --prompt-3 b", "prompt_3");
    expect_error(sd3 + " --prompt-embeds " + (tmp / "absent.safetensors") + " --prompt-3 b",
                 "--prompt-3 applies to --prompt");
    expect_error(sd3 + " --prompt a --true-cfg 2", "--true-cfg applies to Flux");
    expect_error(sd3 + " --prompt a --sigmas 1,x", "--sigmas: 'x' is not a number");
    expect_error(" --model " + fixture("flux_pipeline") + " --prompt a --clip-skip 1",
                 "clip_skip applies to StableDiffusion3Pipeline");
    expect_error(sd3 + " --prompt a --clip-skip 2", "clip_skip 2 for a CLIP text model of 2 layers");
    expect_error(sd3 + " --prompt-embeds " + (tmp / "absent.safetensors") + " --clip-skip 1",
                 "--clip-skip applies to --prompt");
    expect_error(" --model " + fixture("pixart_pipeline") + " --prompt a --sigmas 1,0.5",
                 "DPMSolverMultistepScheduler: custom sigmas are not supported");
    expect_error(" --model " + fixture("pixart_pipeline") + " --prompt a --timesteps 999,x", "--timesteps: 'x' is not");
    expect_error(" --model " + fixture("pixart_pipeline") + " --prompt a --timesteps 999,500.5",
                 "timesteps[1] is 500.5: this scheduler's timesteps are integers");
    expect_error(sd3 + " --prompt a --timesteps 999,500", "custom timesteps apply to PixArt");
    expect_error(sd3 + " --prompt a --eta 1", "eta applies to the PixArt pipelines");
    expect_error(" --class-labels 1 --timesteps 999,500", "--timesteps does not apply");
    std::ofstream(tmp / "prompts.txt") << "a cat\na dog\n";
    expect_error(sd3 + " --prompt-file " + (tmp / "prompts.txt") + " --negative-prompt x --negative-prompt y",
                 "--prompt-file: give --negative-prompt once");
}

// Every float flag of the table, for every family: NaN, the infinities and a value past each end of its range stop
// with one line naming the flag, before the model is read, and write nothing (issue 46: --guidance nan ran on the
// built-in DiT and wrote a PNG).
TEST_CASE("kiln generate: every float flag refuses NaN, infinities and values out of its range, for every family",
          "[apps][generate]") {
    Tmp tmp("kiln_gen_float");
    const std::string png = tmp / "out.png";
    const std::vector<std::string> models = {"", " --model " + fixture("sd3_pipeline") + " --prompt a",
                                             " --model " + fixture("pixart_pipeline") + " --prompt a",
                                             " --model " + fixture("flux_pipeline") + " --prompt a",
                                             " --model " + fixture("sana_pipeline") + " --prompt a"};
    int rows = 0;
    for (const app::GenerateFlag& row : app::generate_flags()) {
        const auto* ff = std::get_if<app::FloatFlag>(&row.target);
        if (!ff) continue;
        ++rows;
        std::string flag = row.names;
        flag = flag.substr(flag.find("--"));
        flag = flag.substr(0, flag.find(','));
        const models::FloatRange& range = models::float_range(ff->range);
        std::vector<std::string> bad = {"nan", "inf", "-inf"};
        char buf[64];
        if (std::isfinite(range.lo))
            bad.push_back(range.lo_open ? std::to_string(range.lo) : std::to_string(range.lo - 1));
        if (std::isfinite(range.hi)) std::snprintf(buf, sizeof buf, "%g", range.hi + 1), bad.push_back(buf);
        for (const std::string& model : models)
            for (const std::string& v : bad) {
                Result r = generate(tmp, model + " " + flag + "=" + v + " -o " + png);  // "=": -inf is a value
                INFO(model << " " << flag << " " << v << "\n" << r.err);
                CHECK(r.rc == 1);
                CHECK(r.err.find("kiln: error: " + flag + " is ") != std::string::npos);
                CHECK(r.err.find(std::isfinite(std::strtod(v.c_str(), nullptr))
                                     ? ": outside "
                                     : ": not a finite number") != std::string::npos);
                CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
                CHECK(!fs::exists(png));
            }
    }
    // --guidance, --true-cfg, --cfg-truncation, --cfg-normalization, --eta, --skip-layer-guidance-{scale,start,stop},
    // --strength
    CHECK(rows == 9);
    // The lists of numbers, element by element, as the C API checks them.
    const std::string sd3 = " --model " + fixture("sd3_pipeline") + " --prompt a";
    for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
             {sd3 + " --sigmas 1,nan", "sigmas[1] is nan: not a finite number"},
             {" --model " + fixture("pixart_pipeline") + " --prompt a --timesteps 999,inf",
              "timesteps[1] is inf: not a finite number"},
             {" --model " + fixture("pixart_pipeline") + " --prompt a --timesteps 999,-1",
              "timesteps[1] is -1: outside [0, inf)"}}) {
        Result r = generate(tmp, args + " -o " + png);
        INFO(args << "\n" << r.err);
        CHECK(r.rc == 1);
        CHECK(r.err.find(needle) != std::string::npos);
        CHECK(!fs::exists(png));
    }
}

TEST_CASE("kiln generate --negative-prompt per prompt, --prompt-2, --prompt-3: each text reaches its encoder",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    const std::string sd3 = "--model " + fixture("sd3_pipeline") + " --steps 1 ";
    auto run = [&](const std::string& args, const std::string& name) {
        Result r = generate(tmp, sd3 + args + " --dump " + (tmp / (name + ".safetensors")) + " -o " +
                                     (tmp / (name + ".png")) + " --grid");
        INFO(args << "\n" << r.err);
        REQUIRE(r.rc == 0);
        return SafeTensors::open(tmp / (name + ".safetensors"));
    };
    const std::string lists =
        "--prompt 'a cat' --prompt 'a dog' --negative-prompt blurry --negative-prompt dark --prompt-2 'an owl' "
        "--prompt-3 'a red barn' --negative-prompt-3 'low quality'";
    auto a = run(lists, "a");
    auto host = run(lists + " --host-loop", "host");  // the loop on the host instead of the device
    // The negative texts as prompts (no guidance): the same token rows.
    auto b = run("--prompt blurry --prompt dark --prompt-3 'low quality' --guidance 1", "b");
    auto ids = [](const SafeTensors& st, const std::string& name) {
        INFO(name);
        REQUIRE(st.find(name));
        return st.read(name);
    };
    for (const std::string enc : {"text_encoder", "text_encoder_2", "text_encoder_3"}) {
        INFO(enc);
        CHECK(ids(a, enc + "_negative_input_ids").bytes == ids(b, enc + "_input_ids").bytes);
        CHECK(ids(host, enc + "_negative_input_ids").bytes == ids(b, enc + "_input_ids").bytes);
    }
    auto rows_equal = [](const Tensor& t) {
        const size_t half = t.bytes.size() / 2;
        return std::equal(t.bytes.begin(), t.bytes.begin() + half, t.bytes.begin() + half);
    };
    CHECK(rows_equal(ids(a, "text_encoder_2_input_ids")));     // one --prompt-2 for both prompts
    CHECK(rows_equal(ids(a, "text_encoder_3_input_ids")));     // one --prompt-3
    CHECK(!rows_equal(ids(a, "text_encoder_input_ids")));      // CLIP-L: the two prompts
    CHECK(ids(a, "image").bytes == ids(host, "image").bytes);  // device loop and host loop: the same bits
    std::ifstream png(tmp / "a.png", std::ios::binary);
    const std::string file(std::istreambuf_iterator<char>(png), {});
    CHECK(file.find("negative=blurry | dark") != std::string::npos);  // the settings, in a tEXt chunk
    CHECK(file.find("prompt_3=a red barn") != std::string::npos);
}

TEST_CASE("kiln generate --images N: the prompts or labels repeated, each N times in a row",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    auto image = [&](const std::string& args, const std::string& name) {
        Result r = generate(tmp, args + " --steps 2 --seed 3 --dump " + (tmp / (name + ".safetensors")) + " -o " +
                                     (tmp / (name + ".png")));
        INFO(args << "\n" << r.err);
        REQUIRE(r.rc == 0);
        return std::make_pair(SafeTensors::open(tmp / (name + ".safetensors")).read("image"), r.err);
    };
    // Class labels: 1,7 twice each is 1,1,7,7.
    auto [dit_rep, dit_err] = image("--class-labels 1,7 --images 2", "dit_rep");
    auto [dit_list, dit_list_err] = image("--class-labels 1,1,7,7", "dit_list");
    CHECK(dit_rep.shape[0] == 4);
    auto [dit_host, dit_host_err] = image("--class-labels 1,7 --images 2 --host-loop", "dit_host");  // host loop
    CHECK(dit_rep.bytes == dit_list.bytes);
    CHECK(dit_host.bytes == dit_list.bytes);
    CHECK(dit_host_err.find("4 image(s)") != std::string::npos);
    CHECK(fs::exists(tmp / "dit_rep-3.png"));
    // Prompts, on the device loop and on the host loop (--host-loop): encoded once, two prompts.
    const std::string sd3 = "--model " + fixture("sd3_pipeline");
    auto [rep, rep_err] = image(sd3 + " --prompt 'a cat' --prompt 'a dog' --images 2", "sd3_rep");
    auto [list, list_err] =
        image(sd3 + " --prompt 'a cat' --prompt 'a cat' --prompt 'a dog' --prompt 'a dog'", "sd3_list");
    auto [host, host_err] = image(sd3 + " --prompt 'a cat' --prompt 'a dog' --images 2 --host-loop", "sd3_host");
    CHECK(rep.shape[0] == 4);
    CHECK(rep.bytes == list.bytes);
    CHECK(host.bytes == list.bytes);
    CHECK(rep_err.find("text: 2 prompt(s)") != std::string::npos);
    CHECK(rep_err.find("2 images per prompt") != std::string::npos);
    CHECK(list_err.find("text: 4 prompt(s)") != std::string::npos);
    // Out of range: stopped before the model is read.
    Result bad = generate(tmp, "--images 0 --model " + (tmp / "absent.kiln") + " -o " + (tmp / "x.png"));
    CHECK(bad.rc == 1);
    CHECK(bad.err.find("kiln: error: --images 0 (1..1000)") != std::string::npos);
}

TEST_CASE("kiln generate --true-cfg: Flux's classifier-free guidance with a negative prompt, as diffusers",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    const std::string flux = "--model " + fixture("flux_pipeline") + " --prompt 'a castle' --steps 1 ";
    auto run = [&](const std::string& args, const std::string& name) {
        Result r = generate(
            tmp, flux + args + " --dump " + (tmp / (name + ".safetensors")) + " -o " + (tmp / (name + ".png")));
        INFO(args << "\n" << r.err);
        REQUIRE(r.rc == 0);
        return std::make_pair(SafeTensors::open(tmp / (name + ".safetensors")), r.err);
    };
    auto [plain, plain_err] = run("", "plain");
    auto [cfg, cfg_err] = run("--negative-prompt blurry --true-cfg 4", "cfg");
    // Two transformer rows per image (negative, prompt); the negative encoded; a different image.
    CHECK(cfg.read("step0_transformer_out").shape[0] == 2);
    CHECK(plain.read("step0_transformer_out").shape[0] == 1);
    CHECK(cfg.find("negative_prompt_embeds"));
    CHECK(cfg.read("image").bytes != plain.read("image").bytes);
    CHECK(cfg_err.find("warning") == std::string::npos);
    CHECK(cfg_err.find("guidance 3.50, true CFG 4.00") != std::string::npos);
    std::ifstream png(tmp / "cfg.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("true_cfg=4") != std::string::npos);
    // As diffusers: no negative prompt, no CFG; a negative prompt without --true-cfg > 1 is ignored. Both warn and
    // give the plain image.
    auto [no_neg, no_neg_err] = run("--true-cfg 4", "no_neg");
    CHECK(no_neg_err.find("without a negative prompt: no classifier-free guidance") != std::string::npos);
    CHECK(no_neg.read("image").bytes == plain.read("image").bytes);
    auto [no_cfg, no_cfg_err] = run("--negative-prompt blurry", "no_cfg");
    CHECK(no_cfg_err.find("only with --true-cfg > 1") != std::string::npos);
    CHECK(no_cfg.read("image").bytes == plain.read("image").bytes);
    // diffusers' has_neg_prompt counts negative_prompt only: negative_prompt_2 alone (T5's negative text) does not
    // turn CFG on; with negative_prompt it replaces what T5 reads, so the image differs from cfg's.
    auto [neg2, neg2_err] = run("--negative-prompt-2 blurry --true-cfg 4", "neg2");
    CHECK(neg2_err.find("--negative-prompt-2 alone does not turn it on") != std::string::npos);
    CHECK(neg2.read("step0_transformer_out").shape[0] == 1);
    CHECK(neg2.read("image").bytes == plain.read("image").bytes);
    auto [both, both_err] = run("--negative-prompt blurry --negative-prompt-2 dark --true-cfg 4", "both");
    CHECK(both_err.find("warning") == std::string::npos);
    CHECK(both.read("step0_transformer_out").shape[0] == 2);
    CHECK(both.read("negative_pooled_prompt_embeds").bytes == cfg.read("negative_pooled_prompt_embeds").bytes);
    CHECK(both.read("negative_prompt_embeds").bytes != cfg.read("negative_prompt_embeds").bytes);
    // From --prompt-embeds: CFG where the file holds both negative embeddings (the dumps hold Kiln's own).
    const std::string base = "--model " + fixture("flux_pipeline") + " --steps 1 --true-cfg 4 --prompt-embeds ";
    auto embeds = [&](const std::string& file, const std::string& name) {
        Result r = generate(
            tmp, base + (tmp / file) + " --dump " + (tmp / (name + ".safetensors")) + " -o " + (tmp / (name + ".png")));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        return std::make_pair(SafeTensors::open(tmp / (name + ".safetensors")).read("image"), r.err);
    };
    auto [from_cfg, from_cfg_err] = embeds("cfg.safetensors", "embeds_cfg");
    CHECK(from_cfg.bytes == cfg.read("image").bytes);
    auto [from_plain, from_plain_err] = embeds("plain.safetensors", "embeds_plain");
    CHECK(from_plain_err.find("no classifier-free guidance") != std::string::npos);
    CHECK(from_plain.bytes == plain.read("image").bytes);
}

TEST_CASE("kiln generate --sigmas: the schedule before the shift, the step count from it", "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    Result r = generate(tmp, "--model " + fixture("sd3_pipeline") + " --prompt 'a cat' --sigmas 1,0.5 --dump " +
                                 (tmp / "d.safetensors") + " -o " + (tmp / "s.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find(", 2 steps,") != std::string::npos);
    auto d = SafeTensors::open(tmp / "d.safetensors");
    CHECK(d.read("timesteps").to_f32() == std::vector<float>{1000.f, 750.f});  // shift 3: 0.5 -> 0.75
    std::ifstream png(tmp / "s.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("sigmas=1,0.5") != std::string::npos);
}

TEST_CASE("kiln generate --timesteps: PixArt's schedule from the caller, the step count from it",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    Result r =
        generate(tmp, "--model " + fixture("pixart_pipeline") + " --prompt 'a cat' --timesteps 999,600,250 --dump " +
                          (tmp / "d.safetensors") + " -o " + (tmp / "t.png"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find(", 3 steps,") != std::string::npos);
    auto d = SafeTensors::open(tmp / "d.safetensors");
    CHECK(d.read("timesteps").to_f32() == std::vector<float>{999.f, 600.f, 250.f});
    std::ifstream png(tmp / "t.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("timesteps=999,600,250") != std::string::npos);
}

TEST_CASE("kiln generate --eta: DDIM's noise per step on PixArt; other schedulers ignore it with a warning",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    auto run = [&](const std::string& args, const std::string& name) {
        Result r = generate(tmp, "--model " + fixture("pixart_pipeline") + " --prompt 'a cat' --steps 2 " + args +
                                     " --dump " + (tmp / (name + ".safetensors")) + " -o " + (tmp / (name + ".png")));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        return r;
    };
    run("--scheduler ddim", "plain");
    Result r = run("--scheduler ddim --eta 1", "eta");
    CHECK(r.err.find("warning") == std::string::npos);
    auto plain = SafeTensors::open(tmp / "plain.safetensors"), eta = SafeTensors::open(tmp / "eta.safetensors");
    CHECK(eta.find("step1_variance_noise"));
    CHECK(eta.read("image").bytes != plain.read("image").bytes);
    std::ifstream png(tmp / "eta.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("eta=1.0") != std::string::npos);
    r = run("--eta 1", "dpm");
    CHECK(r.err.find("eta applies to DDIMScheduler; DPMSolverMultistepScheduler ignores it") != std::string::npos);
}

TEST_CASE("kiln generate --scheduler-config: diffusers' from_config overrides, recorded in the PNG",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    auto run = [&](const std::string& args, const std::string& name) {
        Result r = generate(tmp, "--class-labels 1 --steps 6 " + args + " --dump " + (tmp / (name + ".safetensors")) +
                                     " -o " + (tmp / (name + ".png")));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        return SafeTensors::open(tmp / (name + ".safetensors")).read("image");
    };
    const Tensor plain = run("", "plain");
    const Tensor karras = run("--scheduler-config use_karras_sigmas=true", "karras");
    CHECK(karras.bytes != plain.bytes);
    std::ifstream png(tmp / "karras.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("scheduler_config={\"use_karras_sigmas\":true}") !=
          std::string::npos);
    // Euler ancestral and DPM-Solver++ SDE draw per-step noise from the seed: another seed, another image.
    for (const char* args : {"--scheduler euler_a", "--scheduler-config algorithm_type=sde-dpmsolver++"}) {
        INFO(args);
        CHECK(run(std::string(args) + " --seed 1", "s1").bytes != run(std::string(args) + " --seed 2", "s2").bytes);
    }
    for (auto [args, needle] :
         {std::pair{"--scheduler-config use_karas_sigmas=true",
                    "'use_karas_sigmas' is not a field this scheduler reads"},
          std::pair{"--scheduler-config karras", "--scheduler-config 'karras': expected KEY=VALUE"}}) {
        Result r = generate(tmp, std::string("--class-labels 1 ") + args + " -o " + (tmp / "bad.png"));
        CHECK(r.rc != 0);
        CHECK(r.err.find(needle) != std::string::npos);
    }
}

TEST_CASE("kiln generate --clip-skip: SD3's prompts encoded from an earlier CLIP layer", "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    auto run = [&](const std::string& args, const std::string& name) {
        Result r = generate(tmp, "--model " + fixture("sd3_pipeline") + " --prompt 'a cat' --steps 1 " + args +
                                     " --dump " + (tmp / (name + ".safetensors")) + " -o " + (tmp / (name + ".png")));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        return SafeTensors::open(tmp / (name + ".safetensors"));
    };
    auto plain = run("", "plain"), skip = run("--clip-skip 1", "skip");
    CHECK(skip.find("text_encoder_clip_skip_hidden_state"));
    CHECK(!plain.find("text_encoder_clip_skip_hidden_state"));
    CHECK(skip.read("prompt_embeds").bytes != plain.read("prompt_embeds").bytes);
    CHECK(skip.read("negative_prompt_embeds").bytes == plain.read("negative_prompt_embeds").bytes);
    CHECK(skip.read("image").bytes != plain.read("image").bytes);
    std::ifstream png(tmp / "skip.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("clip_skip=1") != std::string::npos);
}

TEST_CASE("kiln generate --skip-guidance-layers: SD3's skip-layer guidance in its window of steps",
          "[apps][generate][vulkan]") {
    Tmp tmp("kiln_gen");
    auto run = [&](const std::string& args, const std::string& name) {
        Result r = generate(tmp, "--model " + fixture("sd3_pipeline") + " --prompt 'a cat' --steps 3 " + args +
                                     " --dump " + (tmp / (name + ".safetensors")) + " -o " + (tmp / (name + ".png")));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        return std::make_pair(SafeTensors::open(tmp / (name + ".safetensors")), r.err);
    };
    auto [plain, plain_err] = run("", "plain");
    // 3 steps, start 0, stop 0.5: 0 < i < 1.5, step 1 only.
    auto [slg, slg_err] =
        run("--skip-guidance-layers 0 --skip-layer-guidance-start 0 --skip-layer-guidance-stop 0.5", "slg");
    CHECK(slg.find("step1_skip_layers_out"));
    CHECK(!slg.find("step0_skip_layers_out"));
    CHECK(!slg.find("step2_skip_layers_out"));
    CHECK(slg.read("step0_noise_pred").bytes == plain.read("step0_noise_pred").bytes);
    CHECK(slg.read("step1_noise_pred").bytes != plain.read("step1_noise_pred").bytes);
    CHECK(slg_err.find("loop on the host") != std::string::npos);
    std::ifstream png(tmp / "slg.png", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(png), {}).find("skip_guidance_layers=0") != std::string::npos);
    // Not a block, not a number, not SD3: stopped before any work.
    for (auto [args, needle] : std::vector<std::pair<std::string, std::string>>{
             {"--model " + fixture("sd3_pipeline") + " --prompt a --skip-guidance-layers 5", "5 is not a block"},
             {"--model " + fixture("sd3_pipeline") + " --prompt a --skip-guidance-layers 1,x", "'x' is not a block"},
             {"--model " + fixture("flux_pipeline") + " --prompt a --skip-guidance-layers 0",
              "applies to StableDiffusion3Pipeline"}}) {
        Result r = generate(tmp, args + " -o " + (tmp / "bad.png"));
        INFO(args << "\n" << r.err);
        CHECK(r.rc != 0);
        CHECK(r.err.find(needle) != std::string::npos);
    }
}
