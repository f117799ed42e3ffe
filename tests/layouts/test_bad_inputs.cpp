// Files that are not models, or not models Kiln reads, fail at inspect()/open_component() with one line naming the
// file and the problem.
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "tests/layouts/layouts_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

Tensor zeros(Shape s) { return Tensor(DType::f32, std::move(s)); }

// The message of the kiln::Error `f` throws: one line, naming the file.
template <class F>
std::string error_of(F&& f, const std::string& file) {
    try {
        f();
    } catch (const Error& e) {
        std::string m = e.what();
        CHECK(m.find('\n') == std::string::npos);
        CHECK(m.find(file) != std::string::npos);
        return m;
    }
    FAIL("no error for " << file);
    return "";
}

std::string inspect_error(const std::string& path) {
    return error_of([&] { layouts::inspect(path); }, path);
}

}  // namespace

TEST_CASE("layouts: a LoRA, an optimizer state and unknown keys are refused", "[layouts][bad]") {
    TempDir dir("kiln_layouts");
    const std::string lora = dir / "lora.safetensors";
    write_safetensors(lora, {{"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", zeros({4, 32})},
                             {"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", zeros({96, 4})},
                             {"lora_unet_double_blocks_0_img_attn_qkv.alpha", zeros({})}});
    CHECK_THAT(inspect_error(lora), Catch::Contains("is a LoRA adapter, not a model"));
    const std::string peft = dir / "peft.safetensors";
    write_safetensors(peft, {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", zeros({4, 32})},
                             {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", zeros({32, 4})}});
    CHECK_THAT(inspect_error(peft), Catch::Contains("is a LoRA adapter, not a model"));
    CHECK_THAT(error_of([&] { layouts::open_component(peft, "transformer"); }, peft), Catch::Contains("LoRA"));

    const std::string optim = dir / "optimizer.safetensors";
    write_safetensors(optim, {{"state.0.exp_avg", zeros({8})}, {"state.0.exp_avg_sq", zeros({8})}});
    CHECK_THAT(inspect_error(optim), Catch::Contains("is an optimizer state, not a model"));

    const std::string unknown = dir / "unknown.safetensors";
    write_safetensors(unknown, {{"backbone.layer1.weight", zeros({2})}, {"head.fc.weight", zeros({2, 2})}});
    std::string m = inspect_error(unknown);
    CHECK_THAT(m, Catch::Contains("2 of 2 tensors belong to no layout"));
    CHECK_THAT(m, Catch::Contains("'backbone.layer1.weight'"));
}

TEST_CASE("layouts: a GGUF of another architecture, and a Kiln file", "[layouts][bad]") {
    TempDir dir("kiln_layouts");
    const std::string llama = dir / "llama.gguf";
    {
        GgufWriter w;
        w.set_string("general.architecture", "llama");
        w.add_tensor("token_embd.weight", DType::f32, {4, 8}, [](void* d) { std::memset(d, 0, 128); });
        w.write(llama);
    }
    std::string m = inspect_error(llama);
    CHECK_THAT(m, Catch::Contains("GGUF architecture 'llama' is not one Kiln runs"));
    CHECK_THAT(m, Catch::Contains("flux, sd3"));
    CHECK(!layouts::is_kiln_file(llama));

    const std::string kiln_file = dir / "model.kiln";
    {
        GgufWriter w;
        w.set_string("kiln.components", "transformer");
        w.add_tensor("x", DType::f32, {4}, [](void* d) { std::memset(d, 0, 16); });
        w.write(kiln_file);
    }
    CHECK(layouts::is_kiln_file(kiln_file));
    CHECK_THAT(inspect_error(kiln_file), Catch::Contains("is a Kiln model file"));
    CHECK_THAT(error_of([&] { layouts::open_component(kiln_file, "transformer"); }, kiln_file),
               Catch::Contains("is a Kiln model file"));
    // Not a GGUF, not a file: neither is a Kiln file, and is_kiln_file does not throw.
    CHECK(!layouts::is_kiln_file(single("flux", "io.json")));
    CHECK(!layouts::is_kiln_file(dir / "absent.gguf"));
}

TEST_CASE("layouts: keys a layout does not explain, a missing role, a bad fused tensor", "[layouts][bad]") {
    TempDir dir("kiln_layouts");
    SafeTensors src = SafeTensors::open(single("flux", "flux1-tiny.safetensors"));
    auto with = [&](const std::string& path, const std::map<std::string, Tensor>& change) {
        std::vector<std::pair<std::string, Tensor>> ts;
        for (const auto& t : src.tensors())
            if (!change.count(t.name)) ts.emplace_back(t.name, src.read(t.name));
        for (const auto& [n, t] : change) ts.emplace_back(n, t);
        write_safetensors(path, ts);
        return path;
    };
    const std::string extra = with(dir / "extra.safetensors", {{"double_blocks.0.img_attn.bogus.weight", zeros({2})}});
    std::string m = inspect_error(extra);
    CHECK_THAT(m, Catch::Contains("1 tensors the bfl transformer layout does not explain"));
    CHECK_THAT(m, Catch::Contains("'double_blocks.0.img_attn.bogus.weight'"));

    // linear1 rows must be 3 D + mlp rows with D from img_in: 3 D + 0 does not split.
    const std::string bad =
        with(dir / "bad_linear1.safetensors", {{"single_blocks.0.linear1.weight", zeros({96, 32})}});
    CHECK_THAT(error_of([&] { layouts::open_component(bad, "transformer"); }, bad),
               Catch::Contains("fused tensor 'single_blocks.0.linear1.weight' of shape [96, 32] does not split into "
                               "rows 32 + 32 + 32 + rest (rest > 0)"));

    const std::string ae = single("flux", "ae.safetensors");
    CHECK_THAT(error_of([&] { layouts::open_component(ae, "transformer"); }, ae),
               Catch::Contains("holds no transformer (it holds: vae)"));
}

TEST_CASE("layouts: CLIP-L and CLIP-G told apart by hidden size", "[layouts][bad]") {
    TempDir dir("kiln_layouts");
    // Real CLIP-G is 1280 wide: it is CLIP-G whatever the file is called or the caller asks for.
    const std::string g = dir / "clip_l.safetensors";
    write_safetensors(g, {{"text_model.embeddings.token_embedding.weight", zeros({4, 1280})},
                          {"text_model.final_layer_norm.weight", zeros({1280})}});
    CHECK(layouts::inspect(g).components[0].role == "clip_g");
    CHECK_THAT(error_of([&] { layouts::open_component(g, "clip_l"); }, g),
               Catch::Contains("holds no clip_l (it holds: clip_g)"));
    const std::string l = dir / "te.safetensors";
    write_safetensors(l, {{"text_model.embeddings.token_embedding.weight", zeros({4, 768})}});
    CHECK(layouts::inspect(l).components[0].role == "clip_l");
    CHECK_THROWS_AS(layouts::open_component(l, "clip_g"), Error);
    // The tiny fixtures are 32 wide: the caller's role, else the file name, decides.
    CHECK(layouts::inspect(single("sd3", "clip_g.safetensors")).components[0].role == "clip_g");
    CHECK(layouts::open_component(single("sd3", "clip_g.safetensors"), "clip_l")->tensors().size() == 53);
}
