// Z-Image and FLUX.2 [klein] single files (tests/support/original_layouts.h: the fixture folders re-laid in the
// original projects' keys) read back as the diffusers folders' tensors, bitwise: Z-Image's original and ComfyUI keys,
// FLUX.2's BFL keys, both VAEs in the LDM layout, Qwen3 in transformers' names (under model. or bare) and llama.cpp's
// GGUF names; and the files Kiln must name rather than misread.
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/quant.h"
#include "tests/layouts/layouts_test_util.h"
#include "tests/support/original_layouts.h"

using namespace kiln;
using namespace kiln::test;

namespace {

std::string fixture_file(const std::string& c, const std::string& comp) {
    return data_path("fixtures/" + c + "_pipeline/" + comp + "/" +
                     (comp == "text_encoder" ? "model.safetensors" : "diffusion_pytorch_model.safetensors"));
}

layouts::Detected only(const layouts::FileInfo& info) {  // a copy: callers pass inspect()'s temporary
    REQUIRE(info.components.size() == 1);
    return info.components[0];
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("layouts: Z-Image's original and ComfyUI keys give the diffusers transformer bitwise",
          "[layouts][single_file][z_image]") {
    const std::string prefix = GENERATE(as<std::string>{}, "", "model.diffusion_model.");
    TempDir dir("kiln_layouts_zi");
    const std::string path = dir / "z_image_turbo.safetensors";
    write_z_image_original(path, prefix);
    const layouts::Detected& d = only(layouts::inspect(path));
    CHECK(d.role == "transformer");
    CHECK(d.family == "z_image");
    CHECK(d.layout == (prefix.empty() ? "original" : "comfyui"));
    CHECK(d.prefix == prefix);
    auto set = layouts::open_component(path, "transformer");
    check_same(*set, fixture_file("z_image", "transformer"));  // norm_final dropped, qkv split, pads [1, D]
    CHECK(check_views(*set) == set->tensors().size());         // all in place: rows, copies and reshapes
}

TEST_CASE("layouts: FLUX.2's BFL keys give the diffusers transformer bitwise", "[layouts][single_file][flux2]") {
    const std::string prefix = GENERATE(as<std::string>{}, "", "model.diffusion_model.");
    TempDir dir("kiln_layouts_f2");
    const std::string path = dir / "flux-2-klein.safetensors";
    write_flux2_bfl(path, prefix);
    const layouts::Detected& d = only(layouts::inspect(path));
    CHECK(d.role == "transformer");
    CHECK(d.family == "flux2");
    CHECK(d.layout == (prefix.empty() ? "bfl" : "comfyui"));
    auto set = layouts::open_component(path, "transformer");
    check_same(*set, fixture_file("flux2_klein", "transformer"));
    CHECK(check_views(*set) == set->tensors().size() - 1);  // all but norm_out.linear.weight's swapped halves
}

TEST_CASE("layouts: the FLUX.1 and FLUX.2 VAEs in the LDM layout give the diffusers VAEs bitwise",
          "[layouts][single_file][flux2]") {
    TempDir dir("kiln_layouts_vae");
    SECTION("FLUX.1-style (Z-Image's)") {
        write_vae_ldm("z_image", dir / "ae.safetensors");
        const layouts::Detected& d = only(layouts::inspect(dir / "ae.safetensors"));
        CHECK(d.role == "vae");
        CHECK(d.family == "");
        CHECK(d.layout == "ldm");
        check_same(*layouts::open_component(dir / "ae.safetensors", "vae"), fixture_file("z_image", "vae"));
    }
    SECTION("FLUX.2, with and without bn.num_batches_tracked (torch loads its absence as 0, the fixture's value)") {
        const bool tracked = GENERATE(true, false);
        write_vae_ldm("flux2_klein", dir / "flux2-vae.safetensors", tracked);
        const layouts::Detected& d = only(layouts::inspect(dir / "flux2-vae.safetensors"));
        CHECK(d.role == "vae");
        CHECK(d.family == "flux2");
        auto set = layouts::open_component(dir / "flux2-vae.safetensors", "vae");
        check_same(*set, fixture_file("flux2_klein", "vae"));
        CHECK(!set->view("bn.num_batches_tracked").file == !tracked);  // computed: no bytes in the file
    }
}

TEST_CASE("layouts: Qwen3 in transformers' names, under model. or bare, with or without the LM head",
          "[layouts][single_file][qwen3]") {
    const auto [model_prefix, lm_head] = GENERATE(table<bool, bool>({{true, true}, {true, false}, {false, false}}));
    CAPTURE(model_prefix, lm_head);
    TempDir dir("kiln_layouts_qwen3");
    for (const std::string c : {"z_image", "flux2_klein"}) {
        CAPTURE(c);
        const std::string path = dir / (c + "_qwen_3.safetensors");
        write_qwen3_transformers(c, path, model_prefix, lm_head);
        const layouts::Detected& d = only(layouts::inspect(path));
        CHECK(d.role == "llm");
        CHECK(d.layout == "transformers");
        CHECK(d.prefix == (model_prefix ? "model." : ""));
        // Qwen3Model's names; klein's Qwen3ForCausalLM reads them under model. (converter open_part).
        auto set = layouts::open_component(path, "llm");
        CHECK(!set->find("lm_head.weight"));
        if (c == "z_image")
            check_same(*set, fixture_file(c, "text_encoder"));
        else
            check_same(*layouts::with_prefix(std::move(set), "model."), fixture_file(c, "text_encoder"));
    }
}

TEST_CASE("layouts: Qwen3 as a llama.cpp GGUF (architecture qwen3)", "[layouts][single_file][qwen3][gguf]") {
    TempDir dir("kiln_layouts_qwen3_gguf");
    const SafeTensors ref = SafeTensors::open(fixture_file("z_image", "text_encoder"));
    SECTION("f32: bitwise, the LM head (output.weight) dropped") {
        write_qwen3_gguf("z_image", dir / "qwen3.gguf", DType::f32);
        const layouts::FileInfo info = layouts::inspect(dir / "qwen3.gguf");
        CHECK(info.gguf_architecture == "qwen3");
        CHECK(only(info).role == "llm");
        CHECK(only(info).layout == "llama.cpp");
        check_same(*layouts::open_component(dir / "qwen3.gguf", "llm"), fixture_file("z_image", "text_encoder"));
    }
    SECTION("q8_0 and f16 matrices: each tensor is the quantized reference, byte for byte") {
        const DType q = GENERATE(DType::q8_0, DType::f16);
        write_qwen3_gguf("z_image", dir / "qwen3-q.gguf", q);
        auto set = layouts::open_component(dir / "qwen3-q.gguf", "llm");
        REQUIRE(set->tensors().size() == ref.tensors().size());
        for (const auto& t : ref.tensors()) {
            INFO(t.name);
            const layouts::TensorInfo* i = set->find(t.name);
            REQUIRE(i);
            CHECK(i->shape == t.shape);
            const DType want = t.shape.size() == 2 ? q : DType::f32;
            CHECK(i->dtype == want);
            // The reference through the same encoder: a tensor from another name or row range would differ.
            const std::vector<float> x = ref.read(t.name).to_f32();
            std::vector<uint8_t> expect(dtype_nbytes(want, x.size()));
            if (want == DType::f32)
                std::memcpy(expect.data(), x.data(), expect.size());
            else if (want == DType::f16)
                for (size_t k = 0; k < x.size(); ++k) reinterpret_cast<uint16_t*>(expect.data())[k] = f32_to_f16(x[k]);
            else
                quantize(x.data(), want, expect.data(), x.size());
            CHECK(set->read(t.name).bytes == expect);
        }
        CHECK(check_views(*set) == set->tensors().size());
    }
}

TEST_CASE("layouts: files named rather than misread (Lumina 2, a GGUF of the wrong architecture, truncated)",
          "[layouts][single_file][bad]") {
    TempDir dir("kiln_layouts_bad");
    {  // Lumina-Image 2.0's NextDiT: Z-Image's key names but a (SiLU, Linear) modulation, adaLN_modulation.1
        write_safetensors(dir / "lumina2.safetensors",
                          {{"cap_embedder.1.weight", Tensor(DType::f32, {4, 4})},
                           {"layers.0.adaLN_modulation.1.weight", Tensor(DType::f32, {16, 4})},
                           {"layers.0.attention.qkv.weight", Tensor(DType::f32, {12, 4})}});
        CHECK_THAT(error_of([&] { layouts::inspect(dir / "lumina2.safetensors"); }),
                   Catch::Contains("Lumina-Image 2.0"));
    }
    {  // a Qwen3 GGUF labelled as a T5 encoder
        GgufWriter w;
        w.set_string("general.architecture", "t5");
        w.add_tensor("blk.0.attn_q.weight", DType::f32, {4, 4}, [](void* d) { std::memset(d, 0, 64); });
        w.write(dir / "mislabelled.gguf");
        CHECK_THAT(error_of([&] { layouts::inspect(dir / "mislabelled.gguf"); }),
                   Catch::Contains("GGUF architecture 't5' but tensors of a llm"));
    }
    {  // a download cut short: the header promises more bytes than the file has
        write_qwen3_transformers("z_image", dir / "full.safetensors", true, false);
        const auto size = std::filesystem::file_size(dir / "full.safetensors");
        std::filesystem::copy_file(dir / "full.safetensors", dir / "cut.safetensors");
        std::filesystem::resize_file(dir / "cut.safetensors", size / 2);
        const std::string e = error_of([&] { layouts::inspect(dir / "cut.safetensors"); });
        CHECK_THAT(e, Catch::Contains("cut.safetensors"));
        CHECK(e.find('\n') == std::string::npos);
    }
}
