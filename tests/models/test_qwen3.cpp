// Qwen3Model / Qwen3ForCausalLM (Z-Image's and FLUX.2 [klein]'s text encoder) parity with transformers 4.57.3: the
// qwen3_encoder fixture (every hidden_states entry, GQA, head_dim * heads == hidden here, right padding with the pad
// rows compared too) on the CPU reference and on Vulkan in every JIT mode, f32 and f16 weights; the states the two
// pipelines tap (Z-Image [-2], klein [9, 18, 27] of a "model."-prefixed Qwen3ForCausalLM) against their pipeline
// runs; replayed segments, streaming, quantized files; bad configs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "converter/convert.h"
#include "models/core/forward.h"
#include "models/text/encoders/qwen3.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
const std::string kFixture = "qwen3_encoder";
const std::vector<std::string> kStates = {"hidden_states_0", "hidden_states_1", "hidden_states_2", "hidden_states_3",
                                          "last_hidden_state"};

double rms(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return std::sqrt(s / (double)v.size());
}

Tensor layers(std::vector<int64_t> l) {
    Tensor t(DType::i64, {(int64_t)l.size()});
    for (size_t i = 0; i < l.size(); ++i) t.data<int64_t>()[i] = l[i];
    return t;
}

// kiln-convert of a fixture folder (any path under tests/data/fixtures) into the model tests' temp folder.
std::string convert(const std::string& rel, DType dt, const std::string& name) {
    auto dir = std::filesystem::temp_directory_path() / "kiln_test_models";
    std::filesystem::create_directories(dir);
    const std::string file = (dir / (name + "_" + dtype_name(dt) + ".kiln")).string();
    converter::Options opt;
    opt.dtype = dt;
    opt.quiet = true;
    converter::convert_folder(test::data_path("fixtures/" + rel), file, opt);
    return file;
}

// [B, S, H] tensors concatenated on the feature axis, in order (Flux2KleinPipeline's prompt_embeds).
Tensor cat_features(const std::vector<Tensor>& ts) {
    const int64_t B = ts[0].shape[0], S = ts[0].shape[1], H = ts[0].shape[2], n = (int64_t)ts.size();
    Tensor out(DType::f32, {B, S, n * H});
    for (int64_t k = 0; k < n; ++k) {
        auto v = ts[(size_t)k].to_f32();
        for (int64_t r = 0; r < B * S; ++r)
            for (int64_t h = 0; h < H; ++h) out.data<float>()[(r * n + k) * H + h] = v[(size_t)(r * H + h)];
    }
    return out;
}
}  // namespace

