// LoRA files read against the fixtures' Flux and SD3 transformers: every public layout gives io.json's modules with
// their as-trained factor alpha / rank, and every bad input stops with one line naming the file.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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
