// LoRA files read against the fixtures' Flux and SD3 transformers: every public layout gives io.json's modules with
// their as-trained factor alpha / rank, and every bad input stops with one line naming the file.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "models/layouts/layouts.h"
#include "models/layouts/lora.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
std::string lora_dir(const std::string& c) { return test::data_path("fixtures/" + c + "_lora/"); }

nlohmann::json lora_io(const std::string& c) {
    std::ifstream f(lora_dir(c) + "io.json");
    return nlohmann::json::parse(f);
}

// The transformer's weight shapes of the fixture pipeline c ("flux", "sd3").
layouts::LoraTargetFn targets(const std::string& c) {
    auto set = std::shared_ptr<layouts::TensorSet>(layouts::open_safetensors(
        test::data_path("fixtures/" + c + "_pipeline/transformer/diffusion_pytorch_model.safetensors")));
    return [set](const std::string& name) -> std::optional<Shape> {
        const layouts::TensorInfo* i = set->find(name);
        return i ? std::optional<Shape>(i->shape) : std::nullopt;
    };
}

std::string family_of(const std::string& c) { return c == "flux" ? "Flux" : "SD3"; }

// Reads a LoRA and returns the error's message ("" when it reads).
std::string read_error(const std::string& path, const std::string& c, bool allow = false) {
    try {
        layouts::read_lora(path, family_of(c), targets(c), allow);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

Tensor filled(Shape s, float v) {
    Tensor t(DType::f32, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v * (float)((i % 7) - 3);
    return t;
}
}  // namespace

TEST_CASE("LoRA files of every public layout: io.json's modules, alpha / rank as trained", "[layouts][lora]") {
    for (const std::string c : {"flux", "sd3"}) {
        const auto io = lora_io(c);
        for (auto& [name, l] : io["loras"].items()) {
            INFO(c << " " << name);
            const auto f =
                layouts::read_lora(lora_dir(c) + l["file"].get<std::string>(), family_of(c), targets(c), false);
            CHECK(f.unmatched.empty());
            CHECK(f.matched == f.tensors);
            const auto& mods = l["as_trained"]["modules"];
            REQUIRE(f.modules.size() == mods.size());
            for (const auto& m : mods) {
                const std::string module = m["module"];
                INFO(module);
                auto it = std::find_if(f.modules.begin(), f.modules.end(),
                                       [&](const layouts::LoraModule& x) { return x.module == module; });
                REQUIRE(it != f.modules.end());
                CHECK(it->A.shape[0] == m["rank"].get<int64_t>());
                CHECK(it->scale == Approx(m["as_trained_factor"].get<double>()).epsilon(1e-12));
            }
        }
    }
}

TEST_CASE("lora_merge: W + s (alpha / r) B A, f32 and f16 weights", "[layouts][lora]") {
    layouts::LoraModule m;
    m.A = filled({2, 3}, 0.5f);
    m.B = filled({4, 2}, 0.25f);
    m.scale = 0.5;
    Tensor w = filled({4, 3}, 1.f);
    for (DType t : {DType::f32, DType::f16}) {
        Tensor got = layouts::lora_merge(w.astype(t), {{&m, 2.0}});
        CHECK(got.dtype == t);
        std::vector<float> g = got.to_f32(), w0 = w.astype(t).to_f32();
        for (int o = 0; o < 4; ++o)
            for (int i = 0; i < 3; ++i) {
                double d = 0;
                for (int k = 0; k < 2; ++k) d += m.B.data<float>()[o * 2 + k] * m.A.data<float>()[k * 3 + i];
                // f16: one rounding of the sum, |W'| <= 5: 2^-11 relative, 3e-3 absolute.
                CHECK(g[o * 3 + i] == Approx(w0[o * 3 + i] + 1.0 * d).margin(t == DType::f32 ? 1e-6 : 3e-3));
            }
    }
}

TEST_CASE("LoRA errors: one line naming the file and the problem", "[layouts][lora]") {
    test::TempDir tmp("kiln_lora");
    auto write = [&](const std::string& name, std::vector<std::pair<std::string, Tensor>> t) {
        const std::string p = tmp / name;
        write_safetensors(p, t);
        return p;
    };
    const std::string q = "transformer.transformer_blocks.0.attn.to_q.";
    SECTION("keys that match no module: the first named, the layout guessed; allowed, a warning") {
        const std::string p = write(
            "u.safetensors", {{q + "lora_A.weight", filled({2, 32}, .1f)},
                              {q + "lora_B.weight", filled({32, 2}, .1f)},
                              {"transformer.transformer_blocks.7.attn.to_q.lora_A.weight", filled({2, 32}, .1f)},
                              {"transformer.transformer_blocks.7.attn.to_q.lora_B.weight", filled({32, 2}, .1f)}});
        const std::string e = read_error(p, "flux");
        CHECK(e.find("2 keys match no module") != std::string::npos);
        CHECK(e.find("transformer_blocks.7.attn.to_q.lora_A.weight") != std::string::npos);
        CHECK(e.find("diffusers/PEFT") != std::string::npos);
        CHECK(e.find("--lora-allow-unmatched") != std::string::npos);
        const auto f = layouts::read_lora(p, "Flux", targets("flux"), true);
        CHECK(f.modules.size() == 1);
        CHECK(f.unmatched.size() == 2);
        CHECK(f.summary().find("2 tensors matched, 1 modules, 2 keys unmatched") != std::string::npos);
    }
    SECTION("text-encoder keys without the text encoders (transformer only): dropped with a warning line") {
        const std::string te = "lora_te1_text_model_encoder_layers_0_mlp_fc1.";
        const std::string p =
            write("te.safetensors",
                  {{q + "lora_A.weight", filled({2, 32}, .1f)},
                   {q + "lora_B.weight", filled({32, 2}, .1f)},
                   {te + "lora_down.weight", filled({2, 8}, .1f)},
                   {te + "lora_up.weight", filled({8, 2}, .1f)},
                   {"text_encoder.text_model.encoder.layers.0.mlp.fc1.lora_A.weight", filled({2, 8}, .1f)}});
        const auto f = layouts::read_lora(p, "Flux", targets("flux"), false);
        CHECK(f.modules.size() == 1);
        CHECK(f.unmatched.empty());
        REQUIRE(f.dropped.size() == 1);
        CHECK(f.dropped[0].find("3 text-encoder keys not applied (CLIP-L (text_encoder) is not loaded here): " + te +
                                "lora_down.weight") != std::string::npos);
        // With other unmatched keys: those are the error.
        const std::string p2 = write("te2.safetensors", {{q + "lora_A.weight", filled({2, 32}, .1f)},
                                                         {q + "lora_B.weight", filled({32, 2}, .1f)},
                                                         {te + "lora_down.weight", filled({2, 8}, .1f)},
                                                         {"transformer.nope.lora_A.weight", filled({2, 8}, .1f)}});
        const std::string e2 = read_error(p2, "flux");
        CHECK(e2.find("1 keys match no module") != std::string::npos);
        CHECK(e2.find("transformer.nope.lora_A.weight") != std::string::npos);
    }
    SECTION("a LoRA for another family is named as such") {
        const std::string e = read_error(lora_dir("flux") + "lora_kohya.safetensors", "sd3");
        CHECK(e.find("a LoRA for Flux (kohya layout); the model is SD3") != std::string::npos);
        const std::string p =
            write("sd3.safetensors", {{"transformer.pos_embed.proj.lora_A.weight", filled({2, 64}, 1)},
                                      {"transformer.pos_embed.proj.lora_B.weight", filled({32, 2}, 1)}});
        CHECK(read_error(p, "flux").find("a LoRA for SD3 (diffusers/PEFT layout); the model is Flux") !=
              std::string::npos);
    }
    SECTION("an SD3 LoRA on the Flux model: keys the model lacks") {
        const std::string e = read_error(lora_dir("sd3") + "lora_peft.safetensors", "flux");
        CHECK(e.find("match no module of this Flux transformer") != std::string::npos);
        CHECK(e.find("an SD3 LoRA?") != std::string::npos);
    }
    SECTION("rank mismatch between A and B") {
        const std::string p = write(
            "r.safetensors", {{q + "lora_A.weight", filled({4, 32}, 1)}, {q + "lora_B.weight", filled({32, 2}, 1)}});
        CHECK(read_error(p, "flux").find("rank mismatch") != std::string::npos);
    }
    SECTION("B (or A) that does not fit the target") {
        const std::string p = write(
            "b.safetensors", {{q + "lora_A.weight", filled({2, 32}, 1)}, {q + "lora_B.weight", filled({48, 2}, 1)}});
        CHECK(read_error(p, "flux").find("does not fit") != std::string::npos);
        const std::string k = "lora_unet_double_blocks_0_img_attn_qkv.";
        const std::string f = write("bf.safetensors", {{k + "lora_down.weight", filled({2, 32}, 1)},
                                                       {k + "lora_up.weight", filled({95, 2}, 1)}});
        CHECK(read_error(f, "flux").find("does not fit the fused target's rows 32 + 32 + 32") != std::string::npos);
        const std::string a = write(
            "a.safetensors", {{q + "lora_A.weight", filled({2, 31}, 1)}, {q + "lora_B.weight", filled({32, 2}, 1)}});
        CHECK(read_error(a, "flux").find("does not fit") != std::string::npos);
    }
    SECTION("NaN or Inf") {
        Tensor b = filled({32, 2}, 1);
        b.data<float>()[5] = std::nanf("");
        const std::string p =
            write("n.safetensors", {{q + "lora_A.weight", filled({2, 32}, 1)}, {q + "lora_B.weight", b}});
        CHECK(read_error(p, "flux").find("NaN or Inf") != std::string::npos);
    }
    SECTION("a truncated file") {
        const std::string p = tmp / "t.safetensors";
        fs::copy_file(lora_dir("flux") + "lora_peft.safetensors", p);
        fs::resize_file(p, fs::file_size(p) - 100);
        const std::string e = read_error(p, "flux");
        CHECK(e.find("t.safetensors") != std::string::npos);
        CHECK(e.find("truncated") != std::string::npos);
    }
    SECTION("a LoRA given to a model without the target (a block it lacks)") {
        const std::string k = "lora_unet_single_blocks_5_linear2.";
        const std::string p = write("m.safetensors", {{k + "lora_down.weight", filled({2, 160}, 1)},
                                                      {k + "lora_up.weight", filled({32, 2}, 1)}});
        const std::string e = read_error(p, "flux");
        CHECK(e.find("lora_unet_single_blocks_5_linear2.lora_down.weight") != std::string::npos);
        // Allowed, nothing is left to apply: still an error, never a silent no-op.
        CHECK(read_error(p, "flux", true).find("no LoRA tensor applies") != std::string::npos);
    }
}

TEST_CASE("parse_lora_arg: FILE[:SCALE]", "[layouts][lora]") {
    CHECK(layouts::parse_lora_arg("a.safetensors") == std::pair<std::string, double>{"a.safetensors", 1.0});
    CHECK(layouts::parse_lora_arg("a.safetensors:0.5") == std::pair<std::string, double>{"a.safetensors", 0.5});
    CHECK(layouts::parse_lora_arg("C:/x.safetensors:-1") == std::pair<std::string, double>{"C:/x.safetensors", -1.0});
    CHECK(layouts::parse_lora_arg("dir:name.safetensors") ==
          std::pair<std::string, double>{"dir:name.safetensors", 1.0});
}

namespace {
// The fixture pipeline c's transformer and the text encoders diffusers loads LoRAs into for its family (the tiny
// CLIPs: hidden 32, intermediate 64; Flux's 2 layers, SD3's CLIP-L 2 and CLIP-G 3).
layouts::LoraTargets te_targets(const std::string& c) {
    layouts::LoraTargets t;
    t.transformer = targets(c);
    for (const std::string& e : layouts::lora_text_encoders(family_of(c))) {
        auto set = std::shared_ptr<layouts::TensorSet>(
            layouts::open_safetensors(test::data_path("fixtures/" + c + "_pipeline/" + e + "/model.safetensors")));
        t.text_encoders[e] = [set](const std::string& name) -> std::optional<Shape> {
            const layouts::TensorInfo* i = set->find(name);
            return i ? std::optional<Shape>(i->shape) : std::nullopt;
        };
    }
    return t;
}

const layouts::LoraModule* find_module(const layouts::LoraFile& f, const std::string& component,
                                       const std::string& module) {
    for (const auto& m : f.modules)
        if (m.component == component && m.module == module) return &m;
    return nullptr;
}
}  // namespace

// diffusers: FluxLoraLoaderMixin loads text_encoder (CLIP-L) only: kohya lora_te_ / lora_te1_ and ComfyUI
// text_encoders.clip_l.transformer. are converted to text_encoder. (lora_te2_ / T5 keys filtered out); PEFT files
// name text_encoder. / text_encoder_2.; SD3LoraLoaderMixin loads text_encoder (CLIP-L) and text_encoder_2 (CLIP-G).
TEST_CASE("Text-encoder LoRA keys of every layout: the CLIP module of their encoder", "[layouts][lora]") {
    test::TempDir tmp("kiln_lora_te");
    auto write = [&](const std::string& name, std::vector<std::pair<std::string, Tensor>> t,
                     const std::map<std::string, std::string>& meta = {}) {
        const std::string p = tmp / name;
        write_safetensors(p, t, meta);
        return p;
    };
    auto alpha = [](float a) { return Tensor::from_f32({}, {a}); };
    SECTION("Flux, kohya and ComfyUI names: CLIP-L; T5 keys dropped with a warning line") {
        const std::string p =
            write("kohya.safetensors",
                  {{"lora_unet_double_blocks_0_img_attn_proj.lora_down.weight", filled({2, 32}, .1f)},
                   {"lora_unet_double_blocks_0_img_attn_proj.lora_up.weight", filled({32, 2}, .1f)},
                   {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", filled({4, 32}, .1f)},
                   {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", filled({32, 4}, .1f)},
                   {"lora_te1_text_model_encoder_layers_0_self_attn_q_proj.alpha", alpha(1)},
                   {"lora_te_text_model_encoder_layers_1_mlp_fc1.lora_down.weight", filled({2, 32}, .1f)},
                   {"lora_te_text_model_encoder_layers_1_mlp_fc1.lora_up.weight", filled({64, 2}, .1f)},
                   {"lora_te1_text_model_encoder_layers_1_self_attn_out_proj.lora_down.weight", filled({2, 32}, .1f)},
                   {"lora_te1_text_model_encoder_layers_1_self_attn_out_proj.lora_up.weight", filled({32, 2}, .1f)},
                   {"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_down.weight", filled({2, 48}, .1f)},
                   {"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_up.weight", filled({48, 2}, .1f)}});
        const auto f = layouts::read_lora(p, "Flux", te_targets("flux"), false);
        CHECK(f.layout == "kohya");
        CHECK(f.modules.size() == 4);
        const auto* qp = find_module(f, "text_encoder", "text_model.encoder.layers.0.self_attn.q_proj");
        REQUIRE(qp);
        CHECK(qp->scale == 0.25);  // alpha 1 / rank 4
        REQUIRE(find_module(f, "text_encoder", "text_model.encoder.layers.1.mlp.fc1"));
        CHECK(find_module(f, "text_encoder", "text_model.encoder.layers.1.mlp.fc1")->scale == 1);  // no alpha
        CHECK(find_module(f, "text_encoder", "text_model.encoder.layers.1.self_attn.out_proj"));
        CHECK(find_module(f, "transformer", "transformer_blocks.0.attn.to_out.0"));
        REQUIRE(f.dropped.size() == 1);
        CHECK(f.dropped[0].find("2 text-encoder keys not applied (T5: diffusers does not apply T5 LoRAs to Flux "
                                "either): lora_te3_") != std::string::npos);
        CHECK(f.matched == 9);
        CHECK(f.summary().find("9 tensors matched, 4 modules (3 of them text-encoder modules, applied to CLIP-L)") !=
              std::string::npos);

        const std::string c =
            write("comfy.safetensors",
                  {{"text_encoders.clip_l.transformer.text_model.encoder.layers.1.mlp.fc2.lora_down.weight",
                    filled({2, 64}, .1f)},
                   {"text_encoders.clip_l.transformer.text_model.encoder.layers.1.mlp.fc2.lora_up.weight",
                    filled({32, 2}, .1f)},
                   {"text_encoders.clip_l.transformer.text_model.encoder.layers.1.mlp.fc2.alpha", alpha(4)}});
        const auto fc = layouts::read_lora(c, "Flux", te_targets("flux"), false);
        REQUIRE(fc.modules.size() == 1);
        CHECK(fc.modules[0].component == "text_encoder");
        CHECK(fc.modules[0].module == "text_model.encoder.layers.1.mlp.fc2");
        CHECK(fc.modules[0].scale == 2);
    }
    SECTION("Flux, diffusers/PEFT names: text_encoder. (new and older names), metadata per component") {
        const std::string te = "text_encoder.text_model.encoder.layers.";
        const std::string p = write(
            "peft.safetensors",
            {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", filled({2, 32}, .1f)},
             {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", filled({32, 2}, .1f)},
             {te + "0.self_attn.v_proj.lora_A.weight", filled({2, 32}, .1f)},
             {te + "0.self_attn.v_proj.lora_B.weight", filled({32, 2}, .1f)},
             {te + "1.self_attn.to_k_lora.down.weight", filled({2, 32}, .1f)},
             {te + "1.self_attn.to_k_lora.up.weight", filled({32, 2}, .1f)},
             {te + "0.mlp.fc2.lora_linear_layer.down.weight", filled({2, 64}, .1f)},
             {te + "0.mlp.fc2.lora_linear_layer.up.weight", filled({32, 2}, .1f)},
             {"text_encoder_2.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight", filled({2, 48}, .1f)}},
            {{"lora_adapter_metadata",
              R"({"transformer.r": 2, "transformer.lora_alpha": 2, "text_encoder.r": 2, "text_encoder.lora_alpha": 1})"}});
        const auto f = layouts::read_lora(p, "Flux", te_targets("flux"), false);
        CHECK(f.layout == "diffusers/PEFT");
        CHECK(f.modules.size() == 4);
        for (const char* m : {"text_model.encoder.layers.0.self_attn.v_proj",
                              "text_model.encoder.layers.1.self_attn.k_proj", "text_model.encoder.layers.0.mlp.fc2"}) {
            INFO(m);
            REQUIRE(find_module(f, "text_encoder", m));
            CHECK(find_module(f, "text_encoder", m)->scale == 0.5);  // text_encoder.lora_alpha 1 / r 2
        }
        CHECK(find_module(f, "transformer", "transformer_blocks.0.attn.to_q")->scale == 1);
        REQUIRE(f.dropped.size() == 1);
        CHECK(f.dropped[0].find("1 text-encoder keys not applied (T5") != std::string::npos);
    }
    SECTION("SD3: text_encoder. -> CLIP-L, text_encoder_2. -> CLIP-G (kohya lora_te1_ / lora_te2_ likewise)") {
        const std::string p =
            write("sd3.safetensors",
                  {{"text_encoder.text_model.encoder.layers.1.self_attn.q_proj.lora_A.weight", filled({2, 32}, .1f)},
                   {"text_encoder.text_model.encoder.layers.1.self_attn.q_proj.lora_B.weight", filled({32, 2}, .1f)},
                   {"text_encoder_2.text_model.encoder.layers.2.mlp.fc1.lora_A.weight", filled({2, 32}, .1f)},
                   {"text_encoder_2.text_model.encoder.layers.2.mlp.fc1.lora_B.weight", filled({64, 2}, .1f)},
                   {"text_encoder_3.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight", filled({2, 48}, .1f)}});
        const auto f = layouts::read_lora(p, "Stable Diffusion 3", te_targets("sd3"), false);
        CHECK(f.modules.size() == 2);
        CHECK(find_module(f, "text_encoder", "text_model.encoder.layers.1.self_attn.q_proj"));
        CHECK(find_module(f, "text_encoder_2", "text_model.encoder.layers.2.mlp.fc1"));
        CHECK(f.summary().find("(2 of them text-encoder modules, applied to 1 on CLIP-L, 1 on CLIP-G)") !=
              std::string::npos);
        CHECK(f.dropped.size() == 1);
        const std::string k =
            write("sd3k.safetensors",
                  {{"lora_te1_text_model_encoder_layers_0_self_attn_k_proj.lora_down.weight", filled({2, 32}, .1f)},
                   {"lora_te1_text_model_encoder_layers_0_self_attn_k_proj.lora_up.weight", filled({32, 2}, .1f)},
                   {"lora_te2_text_model_encoder_layers_2_self_attn_out_proj.lora_down.weight", filled({2, 32}, .1f)},
                   {"lora_te2_text_model_encoder_layers_2_self_attn_out_proj.lora_up.weight", filled({32, 2}, .1f)}});
        const auto fk = layouts::read_lora(k, "SD3", te_targets("sd3"), false);
        CHECK(find_module(fk, "text_encoder", "text_model.encoder.layers.0.self_attn.k_proj"));
        CHECK(find_module(fk, "text_encoder_2", "text_model.encoder.layers.2.self_attn.out_proj"));
        // On Flux, lora_te2_ is T5's (dropped, as diffusers filters it out).
        const auto ff = layouts::read_lora(k, "Flux", te_targets("flux"), false);
        CHECK(ff.modules.size() == 1);
        REQUIRE(ff.dropped.size() == 1);
        CHECK(ff.dropped[0].find("T5: diffusers does not apply T5 LoRAs to Flux either") != std::string::npos);
    }
    SECTION("a key for no linear of the encoder: unmatched (an error unless allowed), with bad shapes refused") {
        const std::string p = write(
            "bad.safetensors", {{"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", filled({2, 32}, .1f)},
                                {"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_up.weight", filled({64, 2}, .1f)},
                                {"lora_te1_text_model_encoder_layers_7_mlp_fc1.lora_down.weight", filled({2, 32}, .1f)},
                                {"lora_te1_text_projection.lora_down.weight", filled({2, 32}, .1f)}});
        CHECK_THROWS_WITH(layouts::read_lora(p, "Flux", te_targets("flux"), false),
                          Catch::Contains("2 text-encoder keys match no linear of the text encoder") &&
                              Catch::Contains("lora_te1_text_model_encoder_layers_7_mlp_fc1.lora_down.weight"));
        const auto f = layouts::read_lora(p, "Flux", te_targets("flux"), true);
        CHECK(f.modules.size() == 1);
        CHECK(f.text_encoder_keys == 2);
        CHECK(f.summary().find("2 keys unmatched (2 of them text-encoder keys)") != std::string::npos);
        const std::string w = write(
            "w.safetensors", {{"lora_te1_text_model_encoder_layers_0_mlp_fc2.lora_down.weight", filled({2, 32}, .1f)},
                              {"lora_te1_text_model_encoder_layers_0_mlp_fc2.lora_up.weight", filled({32, 2}, .1f)}});
        CHECK_THROWS_WITH(layouts::read_lora(w, "Flux", te_targets("flux"), false),
                          Catch::Contains("does not fit 'text_model.encoder.layers.0.mlp.fc2.weight' [32, 64]"));
    }
}

namespace {
// An SD3 LoRA module in Stability's MMDiT names, the diffusers modules it goes to (B's row parts, in order) and
// whether B's two row halves swap: the mapping of the base checkpoint's weights (diffusers'
// convert_sd3_transformer_checkpoint_to_diffusers), written out here independently of Kiln's map.
struct Sd3Module {
    std::string original;
    std::vector<std::string> modules;
    bool swap = false;
};

std::vector<Sd3Module> sd3_modules(bool dual) {
    auto qkv = [](int n, const std::string& a, const std::vector<std::string>& p) {
        std::vector<std::string> v;
        for (const std::string& s : p) v.push_back("transformer_blocks." + std::to_string(n) + "." + a + s);
        return v;
    };
    std::vector<Sd3Module> m = {
        {"joint_blocks.0.x_block.attn.qkv", qkv(0, "attn.", {"to_q", "to_k", "to_v"})},
        {"joint_blocks.0.x_block.attn.proj", {"transformer_blocks.0.attn.to_out.0"}},
        {"joint_blocks.0.x_block.mlp.fc1", {"transformer_blocks.0.ff.net.0.proj"}},
        {"joint_blocks.0.x_block.mlp.fc2", {"transformer_blocks.0.ff.net.2"}},
        {"joint_blocks.0.x_block.adaLN_modulation.1", {"transformer_blocks.0.norm1.linear"}},
        {"joint_blocks.0.context_block.attn.qkv", qkv(0, "attn.", {"add_q_proj", "add_k_proj", "add_v_proj"})},
        {"joint_blocks.0.context_block.attn.proj", {"transformer_blocks.0.attn.to_add_out"}},
        {"joint_blocks.0.context_block.mlp.fc1", {"transformer_blocks.0.ff_context.net.0.proj"}},
        {"joint_blocks.0.context_block.mlp.fc2", {"transformer_blocks.0.ff_context.net.2"}},
        {"joint_blocks.0.context_block.adaLN_modulation.1", {"transformer_blocks.0.norm1_context.linear"}},
        {"joint_blocks.1.x_block.attn.qkv", qkv(1, "attn.", {"to_q", "to_k", "to_v"})},
        {"joint_blocks.1.x_block.adaLN_modulation.1", {"transformer_blocks.1.norm1.linear"}},
        {"joint_blocks.1.context_block.attn.qkv", qkv(1, "attn.", {"add_q_proj", "add_k_proj", "add_v_proj"})},
        // The last block is context_pre_only: a 2-chunk [shift; scale] adaLN, diffusers' AdaLayerNormContinuous
        // [scale; shift].
        {"joint_blocks.1.context_block.adaLN_modulation.1", {"transformer_blocks.1.norm1_context.linear"}, true},
        {"context_embedder", {"context_embedder"}},
        {"t_embedder.mlp.0", {"time_text_embed.timestep_embedder.linear_1"}},
        {"t_embedder.mlp.2", {"time_text_embed.timestep_embedder.linear_2"}},
        {"y_embedder.mlp.0", {"time_text_embed.text_embedder.linear_1"}},
        {"y_embedder.mlp.2", {"time_text_embed.text_embedder.linear_2"}},
        {"final_layer.linear", {"proj_out"}},
        {"final_layer.adaLN_modulation.1", {"norm_out.linear"}, true},
    };
    if (dual) {  // SD3.5's dual attention (sd3_qknorm_dual: block 0)
        m.push_back({"joint_blocks.0.x_block.attn2.qkv", qkv(0, "attn2.", {"to_q", "to_k", "to_v"})});
        m.push_back({"joint_blocks.0.x_block.attn2.proj", {"transformer_blocks.0.attn2.to_out.0"}});
    }
    return m;
}

// The same LoRA in four layouts: diffusers/PEFT (per diffusers module: A, its rows of B, halves swapped where the
// base weight's are, the module's alpha), kohya (lora_unet_<path with '_'>.lora_down / lora_up / alpha, one fused
// module), ComfyUI (diffusion_model.<path>.lora_down / lora_up / alpha) and ComfyUI with lora_A / lora_B. Ranks 2
// and 4, alphas 1 to 4: factors alpha / r from 0.25 to 2.
struct Sd3Files {
    std::vector<std::pair<std::string, Tensor>> peft, kohya, comfy, comfy_ab;
};

Sd3Files sd3_files(const std::vector<Sd3Module>& mods, const layouts::LoraTargetFn& target) {
    Sd3Files f;
    unsigned seed = 100;
    for (size_t i = 0; i < mods.size(); ++i) {
        const Sd3Module& m = mods[i];
        const int64_t r = i % 3 == 0 ? 2 : 4;
        const Tensor alpha = Tensor::from_f32({}, {(float)(1 + i % 4)});
        int64_t rows = 0, in = 0;
        for (const std::string& d : m.modules) {
            const Shape s = target(d + ".weight").value();
            rows += s[0];
            in = s[1];
        }
        const Tensor A = test::random_tensor({r, in}, seed++), up = test::random_tensor({rows, r}, seed++);
        std::string under = m.original;
        for (char& c : under)
            if (c == '.') c = '_';
        for (auto [out, pre, down_s, up_s] :
             {std::tuple{&f.kohya, "lora_unet_" + under, ".lora_down.weight", ".lora_up.weight"},
              std::tuple{&f.comfy, "diffusion_model." + m.original, ".lora_down.weight", ".lora_up.weight"},
              std::tuple{&f.comfy_ab, "diffusion_model." + m.original, ".lora_A.weight", ".lora_B.weight"}}) {
            out->push_back({pre + down_s, A});
            out->push_back({pre + up_s, up});
            out->push_back({pre + ".alpha", alpha});
        }
        // diffusers' B: [shift; scale] -> [scale; shift] where the base weight swaps, then each module's rows.
        Tensor b = up;
        if (m.swap) {
            const size_t half = (size_t)(rows / 2 * r) * sizeof(float);
            std::memcpy(b.bytes.data(), up.bytes.data() + half, half);
            std::memcpy(b.bytes.data() + half, up.bytes.data(), half);
        }
        int64_t r0 = 0;
        for (const std::string& d : m.modules) {
            const int64_t n = target(d + ".weight").value()[0];
            Tensor part(DType::f32, {n, r});
            std::memcpy(part.bytes.data(), b.bytes.data() + (size_t)(r0 * r) * sizeof(float), part.nbytes());
            r0 += n;
            f.peft.push_back({"transformer." + d + ".lora_A.weight", A});
            f.peft.push_back({"transformer." + d + ".lora_B.weight", part});
            f.peft.push_back({"transformer." + d + ".alpha", alpha});
        }
    }
    return f;
}

layouts::LoraTargetFn file_targets(const std::string& path) {
    auto set = std::shared_ptr<layouts::TensorSet>(layouts::open_safetensors(path));
    return [set](const std::string& name) -> std::optional<Shape> {
        const layouts::TensorInfo* i = set->find(name);
        return i ? std::optional<Shape>(i->shape) : std::nullopt;
    };
}
}  // namespace

// kohya sd-scripts (networks/lora_sd3.py) and ComfyUI save SD3 LoRAs under Stability's MMDiT names; diffusers'
// SD3LoraLoaderMixin converts none of them. Kiln maps them as the base checkpoint's names are mapped: each must give
// the PEFT file's modules with the same A, B and alpha / r, so the same delta W = (alpha / r) B @ A bit for bit (rows
// are copied and swapped, never computed).
TEST_CASE("SD3 LoRAs in kohya and ComfyUI names: the PEFT file's modules, delta W bit for bit", "[layouts][lora]") {
    const bool dual = GENERATE(false, true);
    const auto target =
        file_targets(dual ? test::data_path("fixtures/sd3_qknorm_dual/diffusion_pytorch_model.safetensors")
                          : test::data_path("fixtures/sd3_pipeline/transformer/diffusion_pytorch_model.safetensors"));
    const auto mods = sd3_modules(dual);
    const Sd3Files files = sd3_files(mods, target);
    test::TempDir tmp("kiln_lora_sd3");
    auto write = [&](const std::string& name, const std::vector<std::pair<std::string, Tensor>>& t) {
        write_safetensors(tmp / name, t);
        return layouts::read_lora(tmp / name, "SD3", target, false);
    };
    const auto peft = write("peft.safetensors", files.peft);
    size_t parts = 0;
    for (const Sd3Module& m : mods) parts += m.modules.size();
    REQUIRE(peft.modules.size() == parts);
    for (auto [name, t, layout] :
         {std::tuple{"kohya", &files.kohya, "kohya"}, std::tuple{"comfy", &files.comfy, "ComfyUI"},
          std::tuple{"comfy_ab", &files.comfy_ab, "ComfyUI"}}) {
        INFO(name);
        const auto f = write(std::string(name) + ".safetensors", *t);
        CHECK(f.layout == layout);
        CHECK(f.matched == f.tensors);
        CHECK(f.matched == 3 * mods.size());
        REQUIRE(f.modules.size() == peft.modules.size());
        for (const auto& p : peft.modules) {
            INFO(p.module);
            const auto* k = find_module(f, "transformer", p.module);
            REQUIRE(k);
            CHECK(k->A.shape == p.A.shape);
            CHECK(k->B.shape == p.B.shape);
            CHECK(k->A.bytes == p.A.bytes);
            CHECK(k->B.bytes == p.B.bytes);
            CHECK(k->scale == p.scale);
        }
    }
    // alpha / r as trained, from the file's alpha: module i has rank 2 or 4 and alpha 1 + i % 4.
    CHECK(find_module(peft, "transformer", "transformer_blocks.0.attn.to_q")->scale == 0.5);      // i 0: 1 / 2
    CHECK(find_module(peft, "transformer", "transformer_blocks.0.attn.to_out.0")->scale == 0.5);  // i 1: 2 / 4
    CHECK(find_module(peft, "transformer", "transformer_blocks.0.ff.net.2")->scale == 2);         // i 3: 4 / 2
    CHECK(find_module(peft, "transformer", "norm_out.linear")->scale == 0.25);                    // i 20: 1 / 4
}

TEST_CASE("SD3 kohya / ComfyUI LoRAs: unknown keys, the other family, T5, conv and shared names", "[layouts][lora]") {
    test::TempDir tmp("kiln_lora_sd3e");
    auto write = [&](const std::string& name, std::vector<std::pair<std::string, Tensor>> t) {
        const std::string p = tmp / name;
        write_safetensors(p, t);
        return p;
    };
    const std::string qkv = "lora_unet_joint_blocks_0_x_block_attn_qkv.";
    std::vector<std::pair<std::string, Tensor>> base = {{qkv + "lora_down.weight", filled({2, 32}, .1f)},
                                                        {qkv + "lora_up.weight", filled({96, 2}, .1f)}};
    SECTION("a misnamed key, a block the model lacks: one line naming them; allowed, a warning") {
        auto t = base;
        t.push_back({"lora_unet_joint_blocks_0_x_block_attn_qkvv.lora_down.weight", filled({2, 32}, .1f)});
        t.push_back({"lora_unet_joint_blocks_7_x_block_attn_proj.lora_down.weight", filled({2, 32}, .1f)});
        const std::string p = write("u.safetensors", t);
        const std::string e = read_error(p, "sd3");
        CHECK(e.find("2 keys match no module of this SD3 transformer (layout guessed: kohya, SD3): "
                     "lora_unet_joint_blocks_0_x_block_attn_qkvv.lora_down.weight, "
                     "lora_unet_joint_blocks_7_x_block_attn_proj.lora_down.weight; --lora-allow-unmatched") !=
              std::string::npos);
        CHECK(e.find('\n') == std::string::npos);
        const auto f = layouts::read_lora(p, "SD3", targets("sd3"), true);
        CHECK(f.modules.size() == 3);
        CHECK(f.unmatched.size() == 2);
    }
    SECTION("an SD3 file on Flux, a Flux file on SD3: named as such") {
        const std::string p = write("k.safetensors", base);
        CHECK(read_error(p, "flux").find("k.safetensors: a LoRA for SD3 (kohya layout); the model is Flux") !=
              std::string::npos);
        const std::string c = write(
            "c.safetensors", {{"diffusion_model.joint_blocks.0.x_block.mlp.fc1.lora_A.weight", filled({2, 32}, 1)},
                              {"diffusion_model.joint_blocks.0.x_block.mlp.fc1.lora_B.weight", filled({128, 2}, 1)}});
        CHECK(read_error(c, "flux").find("a LoRA for SD3 (ComfyUI layout); the model is Flux") != std::string::npos);
        const std::string fl =
            write("f.safetensors", {{"diffusion_model.double_blocks.0.img_mlp.0.lora_down.weight", filled({2, 32}, 1)},
                                    {"diffusion_model.double_blocks.0.img_mlp.0.lora_up.weight", filled({128, 2}, 1)}});
        CHECK(read_error(fl, "sd3").find("a LoRA for Flux (ComfyUI layout); the model is SD3") != std::string::npos);
    }
    SECTION("final_layer names are both families': read as the model's") {
        const std::string p =
            write("fl.safetensors", {{"lora_unet_final_layer_adaLN_modulation_1.lora_down.weight", filled({2, 32}, 1)},
                                     {"lora_unet_final_layer_adaLN_modulation_1.lora_up.weight", filled({64, 2}, 1)}});
        const auto f = layouts::read_lora(p, "SD3", targets("sd3"), false);
        REQUIRE(f.modules.size() == 1);
        CHECK(f.modules[0].module == "norm_out.linear");
        CHECK(f.modules[0].B.data<float>()[0] == filled({64, 2}, 1).data<float>()[64]);  // row 32 of 64 first
        CHECK(layouts::read_lora(p, "Flux", targets("flux"), false).modules[0].module == "norm_out.linear");
    }
    SECTION("text encoders: lora_te1_ CLIP-L, lora_te2_ CLIP-G, lora_te3_ (T5) dropped with a warning line") {
        auto t = base;
        t.push_back({"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_down.weight", filled({2, 48}, .1f)});
        t.push_back({"lora_te3_encoder_block_0_layer_0_SelfAttention_q.lora_up.weight", filled({48, 2}, .1f)});
        const auto f = layouts::read_lora(write("te.safetensors", t), "SD3", te_targets("sd3"), false);
        CHECK(f.modules.size() == 3);
        REQUIRE(f.dropped.size() == 1);
        CHECK(f.dropped[0].find("2 text-encoder keys not applied (T5: diffusers does not apply T5 LoRAs to SD3 "
                                "either): lora_te3_") != std::string::npos);
    }
    SECTION("a conv LoRA (x_embedder.proj, the patch conv): one line") {
        const std::string p =
            write("x.safetensors", {{"lora_unet_x_embedder_proj.lora_down.weight", filled({2, 16, 2, 2}, 1)},
                                    {"lora_unet_x_embedder_proj.lora_up.weight", filled({32, 2, 1, 1}, 1)}});
        CHECK(read_error(p, "sd3").find(
                  "is a conv LoRA (on pos_embed.proj); Kiln applies LoRAs to linear layers only") != std::string::npos);
    }
}
