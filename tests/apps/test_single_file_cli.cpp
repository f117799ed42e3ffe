// The files people download, through the binaries: Flux in Black Forest Labs' and ComfyUI's layouts and city96's
// GGUF beside ae.safetensors, clip_l and t5xxl; Stability's SD3 single file alone and with separate encoders. Each
// must give what the diffusers folder of the same weights gives (the fixtures' *_singlefile cases, made from
// ../flux_pipeline and ../sd3_pipeline); GGUF files what diffusers gives with the dequantized weights. Then
// kiln-convert of the same files, `kiln info`, and the bad inputs, each one line with nothing written.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "converter/assemble.h"
#include "runtime/core/gguf.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/single_files.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
using Tmp = test::TempDir;

using Result = test::CliResult;

// BINARY ARGS, stdout and stderr captured together (kiln info prints to stdout).
Result run(const Tmp& tmp, const std::string& binary, const std::string& args) {
    return test::run_cli(tmp, binary, args, true);
}

std::string fixture(const std::string& name) { return test::data_path("fixtures/" + name); }
// The single files: the safetensors made from the diffusers folders (tests/support/single_files.h), the GGUF committed.
std::string flux_file(const std::string& f) { return test::single_file("flux", f); }
std::string sd3_file(const std::string& f) { return test::single_file("sd3", f); }

// The call of a pipeline fixture (../<name>/io.json) with its latents, dumping the intermediates to `dump`.
std::string call(const std::string& name, const std::string& dump) {
    std::ifstream f(fixture(name) + "/io.json");
    const auto j = nlohmann::json::parse(f);
    const auto& s = j["call"]["scalars"];
    std::string args = " --latents " + fixture(name) + "/io.safetensors";
    for (auto& p : j["prompt"]) args += " --prompt '" + p.get<std::string>() + "'";
    return args + " --steps " + std::to_string(s["num_inference_steps"].get<int>()) + " --guidance " +
           std::to_string(s["guidance_scale"].get<double>()) + " --width " + std::to_string(s["width"].get<int>()) +
           " --height " + std::to_string(s["height"].get<int>()) + " --dump " + dump + " -o " + dump + ".png";
}

// Every tensor of `ref` is in `got`, byte for byte.
void check_identical(const std::string& got_path, const std::string& ref_path) {
    auto got = SafeTensors::open(got_path), ref = SafeTensors::open(ref_path);
    REQUIRE(got.tensors().size() == ref.tensors().size());
    for (auto& t : ref.tensors()) {
        INFO(t.name);
        REQUIRE(got.find(t.name));
        const Tensor a = got.read(t.name), b = ref.read(t.name);
        CHECK(a.shape == b.shape);
        CHECK(a.bytes == b.bytes);
    }
}

// The folder's run of a pipeline fixture, made once per test process.
const std::string& folder_dump(const std::string& name) {
    static std::map<std::string, std::string> dumps;
    static Tmp tmp("kiln_sf_folder");
    auto it = dumps.find(name);
    if (it != dumps.end()) return it->second;
    const std::string dump = tmp / (name + ".safetensors");
    Result r = run(tmp, "kiln", "generate --model " + fixture(name) + call(name, dump));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    return dumps[name] = dump;
}

const std::string kFluxRest = " --vae " + flux_file("ae.safetensors") + " --clip-l " + flux_file("clip_l.safetensors") +
                              " --t5xxl " + flux_file("t5xxl.safetensors");
}  // namespace

TEST_CASE("Flux single files give the diffusers folder's outputs, bitwise", "[apps][single_file][vulkan]") {
    // The same weights (bitwise, fixtures' proof) in the same graph: the same bytes, with --config the folder's.
    const std::string file = GENERATE(as<std::string>{}, "flux1-tiny.safetensors", "flux1-tiny-comfy.safetensors");
    Tmp tmp("kiln_sf");
    const std::string dump = tmp / "dump.safetensors";
    Result r = run(tmp, "kiln",
                   "generate --diffusion-model " + flux_file(file) + kFluxRest + " --config " +
                       fixture("flux_pipeline") + call("flux_pipeline", dump));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    check_identical(dump, folder_dump("flux_pipeline"));
}

