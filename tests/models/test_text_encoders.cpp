// CLIPTextModel(WithProjection) and T5EncoderModel parity with transformers 4.47: the text-encoder fixtures
// (clip_text: quick_gelu, argmax pooling; clip_text_gelu: gelu, first-EOS pooling; t5_encoder: with an
// attention mask) and the encoders of the sd3 / flux / pixart pipeline fixtures, on the CPU reference and on
// Vulkan in every JIT mode, from the transformers folders; f16 weights within a bound from io.json.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "models/core/forward.h"
#include "models/text/encoders/t5_encoder.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
using Refs = std::map<std::string, std::vector<float>>;  // Kiln output name -> transformers' values

// The store of a folder with its matrices (rank >= 2) rounded to f16, as a converted f16 Kiln file holds them.
class F16Store : public models::WeightStore {
public:
    explicit F16Store(std::unique_ptr<models::WeightStore> ws) : ws_(std::move(ws)) {}
    const models::TensorMeta* find(const std::string& name) const override {
        const models::TensorMeta* m = ws_->find(name);
        if (!m) return nullptr;
        auto it = meta_.emplace(name, *m).first;
        if (m->shape.size() >= 2) it->second.dtype = DType::f16;
        return &it->second;
    }
    Tensor read(const std::string& name) const override {
        Tensor t = ws_->read(name);
        return t.shape.size() >= 2 ? t.astype(DType::f16) : t;
    }
    std::string source() const override { return ws_->source() + " (f16)"; }

private:
    std::unique_ptr<models::WeightStore> ws_;
    mutable std::map<std::string, models::TensorMeta> meta_;
};

// Runs the graph of `ws` on the CPU reference and on Vulkan in eager, full and regional modes: every output
// in `refs` within `bound` relative L2, the modes bitwise identical. Returns the CPU outputs.
std::map<std::string, Tensor> check_all(const models::WeightStore& ws, const std::string& cls,
                                        const nlohmann::json& cfg, const std::map<std::string, Tensor>& inputs,
                                        const Refs& refs, double bound) {
    ir::Graph g;
    models::Builder b(g, ws);
    auto in = models::build_component(b, cls, cfg, inputs);
    auto cpu_out = cpu::run(g, in, models::cpu_weights(ws, b.constants()));
    for (auto& [name, ref] : refs) {
        double err = rel_l2(cpu_out.at(name).to_f32(), ref);
        INFO(ws.source() << " " << name << " CPU relative L2 " << err);
        CHECK(err <= bound);
    }
    std::map<std::string, Tensor> first;
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m);
        for (auto& [name, ref] : refs) {
            double err = rel_l2(out.at(name).to_f32(), ref);
            INFO(ws.source() << " " << name << " " << exec::mode_name(m) << " relative L2 " << err);
            CHECK(err <= bound);
            if (m == exec::Mode::eager)
                first[name] = out[name];
            else
                CHECK(first[name].bytes == out[name].bytes);  // modes are bitwise identical
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
    return cpu_out;
}

nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
}

double rms(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return std::sqrt(s / (double)v.size());
}

// Rows [start, start + len) of axis 1 of a [B, S, D] tensor.
std::vector<float> rows(const Tensor& t, int64_t start, int64_t len) {
    auto v = t.to_f32();
    const int64_t B = t.shape[0], S = t.shape[1], D = t.shape[2];
    std::vector<float> out;
    for (int64_t b = 0; b < B; ++b)
        out.insert(out.end(), v.begin() + (b * S + start) * D, v.begin() + (b * S + start + len) * D);
    return out;
}
}  // namespace

