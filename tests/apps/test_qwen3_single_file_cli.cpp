// Z-Image and FLUX.2 [klein] from the single files people download, through `kiln generate`: the transformer in its
// original layout (Z-Image's / ComfyUI's keys, BFL's), the VAE in the LDM layout (FLUX.1's ae.safetensors, FLUX.2's
// flux2-vae.safetensors) and the Qwen3 encoder in transformers' or llama.cpp's names, all written from the tiny
// diffusers pipelines (tests/support/original_layouts.h), must give the folder's image and intermediates byte for
// byte (and so must kiln-convert's Kiln file of them); the assembly must hand the models the folder's tensors bitwise;
// the mistakes people make stop with one line.
#include <catch2/catch.hpp>
#include <filesystem>

#include "converter/assemble.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/original_layouts.h"
#include "tests/support/single_files.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

using Tmp = test::TempDir;

std::string fixture(const std::string& c) { return test::data_path("fixtures/" + c + "_pipeline"); }

// The single files of pipeline c ("z_image" or "flux2_klein") in `dir`: transformer, VAE and Qwen3 encoder.
struct Files {
    std::string transformer, vae, llm;
};
Files write_files(const Tmp& dir, const std::string& c, bool comfy, bool gguf) {
    Files f{dir / (c + "_transformer.safetensors"), dir / (c + "_vae.safetensors"),
            dir / (c + (gguf ? "_qwen3.gguf" : "_qwen3.safetensors"))};
    const std::string prefix = comfy ? "model.diffusion_model." : "";
    if (c == "z_image")
        test::write_z_image_original(f.transformer, prefix);
    else
        test::write_flux2_bfl(f.transformer, prefix);
    test::write_vae_ldm(c, f.vae);
    if (gguf)
        test::write_qwen3_gguf(c, f.llm, DType::f32);
    else
        test::write_qwen3_transformers(c, f.llm, comfy, comfy);
    return f;
}

// Both runs of a pipeline fixture's generation, the same seed: two prompts, CFG on (Z-Image guides above 0, the
// klein fixture is not distilled), a size of the fixture's.
std::string call(const std::string& c, const std::string& dump) {
    return std::string(" --prompt 'a red fox' --prompt 'a cat on a windowsill' --seed 11 --steps 2") +
           (c == "z_image" ? " --guidance 4 --width 32 --height 32" : " --guidance 3 --width 32 --height 32") +
           " --dump " + dump + " -o " + dump + ".png";
}

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

std::string read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace

TEST_CASE("Z-Image / klein single files assemble into the folder's tensors, bitwise",
          "[apps][single_file][qwen3_single]") {
    const std::string c = GENERATE(as<std::string>{}, "z_image", "flux2_klein");
    const bool gguf = GENERATE(false, true);
    CAPTURE(c, gguf);
    Tmp tmp("kiln_q3sf_asm");
    const Files f = write_files(tmp, c, !gguf, gguf);
    converter::ComponentFiles files;
    files.diffusion_model = f.transformer;
    files.vae = f.vae;
    files.llm = f.llm;
    files.config = fixture(c);
    const converter::Assembly a = converter::assemble(files);
    CHECK(a.incomplete() == "");
    for (const char* comp : {"transformer", "vae", "text_encoder"}) {
        CAPTURE(comp);
        const converter::Part* p = a.find(comp);
        REQUIRE(p);
        CHECK(p->from == converter::Part::From::layout_file);
        const auto set = converter::open_part(*p);
        const SafeTensors ref = SafeTensors::open(
            fixture(c) + "/" + comp + "/" +
            (std::string(comp) == "text_encoder" ? "model.safetensors" : "diffusion_pytorch_model.safetensors"));
        CHECK(set->tensors().size() == ref.tensors().size());
        for (const auto& t : ref.tensors()) {
            INFO(t.name);
            REQUIRE(set->find(t.name));
            CHECK(set->read(t.name).bytes == ref.read(t.name).bytes);
        }
    }
}