TEST_CASE("city96 GGUF Flux gives diffusers' outputs with the dequantized weights", "[apps][single_file][vulkan]") {
    const auto [file, expected] =
        GENERATE(table<std::string, std::string>({{"flux1-tiny-Q8_0.gguf", "expected_q8_0.safetensors"},
                                                  {"flux1-tiny-Q4_K_S.gguf", "expected_q4_k_s.safetensors"}}));
    Tmp tmp("kiln_sf");
    const std::string dump = tmp / "dump.safetensors";
    Result r = run(tmp, "kiln",
                   "generate --diffusion-model " + flux_file(file) + kFluxRest + " --config " +
                       fixture("flux_pipeline") + call("flux_pipeline", dump));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    // Q8_0 and F16 weights dequantize exactly to f32 (an f16 scale times an int8, or an f16), which is what
    // diffusers multiplied by; what differs is f32 summation order only, the 1e-4 bound of the folder test
    // (test_generate_cli.cpp) for the same pipeline.
    auto got = SafeTensors::open(dump), ref = SafeTensors::open(flux_file(expected));
    int compared = 0;
    for (auto& t : ref.tensors()) {
        if (!got.find(t.name) || t.name == "latents_init") continue;
        INFO(file << " " << t.name);
        const Tensor a = got.read(t.name), b = ref.read(t.name);
        REQUIRE(a.shape == b.shape);
        if (b.dtype == DType::i64)
            CHECK(a.to_f32() == b.to_f32());
        else
            CHECK(rel_l2(a.to_f32(), b.to_f32()) <= 1e-4);
        ++compared;
    }
    CHECK(compared >= 10);
}

TEST_CASE("Stability's SD3 single file, alone and with separate encoders", "[apps][single_file][vulkan]") {
    Tmp tmp("kiln_sf");
    const std::string all = tmp / "all.safetensors", parts = tmp / "parts.safetensors";
    const std::string cfg = " --config " + fixture("sd3_pipeline");
    Result r =
        run(tmp, "kiln", "generate --model " + sd3_file("sd3-tiny.safetensors") + cfg + call("sd3_pipeline", all));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    check_identical(all, folder_dump("sd3_pipeline"));
    // The encoders from their own files (SAI's text_encoders/*.safetensors) override the single file's.
    r = run(tmp, "kiln",
            "generate --model " + sd3_file("sd3-tiny.safetensors") + " --clip-l " + sd3_file("clip_l.safetensors") +
                " --clip_g " + sd3_file("clip_g.safetensors") + " --t5xxl " + sd3_file("t5xxl.safetensors") + cfg +
                call("sd3_pipeline", parts));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    check_identical(parts, folder_dump("sd3_pipeline"));
}

// Issue 46: a --diffusion-model file that holds the VAE too (Stability's sd3_medium_incl_clips.safetensors) gives
// it: `also needs a VAE (--vae)` was asked for a file already given. The log says where the VAE came from.
TEST_CASE("A --diffusion-model file holding a VAE gives the VAE", "[apps][single_file]") {
    const std::string sd3 = sd3_file("sd3-tiny.safetensors");
    converter::ComponentFiles f;
    f.diffusion_model = sd3;
    f.config = fixture("sd3_pipeline");
    converter::Assembly a = converter::assemble(f);
    const converter::Part* vae = a.find("vae");
    REQUIRE(vae);
    CHECK(vae->path == sd3);
    CHECK(vae->from == converter::Part::From::layout_file);
    REQUIRE(a.notes.size() == 1);
    CHECK(a.notes[0].find("the VAE from sd3-tiny.safetensors") != std::string::npos);
    // What is still missing is the encoders, not the VAE (the file's encoders come only with --model).
    CHECK(a.incomplete().find("VAE") == std::string::npos);
    CHECK(a.incomplete().find("(--clip-l)") != std::string::npos);
    // --vae names the VAE: no note, the flag's file.
    f.vae = sd3;
    a = converter::assemble(f);
    CHECK(a.notes.empty());
    REQUIRE(a.find("vae"));
    // A transformer file without a VAE gives none (Flux's BFL file).
    converter::ComponentFiles flux;
    flux.diffusion_model = flux_file("flux1-tiny.safetensors");
    flux.config = fixture("flux_pipeline");
    a = converter::assemble(flux);
    CHECK_FALSE(a.find("vae"));
    CHECK(a.incomplete().find("a VAE (--vae)") != std::string::npos);
}