TEST_CASE("Text-encoder fixtures match transformers (CPU reference, Vulkan in every mode, f32 and f16 weights)",
          "[models][text_encoder][vulkan]") {
    const std::string fx = GENERATE("clip_text", "clip_text_gelu", "t5_encoder");
    const std::string dir = test::data_path("fixtures/" + fx);
    auto src = models::ModelSource::open(dir);
    REQUIRE(src.components() == std::vector<std::string>{"text_encoder"});
    auto io = SafeTensors::open(dir + "/io.safetensors");
    auto in = test::fixture_inputs(io, {"input_ids", "attention_mask"});
    const bool t5 = fx == "t5_encoder";
    CHECK(in.count("attention_mask") == (t5 ? 1u : 0u));
    std::vector<std::string> names = {"last_hidden_state"};
    if (!t5) names.insert(names.end(), {"text_embeds", "penultimate_hidden_state"});
    Refs refs;
    for (auto& n : names) refs[n] = io.read(n).to_f32();

    // f32: f32 weights and activations (the CPU reference accumulates in f64); only transformers' own f32
    // rounding differs (~1e-6), so relative L2 <= 1e-4.
    auto ws = src.weights("text_encoder");
    check_all(*ws, src.class_of("text_encoder"), src.config("text_encoder"), in, refs, 1e-4);

    // f16: weights rounded to f16 exactly as torch's .half(); io.json's weights_fp16_rounded is max|d| of
    // d = out(f16 weights) - out(f32) in transformers. rms(d) <= max|d|, so the relative L2 is at most
    // max|d| / rms(ref) (clip_text: 2.8e-3 / ~1.0), plus 1e-4 for the f32 summation order.
    auto io_json = read_json(dir + "/io.json");
    F16Store ws16(src.weights("text_encoder"));
    for (auto& n : names) {
        double max_d = io_json["tolerance_observed"]["weights_fp16_rounded"][n].get<double>();
        double bound = max_d / rms(refs[n]) + 1e-4;
        INFO(fx << " " << n << " f16 bound " << bound);
        check_all(ws16, src.class_of("text_encoder"), src.config("text_encoder"), in, {{n, refs[n]}}, bound);
    }
}

TEST_CASE("SD3 pipeline text encoders match its io.safetensors", "[models][text_encoder][vulkan]") {
    const std::string dir = test::data_path("fixtures/sd3_pipeline");
    auto src = models::ModelSource::open(dir);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    for (std::string neg : {"", "negative_"}) {
        // CLIP-L and CLIP-G (CLIPTextModelWithProjection): hidden_states[-2] and the projected pooled row.
        for (std::string enc : {"text_encoder", "text_encoder_2"}) {
            auto ws = src.weights(enc);
            std::map<std::string, Tensor> in = {{"input_ids", io.read(enc + "_" + neg + "input_ids")}};
            Refs refs = {{"penultimate_hidden_state", io.read(enc + "_" + neg + "penultimate_hidden_state").to_f32()},
                         {"text_embeds", io.read(enc + "_" + neg + "text_embeds").to_f32()}};
            check_all(*ws, src.class_of(enc), src.config(enc), in, refs, 1e-4);
        }
        // T5 (no attention mask): rows 77.. of prompt_embeds hold its last_hidden_state.
        Tensor pe = io.read(neg + "prompt_embeds");
        auto ws = src.weights("text_encoder_3");
        std::map<std::string, Tensor> in = {{"input_ids", io.read("text_encoder_3_" + neg + "input_ids")}};
        Refs refs = {{"last_hidden_state", rows(pe, 77, pe.shape[1] - 77)}};
        check_all(*ws, src.class_of("text_encoder_3"), src.config("text_encoder_3"), in, refs, 1e-4);
    }
}

TEST_CASE("Flux pipeline text encoders match its io.safetensors", "[models][text_encoder][vulkan]") {
    const std::string dir = test::data_path("fixtures/flux_pipeline");
    auto src = models::ModelSource::open(dir);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    REQUIRE(src.class_of("text_encoder") == "CLIPTextModel");
    auto clip = src.weights("text_encoder");
    check_all(*clip, "CLIPTextModel", src.config("text_encoder"), {{"input_ids", io.read("text_encoder_input_ids")}},
              {{"pooler_output", io.read("text_encoder_pooler_output").to_f32()}}, 1e-4);
    // T5 over 512 tokens without a mask: distances up to 511 reach every log-spaced bucket.
    auto t5 = src.weights("text_encoder_2");
    check_all(*t5, "T5EncoderModel", src.config("text_encoder_2"), {{"input_ids", io.read("text_encoder_2_input_ids")}},
              {{"last_hidden_state", io.read("prompt_embeds").to_f32()}}, 1e-4);
}