TEST_CASE("kiln generate from Z-Image / klein single files gives the folder's image, byte for byte",
          "[apps][single_file][qwen3_single][vulkan]") {
    const std::string c = GENERATE(as<std::string>{}, "z_image", "flux2_klein");
    CAPTURE(c);
    Tmp tmp("kiln_q3sf_gen");
    const std::string ref = tmp / "folder.safetensors";
    test::CliResult r = test::run_cli(tmp, "kiln", "generate --model " + fixture(c) + call(c, ref));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    // ComfyUI's prefixed keys with a transformers Qwen3 (model. + lm_head); the bare keys with a llama.cpp GGUF.
    for (const bool gguf : {false, true}) {
        CAPTURE(gguf);
        const Files f = write_files(tmp, c, !gguf, gguf);
        const std::string dump = tmp / (gguf ? "gguf.safetensors" : "st.safetensors");
        r = test::run_cli(tmp, "kiln",
                          "generate --diffusion-model " + f.transformer + " --vae " + f.vae + " --llm " + f.llm +
                              " --config " + fixture(c) + call(c, dump));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        check_identical(dump, ref);
        CHECK(read_bytes(dump + ".png") == read_bytes(ref + ".png"));
        if (gguf) continue;
        // kiln-convert bundles the same files with the configs and tokenizer; f32 storage keeps every weight's bits,
        // so the Kiln file alone gives the same image again.
        const std::string kiln_file = tmp / (c + ".kiln"), dump2 = tmp / "kiln.safetensors";
        r = test::run_cli(tmp, "kiln-convert",
                          "--diffusion-model " + f.transformer + " --vae " + f.vae + " --llm " + f.llm + " --config " +
                              fixture(c) + " --dtype f32 -o " + kiln_file);
        INFO(r.err);
        REQUIRE(r.rc == 0);
        r = test::run_cli(tmp, "kiln", "generate --model " + kiln_file + call(c, dump2));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        check_identical(dump2, ref);
    }
}

TEST_CASE("Z-Image / klein single-file mistakes stop with one line and write nothing",
          "[apps][single_file][qwen3_single]") {
    static Tmp tmp("kiln_q3sf_bad");  // static: GENERATE_REF's rows use it
    static const Files zi = write_files(tmp, "z_image", false, false);
    static const Files kl = write_files(tmp, "flux2_klein", false, false);
    static const std::string cut = [] {
        const std::string p = tmp / "cut_qwen3.safetensors";
        fs::copy_file(zi.llm, p, fs::copy_options::overwrite_existing);
        fs::resize_file(p, fs::file_size(p) * 2 / 3);  // a download cut short
        return p;
    }();
    const std::string flux = " --diffusion-model " + test::single_file("flux", "flux1-tiny.safetensors") + " --vae " +
                             test::single_file("flux", "ae.safetensors") + " --clip-l " +
                             test::single_file("flux", "clip_l.safetensors") + " --config " + fixture("flux");
    const std::string png = tmp / "out.png";
    const auto [args, expect] = GENERATE_REF(table<std::string, std::string>({
        // a Qwen3 file where a T5 is expected
        {flux + " --t5xxl " + zi.llm, "given as --t5xxl but holds a Qwen3 text encoder, not a T5 text encoder"},
        // klein's transformer with FLUX.1's VAE (Z-Image's), and Z-Image's with FLUX.2's
        {" --diffusion-model " + kl.transformer + " --vae " + zi.vae + " --llm " + kl.llm + " --config " +
             fixture("flux2_klein"),
         "but it is a FLUX.1-style VAE (no latent BatchNorm bn.*); FLUX.2 [klein] needs FLUX.2's VAE"},
        {" --diffusion-model " + zi.transformer + " --vae " + kl.vae + " --llm " + zi.llm + " --config " +
             fixture("z_image"),
         "but it is FLUX.2's VAE"},
        // klein's Qwen3 (16 wide) beside Z-Image (32): an encoder of another model
        {" --diffusion-model " + zi.transformer + " --vae " + zi.vae + " --llm " + kl.llm + " --config " +
             fixture("z_image"),
         "hidden size is 16 where this model's text_encoder has 32"},
        // a truncated file
        {" --diffusion-model " + zi.transformer + " --vae " + zi.vae + " --llm " + cut + " --config " +
             fixture("z_image"),
         "cut_qwen3.safetensors"},
        // a tiny transformer of no published size, without --config
        {" --diffusion-model " + zi.transformer + " --vae " + zi.vae + " --llm " + zi.llm,
         "a Z-Image transformer of a size Kiln has no published config for"},
    }));
    const test::CliResult r = test::run_cli(tmp, "kiln", "generate --prompt a" + args + " -o " + png);
    INFO(args << "\n" << r.err);
    CHECK(r.rc != 0);
    CHECK(r.err.find(expect) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!fs::exists(png));
}