TEST_CASE("kiln generate --diffusion-model with the VAE inside: the folder's outputs, and the log says so",
          "[apps][single_file][vulkan]") {
    Tmp tmp("kiln_sf");
    const std::string dump = tmp / "dm.safetensors";
    Result r =
        run(tmp, "kiln",
            "generate --diffusion-model " + sd3_file("sd3-tiny.safetensors") + " --clip-l " +
                sd3_file("clip_l.safetensors") + " --clip_g " + sd3_file("clip_g.safetensors") + " --t5xxl " +
                sd3_file("t5xxl.safetensors") + " --config " + fixture("sd3_pipeline") + call("sd3_pipeline", dump));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("kiln: the VAE from sd3-tiny.safetensors") != std::string::npos);
    check_identical(dump, folder_dump("sd3_pipeline"));
}

TEST_CASE("kiln-convert bundles single files, configs and tokenizers into a Kiln file that stands alone",
          "[apps][single_file][vulkan]") {
    Tmp tmp("kiln_sf");
    const std::string kiln_file = tmp / "flux.kiln", dump = tmp / "dump.safetensors";
    Result r = run(tmp, "kiln-convert",
                   "--diffusion-model " + flux_file("flux1-tiny.safetensors") + kFluxRest + " --config " +
                       fixture("flux_pipeline") + " --dtype f32 -o " + kiln_file);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    // No --config now: everything comes from the file; f32 storage keeps every weight's bits.
    r = run(tmp, "kiln", "generate --model " + kiln_file + call("flux_pipeline", dump));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    check_identical(dump, folder_dump("flux_pipeline"));
    // SD3's single file converts the same way.
    r = run(tmp, "kiln-convert",
            sd3_file("sd3-tiny.safetensors") + " --config " + fixture("sd3_pipeline") + " -o " + (tmp / "sd3.kiln"));
    INFO(r.err);
    CHECK(r.rc == 0);
    r = run(tmp, "kiln", "info " + (tmp / "sd3.kiln"));
    CHECK(r.err.find("text_encoder_3") != std::string::npos);
}

TEST_CASE("kiln info names a single file's components, layouts and types", "[apps][single_file]") {
    Tmp tmp("kiln_sf");
    const auto [file, expect] = GENERATE(table<std::string, std::string>({
        {flux_file("flux1-tiny.safetensors"), "transformer: flux, bfl layout"},
        {flux_file("flux1-tiny-comfy.safetensors"), "keys under 'model.diffusion_model.'"},
        {flux_file("flux1-tiny-Q8_0.gguf"), "q8_0 16"},
        {flux_file("ae.safetensors"), "vae: ldm layout"},
        {sd3_file("sd3-tiny.safetensors"), "transformer: sd3, stability layout"},
    }));
    Result r = run(tmp, "kiln", "info " + file);
    INFO(r.err);
    CHECK(r.rc == 0);
    CHECK(r.err.find(expect) != std::string::npos);
}

namespace {
// A copy of `src` with `n` of its tensors left out (a truncated download, a wrong export).
void drop_tensors(const std::string& src, const std::string& dst, size_t n) {
    auto st = SafeTensors::open(src);
    std::vector<std::pair<std::string, Tensor>> keep;
    for (size_t i = n; i < st.tensors().size(); ++i)
        keep.push_back({st.tensors()[i].name, st.read(st.tensors()[i].name)});
    write_safetensors(dst, keep);
}

// Bytes of a file with every occurrence of `from` replaced by `to` (same length): a GGUF's architecture string.
void patch_bytes(const std::string& src, const std::string& dst, const std::string& from, const std::string& to) {
    std::ifstream in(src, std::ios::binary);
    std::string b(std::istreambuf_iterator<char>(in), {});
    for (size_t p = b.find(from); p != std::string::npos; p = b.find(from, p + 1)) b.replace(p, from.size(), to);
    std::ofstream(dst, std::ios::binary) << b;
}
}  // namespace