TEST_CASE("Qwen3Model matches transformers: every hidden state (CPU reference, Vulkan in every mode, f32 and f16)",
          "[models][qwen3][vulkan]") {
    const std::string dir = test::data_path("fixtures/" + kFixture);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    auto in = test::fixture_inputs(io, {"input_ids", "attention_mask"});
    REQUIRE(in.size() == 2);
    std::ifstream jf(dir + "/io.json");
    const auto io_json = nlohmann::json::parse(jf);

    // f32: f32 weights and activations (the CPU reference accumulates in f64, Vulkan in f32 over K <= 128); only
    // transformers' own f32 rounding differs (io.json: 2.5e-6 max against a float64 re-implementation, every row),
    // so relative L2 <= 1e-4. Every row is compared: with right padding a pad query sees the valid keys before it.
    auto folder = models::ModelSource::open(dir);
    REQUIRE(folder.class_of("text_encoder") == "Qwen3Model");
    auto cpu = models::forward_component(nullptr, folder, "text_encoder", in);
    for (const auto& name : kStates) {
        REQUIRE(cpu.count(name));
        const double err = rel_l2(cpu.at(name).to_f32(), io.read(name).to_f32());
        INFO("CPU " << name << " relative L2 " << err);
        CHECK(err <= 1e-4);
    }

    // f16: io.json's weights_fp16_rounded[name] is max|d| of d = out(f16 weights) - out(f32) in transformers; rms(d)
    // <= max|d|, so the relative L2 is at most max|d| / rms(ref), plus 1e-4 for the f32 summation order.
    for (DType dt : {DType::f32, DType::f16}) {
        auto src = models::ModelSource::open(test::convert_fixture(kFixture, dt));
        std::map<std::string, Tensor> first;
        for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
            auto out = models::forward_component(&test::context(), src, "text_encoder", in, m);
            for (const auto& name : kStates) {
                const auto ref = io.read(name).to_f32();
                const double bound =
                    dt == DType::f32
                        ? 1e-4
                        : io_json["tolerance_observed"]["weights_fp16_rounded"][name].get<double>() / rms(ref) + 1e-4;
                const double err = rel_l2(out.at(name).to_f32(), ref);
                INFO(dtype_name(dt) << " " << exec::mode_name(m) << " " << name << " relative L2 " << err << " (bound "
                                    << bound << ")");
                CHECK(err <= bound);
                if (m == exec::Mode::eager)
                    first[name] = out.at(name);
                else
                    CHECK(first.at(name).bytes == out.at(name).bytes);  // modes are bitwise identical
            }
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Qwen3 hidden_states_layers: only the states asked for, layers between them replayed",
          "[models][qwen3][vulkan]") {
    const std::string dir = test::data_path("fixtures/" + kFixture);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    auto base = test::fixture_inputs(io, {"input_ids", "attention_mask"});
    auto src = models::ModelSource::open(test::convert_fixture(kFixture, DType::f32));
    struct Case {
        std::vector<int64_t> layers;
        std::vector<std::string> outputs;
        size_t regions;  // layer regions in the graph
    };
    // Z-Image's hidden_states[-2]: layers 0 and 1 (one kind, replayed), layer 2 and the final norm never built.
    // {1, -1}: layer 0 alone, then layers 1-2 replayed and the final norm. {0}: the embeddings only.
    const Case c = GENERATE(Case{{-2}, {"hidden_states_2"}, 2},
                            Case{{1, -1}, {"hidden_states_1", "hidden_states_3", "last_hidden_state"}, 3},
                            Case{{0}, {"hidden_states_0"}, 0});
    auto in = base;
    in["hidden_states_layers"] = layers(c.layers);
    {
        auto ws = src.weights("text_encoder");
        ir::Graph g;
        models::Builder b(g, *ws);
        models::build_component(b, src.class_of("text_encoder"), src.config("text_encoder"), in);
        CHECK(g.regions().size() == c.regions);
        std::vector<std::string> names;
        for (auto& [name, v] : g.outputs()) names.push_back(name);
        std::sort(names.begin(), names.end());
        CHECK(names == c.outputs);
    }
    auto full = models::forward_component(&test::context(), src, "text_encoder", in, exec::Mode::full);
    auto regional = models::forward_component(&test::context(), src, "text_encoder", in, exec::Mode::regional);
    REQUIRE(regional.size() == c.outputs.size());
    for (const auto& name : c.outputs) {
        const double err = rel_l2(regional.at(name).to_f32(), io.read(name).to_f32());
        INFO(name << " relative L2 " << err);
        CHECK(err <= 1e-4);  // f32, as above
        CHECK(full.at(name).bytes == regional.at(name).bytes);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Qwen3 as the pipelines tap it: klein's Qwen3ForCausalLM [9, 18, 27], Z-Image's [-2]",
          "[models][qwen3][vulkan]") {
    // The text encoders of the flux2_klein_pipeline and z_image_pipeline fixtures with the ids, masks and encoder
    // outputs of their runs (qwen3_encoder_pipelines/io.safetensors, copied from the cases' io.safetensors). klein:
    // prompt_embeds = cat(hidden_states[9], [18], [27]) on features, every one of max_sequence_length rows (pad rows
    // too); Z-Image: hidden_states[-2] (the pipeline keeps the valid rows; all are compared here). f32: 1e-4 as above.
    const std::string dir = test::data_path("fixtures/qwen3_encoder_pipelines");
    auto io = SafeTensors::open(dir + "/io.safetensors");
    struct Run {
        const char* folder;
        const char* prefix;
        std::vector<int64_t> layers;
        const char* ref;
    };
    const Run r = GENERATE(Run{"klein_text_encoder", "klein_run0_", {9, 18, 27}, "prompt_embeds"},
                           Run{"klein_text_encoder", "klein_run1_", {9, 18, 27}, "prompt_embeds"},
                           Run{"z_image_text_encoder", "z_image_run1_", {-2}, "text_encoder_hidden_states_m2"});
    CAPTURE(r.prefix);
    const std::string p = r.prefix;
    std::map<std::string, Tensor> in = {{"input_ids", io.read(p + "text_encoder_input_ids")},
                                        {"attention_mask", io.read(p + "text_encoder_attention_mask")},
                                        {"hidden_states_layers", layers(r.layers)}};
    const auto ref = io.read(p + r.ref).to_f32();
    auto embeds = [&](const std::map<std::string, Tensor>& out) {
        if (r.layers.size() == 1) {  // Z-Image: the one state ([-2] of 3 layers: hidden_states_2)
            REQUIRE(out.size() == 1);
            return out.begin()->second;
        }
        std::vector<Tensor> ts;
        for (int64_t l : r.layers) ts.push_back(out.at("hidden_states_" + std::to_string(l)));
        return cat_features(ts);
    };
    auto folder = models::ModelSource::open(dir + "/" + r.folder);
    const auto cpu = embeds(models::forward_component(nullptr, folder, "text_encoder", in));
    const double cpu_err = rel_l2(cpu.to_f32(), ref);
    INFO("CPU relative L2 " << cpu_err);
    CHECK(cpu_err <= 1e-4);
    {  // transformers loads either class from either layout (base_model_prefix): so does Kiln, by the weights' names
        const std::string other = folder.class_of("text_encoder") == "Qwen3Model" ? "Qwen3ForCausalLM" : "Qwen3Model";
        auto ws = folder.weights("text_encoder");
        ir::Graph g;
        models::Builder b(g, *ws);
        auto cin = models::build_component(b, other, folder.config("text_encoder"), in);
        CHECK(embeds(cpu::run(g, cin, models::cpu_weights(*ws, b.constants()))).bytes == cpu.bytes);
    }
    // The folder's safetensors on Vulkan (regional: the layers between taps replayed), then a converted f16 file,
    // which must match the CPU oracle on the same f16 weights (only f32 summation order differs).
    const auto gpu = embeds(models::forward_component(&test::context(), folder, "text_encoder", in));
    const double gpu_err = rel_l2(gpu.to_f32(), ref);
    INFO("Vulkan relative L2 " << gpu_err);
    CHECK(gpu_err <= 1e-4);
    auto f16 = models::ModelSource::open(
        convert("qwen3_encoder_pipelines/" + std::string(r.folder), DType::f16, std::string("qwen3_") + r.folder));
    const auto f16_gpu = embeds(models::forward_component(&test::context(), f16, "text_encoder", in));
    const auto f16_cpu = embeds(models::forward_component(nullptr, f16, "text_encoder", in));
    CHECK(rel_l2(f16_gpu.to_f32(), f16_cpu.to_f32()) <= 1e-4);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Qwen3 replayed layers on synthetic weights: Vulkan matches the CPU reference", "[models][qwen3][vulkan]") {
    // 6 layers tapped at 2 and 5 (kinds of 2 and 3 instances, then the last layer and the final norm inline), GQA 3
    // q heads per kv head, head_dim 12 with heads * head_dim != hidden, q/k/v/o biases (attention_bias), 19 tokens:
    // row 0 unpadded, row 1 right-padded after 7 tokens, row 2 left-padded (4 pad tokens first). Left-padded rows
    // whose keys are all padding are implementation-defined; every other row is compared. Then no mask at all.
    nlohmann::json cfg = {{"vocab_size", 97},         {"hidden_size", 40},
                          {"intermediate_size", 56},  {"num_hidden_layers", 6},
                          {"num_attention_heads", 6}, {"num_key_value_heads", 2},
                          {"head_dim", 12},           {"rope_theta", 1000000.0},
                          {"attention_bias", true},   {"architectures", {"Qwen3Model"}}};
    const bool with_mask = GENERATE(true, false);
    auto ws = models::synthetic_store(DType::f32, 17);
    const int B = 3, S = 19;
    Tensor ids(DType::i64, {B, S}), mask(DType::i64, {B, S});
    for (int i = 0; i < B * S; ++i) {
        const int b = i / S, s = i % S;
        ids.data<int64_t>()[i] = (i * 37) % 97;
        mask.data<int64_t>()[i] = b == 0 || (b == 1 && s < 7) || (b == 2 && s >= 4);
    }
    std::map<std::string, Tensor> raw = {{"input_ids", ids}, {"hidden_states_layers", layers({2, 5, -1})}};
    if (with_mask) raw["attention_mask"] = mask;
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, "Qwen3Model", cfg, raw);
    CHECK(g.regions().size() == 6);
    CHECK(in.count("key_padding_bias") == (with_mask ? 1u : 0u));
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    auto rows = [&](const Tensor& t) {  // the rows that see at least one valid key
        auto v = t.to_f32();
        const int64_t D = t.shape[2];
        std::vector<float> out;
        for (int64_t r = 0; r < B * S; ++r)
            if (!with_mask || r / S != 2 || r % S >= 4)
                out.insert(out.end(), v.begin() + r * D, v.begin() + (r + 1) * D);
        return out;
    };
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m);
        for (const char* name : {"hidden_states_2", "hidden_states_5", "hidden_states_6", "last_hidden_state"}) {
            const double err = rel_l2(rows(out.at(name)), rows(ref.at(name)));
            INFO("mask " << with_mask << " " << exec::mode_name(m) << " " << name << " relative L2 " << err);
            CHECK(err <= 1e-5);  // same f32 weights and math; only summation order differs
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Qwen3 streams its layers under a budget, bitwise equal; quantized files match the CPU oracle",
          "[models][qwen3][vulkan]") {
    const std::string dir = test::data_path("fixtures/" + kFixture);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    auto in = test::fixture_inputs(io, {"input_ids", "attention_mask"});
    in["hidden_states_layers"] = layers({-1});  // last_hidden_state: all 3 layers replayed as one kind
    const auto ref = io.read("last_hidden_state").to_f32();
    // Quantization bounds as tests/models/test_quantized.cpp derives them (step / sqrt(12) per weight, a few layers
    // in sequence): q8_0 2%, q4_0 30% relative L2 against transformers' f32 output.
    struct Q {
        DType dt;
        double bound;
    };
    const Q q = GENERATE(Q{DType::f16, 0}, Q{DType::q8_0, 0.02}, Q{DType::q4_0, 0.30});
    CAPTURE(dtype_name(q.dt));
    auto src = models::ModelSource::open(test::convert_fixture(kFixture, q.dt));
    vk::Context& ctx = test::context();
    Tensor resident, streamed;
    {
        test::ScopedEnv upload("KILN_STREAM_IN_PLACE", "0");  // every weight uploaded, all resident
        ctx.set_vram_budget(uint64_t(1) << 50);
        resident = models::forward_component(&ctx, src, "text_encoder", in, exec::Mode::regional)["last_hidden_state"];
        ctx.set_vram_budget(1);  // raised to the minimum working set (two layer slots), with a warning
        streamed = models::forward_component(&ctx, src, "text_encoder", in, exec::Mode::regional)["last_hidden_state"];
        ctx.set_vram_budget(0);
    }
    CHECK(streamed.bytes == resident.bytes);
    if (q.bound > 0) {
        const auto cpu = models::forward_component(nullptr, src, "text_encoder", in)["last_hidden_state"];
        CHECK(rel_l2(resident.to_f32(), cpu.to_f32()) <= 1e-4);  // the oracle dequantizes the same blocks
        const double err = rel_l2(resident.to_f32(), ref);
        std::printf("qwen3_encoder %s: relative L2 vs f32 %.4f\n", dtype_name(q.dt), err);
        CHECK(err <= q.bound);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Qwen3: the Qwen3-4B synthetic architecture builds; bad configs and indices give one line",
          "[models][qwen3]") {
    const auto& arch = models::synthetic_archs().at("qwen3-4b");
    CHECK(arch.cls == "Qwen3Model");
    auto ws = models::synthetic_store(DType::f16);
    {
        ir::Graph g;
        models::Builder b(g, *ws);
        // example_inputs: Z-Image's 512 tokens and hidden_states[-2] = [35]: layers 0..34 replayed, 35 never built.
        auto in =
            models::build_component(b, arch.cls, arch.config, models::example_inputs(arch.cls, arch.config, 1, 0, 0));
        CHECK(g.regions().size() == 35);
        REQUIRE(g.outputs().size() == 1);
        CHECK(g.outputs()[0].first == "hidden_states_35");
        CHECK(g.shape(ir::Val{g.outputs()[0].second}) == Shape{1, 512, 2560});
        CHECK(in.at("key_padding_bias").shape == Shape{1, 1, 512});
        CHECK(in.at("rope_cos").shape == Shape{512, 64});
    }
    auto c = models::qwen3_config(arch.config, "Qwen3ForCausalLM");
    CHECK(c.prefix == "model.");
    CHECK(c.kv_heads == 8);
    CHECK(c.attn_scale == Approx(1 / std::sqrt(128.0)));
    CHECK(models::resolve_hidden_states(c, {27, 9, 18, 9}) == std::vector<int>{9, 18, 27});
    CHECK(models::resolve_hidden_states(c, {-1, -2, -37}) == std::vector<int>{0, 35, 36});
    CHECK_THROWS_WITH(models::resolve_hidden_states(c, {37}),
                      "Qwen3ForCausalLM: hidden_states[37] does not exist (36 layers: hidden_states has 37 entries, "
                      "indices -37..36)");
    auto bad = [&](const char* key, nlohmann::json v) {
        nlohmann::json j = arch.config;
        j[key] = v;
        return models::qwen3_config(j, "Qwen3Model");
    };
    CHECK_THROWS_WITH(bad("hidden_act", "gelu"), "Qwen3Model: hidden_act 'gelu' is not supported (silu)");
    CHECK_THROWS_WITH(bad("use_sliding_window", true), "Qwen3Model: use_sliding_window true is not supported");
    CHECK_THROWS_WITH(bad("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}),
                      Catch::Contains("Qwen3Model: rope_scaling {") && Catch::Contains("is not supported"));
    CHECK_NOTHROW(bad("rope_scaling", {{"rope_type", "default"}}));
    CHECK_THROWS_WITH(bad("num_key_value_heads", 7), Catch::Contains("heads must be a multiple of key/value heads"));
    CHECK_THROWS_WITH(bad("layer_types", {"full_attention", "sliding_attention"}),
                      "Qwen3Model: layer_types entry \"sliding_attention\" is not supported (full_attention)");
}