TEST_CASE("PixArt pipeline T5 with its attention mask matches its io.safetensors", "[models][text_encoder][vulkan]") {
    const std::string dir = test::data_path("fixtures/pixart_pipeline");
    auto src = models::ModelSource::open(dir);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    auto ws = src.weights("text_encoder");
    for (std::string neg : {"", "negative_"}) {
        std::map<std::string, Tensor> in = {{"input_ids", io.read("text_encoder_" + neg + "input_ids")},
                                            {"attention_mask", io.read(neg + "prompt_attention_mask")}};
        check_all(*ws, "T5EncoderModel", src.config("text_encoder"), in,
                  {{"last_hidden_state", io.read(neg + "prompt_embeds").to_f32()}}, 1e-4);
    }
}

TEST_CASE("Text encoders with replayed layers and masks: Vulkan matches the CPU reference",
          "[models][text_encoder][vulkan]") {
    // CLIP with an attention mask (padded keys, including one below the diagonal) over 5 layers (4 replayed),
    // and T5 with gated-silu over 3 replayed blocks, other bucket settings and 40 tokens; synthetic weights.
    struct Case {
        std::string cls;
        nlohmann::json cfg;
    };
    const Case c = GENERATE(Case{"CLIPTextModel",
                                 {{"vocab_size", 100},
                                  {"hidden_size", 48},
                                  {"intermediate_size", 80},
                                  {"num_attention_heads", 3},
                                  {"num_hidden_layers", 5},
                                  {"max_position_embeddings", 40},
                                  {"hidden_act", "gelu_new"},
                                  {"eos_token_id", 99}}},
                            Case{"T5EncoderModel",
                                 {{"vocab_size", 100},
                                  {"d_model", 40},
                                  {"d_kv", 12},
                                  {"d_ff", 56},
                                  {"num_heads", 3},
                                  {"num_layers", 3},
                                  {"relative_attention_num_buckets", 16},
                                  {"relative_attention_max_distance", 20},
                                  {"feed_forward_proj", "gated-silu"}}});
    auto ws = models::synthetic_store(DType::f32, 5);
    const int B = 2, S = 40;
    Tensor ids(DType::i64, {B, S}), mask(DType::i64, {B, S});
    for (int i = 0; i < B * S; ++i) {
        ids.data<int64_t>()[i] = (i * 37) % 99;
        mask.data<int64_t>()[i] = (i % S) < (i < S ? 30 : 17) && i != S + 3;
    }
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, c.cls, c.cfg, {{"input_ids", ids}, {"attention_mask", mask}});
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m);
        for (auto& [name, t] : ref) {
            double err = rel_l2(out.at(name).to_f32(), t.to_f32());
            INFO(c.cls << " " << name << " " << exec::mode_name(m) << " relative L2 " << err);
            CHECK(err <= 1e-5);  // same f32 weights and math; only summation order differs
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("T5 relative position buckets follow transformers' _relative_position_bucket", "[models][text_encoder]") {
    models::T5Config c;  // 32 buckets, max distance 128: 16 per direction, exact below 8, log-spaced to 128
    Tensor t = models::t5_relative_buckets(c, 300);
    auto at = [&](int i, int j) { return t.data<int32_t>()[i * 300 + j]; };
    CHECK(at(0, 0) == 0);
    CHECK(at(5, 0) == 5);     // key 5 before the query: exact bucket
    CHECK(at(0, 5) == 21);    // after: upper half
    CHECK(at(16, 0) == 10);   // 8 + int(log(2) / log(16) * 8) = 8 + 2
    CHECK(at(0, 32) == 28);   // 16 + 8 + int(log(4) / log(16) * 8) = 16 + 12
    CHECK(at(299, 0) == 15);  // beyond max distance: the last bucket of its half
    CHECK(at(0, 299) == 31);
}

TEST_CASE("Text-encoder synthetic archs build at their native sizes", "[models][text_encoder]") {
    struct Want {
        const char* arch;
        Shape out;
        size_t regions;
    };
    const Want w = GENERATE(Want{"clip-l", {1, 77, 768}, 11}, Want{"clip-g", {1, 77, 1280}, 31},
                            Want{"t5-xxl", {1, 512, 4096}, 24});
    const auto& arch = models::synthetic_archs().at(w.arch);
    auto ws = models::synthetic_store(DType::f16);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, arch.cls, arch.config, models::example_inputs(arch.cls, arch.config, 1, 0, 0));
    CHECK(g.regions().size() == w.regions);
    for (auto& [name, v] : g.outputs())
        if (name == "last_hidden_state") CHECK(g.shape(ir::Val{v}) == w.out);
}