TEST_CASE("Bad single-file inputs stop with one line and write nothing", "[apps][single_file]") {
    static Tmp tmp("kiln_sf_bad");  // static: GENERATE_COPY copies what the rows use
    {                               // a LoRA and an optimizer state, as people mistake them for models
        write_safetensors(tmp / "lora.safetensors",
                          {{"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", Tensor(DType::f32, {4, 32})},
                           {"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", Tensor(DType::f32, {96, 4})},
                           {"lora_unet_double_blocks_0_img_attn_qkv.alpha", Tensor(DType::f32, {})}});
        write_safetensors(tmp / "optim.safetensors", {{"state.0.exp_avg", Tensor(DType::f32, {4, 4})},
                                                      {"state.0.exp_avg_sq", Tensor(DType::f32, {4, 4})}});
    }
    drop_tensors(flux_file("flux1-tiny.safetensors"), tmp / "cut.safetensors", 3);
    patch_bytes(flux_file("flux1-tiny-Q8_0.gguf"), tmp / "arch.gguf", "flux", "phi2");
    const std::string out = " -o " + (tmp / "out.png");
    const std::string cfg = " --config " + fixture("flux_pipeline");
    const auto [args, expect] = GENERATE_REF(table<std::string, std::string>({
        {"--diffusion-model " + (tmp / "lora.safetensors") + kFluxRest + cfg, "LoRA"},
        {"--diffusion-model " + (tmp / "optim.safetensors") + kFluxRest + cfg, "optimizer"},
        {"--diffusion-model " + (tmp / "cut.safetensors") + kFluxRest + cfg, "missing tensor(s) [3]"},
        {"--diffusion-model " + (tmp / "arch.gguf") + kFluxRest + cfg, "phi2"},
        // a component of the wrong kind for its flag
        {"--diffusion-model " + flux_file("flux1-tiny.safetensors") + " --vae " + flux_file("clip_l.safetensors") +
             " --clip-l " + flux_file("clip_l.safetensors") + " --t5xxl " + flux_file("t5xxl.safetensors") + cfg,
         "given as --vae but holds a CLIP"},
        // components of different models: SD3's file (its VAE has Flux's shapes) as Flux's VAE, Flux's T5
        // (d_model 48) beside SD3 (64), a Flux config for SD3
        {"--diffusion-model " + flux_file("flux1-tiny.safetensors") + " --vae " + sd3_file("sd3-tiny.safetensors") +
             " --clip-l " + flux_file("clip_l.safetensors") + " --t5xxl " + flux_file("t5xxl.safetensors") + cfg,
         "given as --vae but it is a Stable Diffusion 3 file"},
        {"--model " + sd3_file("sd3-tiny.safetensors") + " --t5xxl " + flux_file("t5xxl.safetensors") + " --config " +
             fixture("sd3_pipeline"),
         "hidden size is 48"},
        {"--model " + sd3_file("sd3-tiny.safetensors") + cfg, "--config is a FluxPipeline"},
        // a transformer Kiln has no published config for, and a pipeline without its T5
        {"--diffusion-model " + flux_file("flux1-tiny.safetensors") + kFluxRest, "pass --config DIR"},
        {"--diffusion-model " + flux_file("flux1-tiny.safetensors") + " --vae " + flux_file("ae.safetensors") +
             " --clip-l " + flux_file("clip_l.safetensors") + cfg,
         "(--t5xxl)"},
        {"--diffusion-model " + flux_file("expected_q8_0.safetensors") + kFluxRest + cfg, "no layout Kiln reads"},
    }));
    Result r = run(tmp, "kiln", "generate --prompt a " + args + out);
    INFO(args << "\n" << r.err);
    CHECK(r.rc != 0);
    CHECK(r.err.find(expect) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!fs::exists(tmp / "out.png"));
    // kiln-convert refuses the same, leaving no output; a pipeline without its T5 is a partial file it may write.
    if (expect == "(--t5xxl)") return;
    Result c = run(tmp, "kiln-convert", args + " -o " + (tmp / "out.kiln"));
    INFO(c.err);
    CHECK(c.rc != 0);
    CHECK(c.err.find(expect) != std::string::npos);
    CHECK(!fs::exists(tmp / "out.kiln"));
    CHECK(!fs::exists(tmp / "out.kiln.tmp"));
}

TEST_CASE("--config without tokenizers names them; --tokenizers gives them", "[apps][single_file][vulkan]") {
    Tmp tmp("kiln_sf");
    const fs::path cfg = fs::path(tmp.path) / "configs";  // the pipeline's JSON files only, as some people keep them
    for (const char* c : {"transformer", "vae", "scheduler", "text_encoder", "text_encoder_2"}) {
        fs::create_directories(cfg / c);
        for (auto& e : fs::directory_iterator(fixture("flux_pipeline") + "/" + c))
            if (e.path().extension() == ".json") fs::copy(e.path(), cfg / c / e.path().filename());
    }
    fs::copy(fixture("flux_pipeline") + "/model_index.json", cfg / "model_index.json");
    const std::string files =
        "--diffusion-model " + flux_file("flux1-tiny.safetensors") + kFluxRest + " --config " + cfg.string();
    Result r = run(tmp, "kiln", "generate --prompt a " + files + " -o " + (tmp / "a.png"));
    INFO(r.err);
    CHECK(r.rc != 0);
    CHECK(r.err.find("no tokenizer folder tokenizer/, tokenizer_2/") != std::string::npos);
    CHECK(!fs::exists(tmp / "a.png"));
    const std::string dump = tmp / "dump.safetensors";
    r = run(tmp, "kiln",
            "generate " + files + " --tokenizers " + fixture("flux_pipeline") + call("flux_pipeline", dump));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    check_identical(dump, folder_dump("flux_pipeline"));
}

TEST_CASE("kiln forward takes the component flags: the transformer from a BFL file, as from the folder",
          "[apps][single_file][vulkan]") {
    // Step-0-shaped inputs (io.safetensors' latents and embeddings) through the transformer alone, from the folder and
    // from the BFL file (the same weights): the same bytes.
    Tmp tmp("kiln_sf");
    auto io = SafeTensors::open(fixture("flux_pipeline") + "/io.safetensors");
    const int64_t n = io.at("step0_latents").shape[1];
    Tensor img_ids(DType::f32, {n, 3});
    const int64_t side = (int64_t)std::lround(std::sqrt((double)n));
    for (int64_t i = 0; i < n; ++i) {  // FluxPipeline._prepare_latent_image_ids: (0, row, column)
        img_ids.data<float>()[i * 3 + 0] = 0;
        img_ids.data<float>()[i * 3 + 1] = (float)(i / side);
        img_ids.data<float>()[i * 3 + 2] = (float)(i % side);
    }
    Tensor t(DType::f32, {1}), g(DType::f32, {1});
    t.data<float>()[0] = io.read("timesteps").data<float>()[0] / 1000.f;
    g.data<float>()[0] = 3.5f;
    write_safetensors(tmp / "in.safetensors", {{"hidden_states", io.read("step0_latents")},
                                               {"encoder_hidden_states", io.read("prompt_embeds")},
                                               {"pooled_projections", io.read("pooled_prompt_embeds")},
                                               {"timestep", t},
                                               {"guidance", g},
                                               {"img_ids", img_ids},
                                               {"txt_ids", io.read("text_ids")}});
    const std::string common = " --component transformer --inputs " + (tmp / "in.safetensors") + " --output ";
    Result r = run(tmp, "kiln", "forward --model " + fixture("flux_pipeline") + common + (tmp / "folder.safetensors"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    r = run(tmp, "kiln",
            "forward --diffusion-model " + flux_file("flux1-tiny.safetensors") + " --config " +
                fixture("flux_pipeline") + common + (tmp / "bfl.safetensors"));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    check_identical(tmp / "bfl.safetensors", tmp / "folder.safetensors");
}