TEST_CASE("CLIP clip_skip: hidden_states[-(k + 2)], the penultimate state of the model cut k layers short",
          "[models][text_encoder][vulkan]") {
    // Synthetic weights are named per layer, so a config with fewer layers holds the same first layers.
    auto cfg = [](int layers) {
        return nlohmann::json{{"vocab_size", 100},           {"hidden_size", 48},
                              {"intermediate_size", 80},     {"num_attention_heads", 3},
                              {"num_hidden_layers", layers}, {"max_position_embeddings", 24},
                              {"hidden_act", "quick_gelu"},  {"eos_token_id", 99}};
    };
    auto ws = models::synthetic_store(DType::f32, 7);
    const int B = 2, S = 24, L = 5;
    Tensor ids(DType::i64, {B, S});
    for (int i = 0; i < B * S; ++i) ids.data<int64_t>()[i] = (i * 37) % 99;
    auto cpu_out = [&](int layers, int skip) {
        ir::Graph g;
        models::Builder b(g, *ws);
        auto in = models::build_component(b, "CLIPTextModel", cfg(layers), {{"input_ids", ids}}, {skip});
        return cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    };
    const auto plain = cpu_out(L, 0);
    CHECK(!plain.count("clip_skip_hidden_state"));
    for (int k : {1, 2, L - 1}) {  // L - 1: hidden_states[0], the embeddings (no layer replayed)
        INFO("clip_skip " << k);
        auto out = cpu_out(L, k);
        CHECK(out.at("clip_skip_hidden_state").bytes == cpu_out(L - k, 0).at("penultimate_hidden_state").bytes);
        for (const char* name : {"penultimate_hidden_state", "last_hidden_state", "pooler_output"})
            CHECK(out.at(name).bytes == plain.at(name).bytes);  // the other outputs do not move
        // The JIT, whose regions stop k layers earlier: their carried residual is the output.
        ir::Graph g;
        models::Builder b(g, *ws);
        auto in = models::build_component(b, "CLIPTextModel", cfg(L), {{"input_ids", ids}}, {k});
        for (exec::Mode m : {exec::Mode::full, exec::Mode::regional}) {
            auto dev = exec::run_graph(test::context(), g, b.weight_fn(), in,
                                       m == exec::Mode::regional && g.regions().size() < 2 ? exec::Mode::full : m);
            for (auto& [name, t] : out) {
                const double err = rel_l2(dev.at(name).to_f32(), t.to_f32());
                INFO(name << " " << exec::mode_name(m) << " relative L2 " << err);
                CHECK(err <= 1e-5);  // f32 both sides; summation order only
            }
        }
    }
    ir::Graph g;
    models::Builder b(g, *ws);
    CHECK_THROWS_WITH(models::build_component(b, "CLIPTextModel", cfg(L), {{"input_ids", ids}}, {L}),
                      Catch::Contains("clip_skip 5 for a CLIP text model of 5 layers (0..4"));
    CHECK_THROWS_WITH(models::build_component(b, "T5EncoderModel", nlohmann::json::object(), {{"input_ids", ids}}, {1}),
                      Catch::Contains("clip_skip applies to CLIP text models"));
    CHECK(vk::Context::validation_errors() == 0);
}
