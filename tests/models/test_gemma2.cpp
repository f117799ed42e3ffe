// Gemma2Model (Sana's text encoder) parity with transformers 4.47.1: the gemma2_encoder fixture (GQA, head_dim *
// heads != hidden, query_pre_attn_scalar, soft-capping, a sliding window shorter than the sequence, right padding)
// on the CPU reference and on Vulkan in every JIT mode, f32 weights from the folder and f16 weights from a converted
// Kiln file; replayed layer pairs on synthetic weights; the host-side masks and RoPE tables; bad configs.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <limits>

#include "models/core/forward.h"
#include "models/text/encoders/gemma2.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
// The rows of a [B, S, D] tensor whose attention_mask is 1. A padded query row is implementation-defined
// (transformers averages every key where the sliding window holds no valid one), so only valid rows are compared.
std::vector<float> valid_rows(const Tensor& t, const Tensor& mask) {
    auto v = t.to_f32();
    auto m = mask.astype(DType::i64);
    const int64_t D = t.shape[2];
    std::vector<float> out;
    for (int64_t r = 0; r < m.numel(); ++r)
        if (m.data<int64_t>()[r]) out.insert(out.end(), v.begin() + r * D, v.begin() + (r + 1) * D);
    return out;
}

double rms(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return std::sqrt(s / (double)v.size());
}

const std::string kFixture = "gemma2_encoder";
}  // namespace

TEST_CASE("Gemma2Model matches transformers (CPU reference, Vulkan in every mode, f32 and f16 weights)",
          "[models][gemma2][vulkan]") {
    const std::string dir = test::data_path("fixtures/" + kFixture);
    auto io = SafeTensors::open(dir + "/io.safetensors");
    auto in = test::fixture_inputs(io, {"input_ids", "attention_mask"});
    REQUIRE(in.size() == 2);
    const Tensor& mask = in.at("attention_mask");
    const auto ref = valid_rows(io.read("last_hidden_state"), mask);
    REQUIRE(ref.size() == (16 + 11 + 3) * 64u);  // io.json valid_tokens_per_row

    // f32: f32 weights and activations (the CPU reference accumulates in f64, Vulkan in f32 over K <= 128); only
    // transformers' own f32 rounding differs (io.json: 3e-6 max against a float64 re-implementation), so relative
    // L2 <= 1e-4.
    auto folder = models::ModelSource::open(dir);
    REQUIRE(folder.components() == std::vector<std::string>{"text_encoder"});
    REQUIRE(folder.class_of("text_encoder") == "Gemma2Model");
    auto cpu = models::forward_component(nullptr, folder, "text_encoder", in);
    const double cpu_err = rel_l2(valid_rows(cpu.at("last_hidden_state"), mask), ref);
    INFO("CPU relative L2 " << cpu_err);
    CHECK(cpu_err <= 1e-4);

    // f16: io.json's weights_fp16_rounded is max|d| of d = out(f16 weights) - out(f32) in transformers; rms(d) <=
    // max|d|, so the relative L2 is at most max|d| / rms(ref) (3.8e-3 / ~1), plus 1e-4 for the f32 summation order.
    std::ifstream jf(dir + "/io.json");
    const auto io_json = nlohmann::json::parse(jf);
    const double f16_bound =
        io_json["tolerance_observed"]["weights_fp16_rounded"]["last_hidden_state"].get<double>() / rms(ref) + 1e-4;
    for (DType dt : {DType::f32, DType::f16}) {
        auto src = models::ModelSource::open(test::convert_fixture(kFixture, dt));
        Tensor first;
        for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
            auto out = models::forward_component(&test::context(), src, "text_encoder", in, m);
            const Tensor& h = out.at("last_hidden_state");
            const double err = rel_l2(valid_rows(h, mask), ref);
            INFO(dtype_name(dt) << " " << exec::mode_name(m) << " relative L2 " << err << " (f16 bound " << f16_bound
                                << ")");
            CHECK(err <= (dt == DType::f32 ? 1e-4 : f16_bound));
            if (m == exec::Mode::eager)
                first = h;
            else
                CHECK(first.bytes == h.bytes);  // modes are bitwise identical
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Gemma2Model layer pairs replayed: Vulkan matches the CPU reference", "[models][gemma2][vulkan]") {
    // 5 layers: two (sliding, global) pairs replayed, then a lone sliding layer; 23 tokens over a window of 7, right
    // padding (row 1 keeps 9 tokens), GQA 3 q heads per kv head. Then without soft-capping and without GQA.
    nlohmann::json cfg = {{"vocab_size", 97},         {"hidden_size", 40},
                          {"intermediate_size", 56},  {"num_hidden_layers", 5},
                          {"num_attention_heads", 6}, {"num_key_value_heads", 2},
                          {"head_dim", 12},           {"query_pre_attn_scalar", 16},
                          {"sliding_window", 7},      {"attn_logit_softcapping", 1.5}};
    const bool variant = GENERATE(false, true);
    if (variant) {
        cfg["attn_logit_softcapping"] = nullptr;
        cfg["num_key_value_heads"] = 6;
    }
    auto ws = models::synthetic_store(DType::f32, 11);
    const int B = 2, S = 23;
    Tensor ids(DType::i64, {B, S}), mask(DType::i64, {B, S});
    for (int i = 0; i < B * S; ++i) {
        ids.data<int64_t>()[i] = (i * 37) % 97;
        mask.data<int64_t>()[i] = i < S || i % S < 9;
    }
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, "Gemma2Model", cfg, {{"input_ids", ids}, {"attention_mask", mask}});
    CHECK(g.regions().size() == 3);
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants())).at("last_hidden_state");
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m).at("last_hidden_state");
        // Every row, padded ones too: row 1's padded queries i >= 15 have no valid key in a sliding window (all
        // logits finfo.min), a uniform average on both sides alike.
        const double err = rel_l2(out.to_f32(), ref.to_f32());
        INFO("variant " << variant << " " << exec::mode_name(m) << " relative L2 " << err);
        CHECK(err <= 1e-5);  // same f32 weights and math; only summation order differs
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Gemma2Model host inputs: masks, RoPE tables, token ids", "[models][gemma2]") {
    models::Gemma2Config c;
    c.layers = 3, c.head_dim = 8, c.sliding_window = 3, c.vocab_size = 50;
    Tensor ids(DType::i64, {1, 6}), mask(DType::i64, {1, 6});
    for (int i = 0; i < 6; ++i) ids.data<int64_t>()[i] = i + 1, mask.data<int64_t>()[i] = i < 5;
    auto in = models::gemma2_encoder_inputs(c, ids, &mask);
    const float lo = std::numeric_limits<float>::lowest();
    auto at = [&](const char* name, int i, int j) { return in.at(name).data<float>()[i * 6 + j]; };
    CHECK(at("attention_bias", 4, 0) == 0.f);          // global: every earlier valid key
    CHECK(at("attention_bias", 2, 3) == lo);           // causal
    CHECK(at("attention_bias", 5, 5) == lo);           // padded key
    CHECK(at("sliding_attention_bias", 4, 2) == 0.f);  // i - j = 2 < window 3
    CHECK(at("sliding_attention_bias", 4, 1) == lo);   // i - j = 3: outside the window
    CHECK(in.at("input_ids").dtype == DType::i32);
    // cos/sin [S, head_dim/2]: angle t * 10000^(-2i/8).
    CHECK(in.at("rope_cos").shape == Shape{6, 4});
    CHECK(in.at("rope_cos").data<float>()[1 * 4 + 0] == (float)std::cos(1.0));
    CHECK(in.at("rope_sin").data<float>()[5 * 4 + 2] == Approx(std::sin(5 * 0.01)).epsilon(1e-6));
    // One layer has no global layer: no "attention_bias" input.
    c.layers = 1;
    CHECK(!models::gemma2_encoder_inputs(c, ids, nullptr).count("attention_bias"));
    ids.data<int64_t>()[2] = 50;
    CHECK_THROWS_WITH(models::gemma2_encoder_inputs(c, ids, nullptr),
                      Catch::Contains("Gemma2Model: token id 50 outside the vocabulary of 50"));
}

TEST_CASE("Gemma2Model: the gemma-2-2b synthetic architecture builds; bad configs give one line", "[models][gemma2]") {
    const auto& arch = models::synthetic_archs().at("gemma2-2b");
    auto c = models::Gemma2Config::from_json(arch.config);
    auto ws = models::synthetic_store(DType::q8_0);
    ir::Graph g;
    models::Builder b(g, *ws);
    models::build_gemma2_encoder(b, c, 1, 300);  // the graph only: the vocabulary table is never built here
    CHECK(g.regions().size() == 13);             // 26 layers as 13 (sliding, global) pairs
    REQUIRE(g.outputs().size() == 1);
    CHECK(g.shape(ir::Val{g.outputs()[0].second}) == Shape{1, 300, 2304});
    auto in = models::example_inputs(arch.cls, arch.config, 2, 0, 0);
    CHECK(in.at("input_ids").shape == Shape{2, 300});
    CHECK(in.at("attention_mask").shape == Shape{2, 300});

    auto bad = [](nlohmann::json j) {
        j["hidden_size"] = 64;
        return models::Gemma2Config::from_json(j);
    };
    CHECK_THROWS_WITH(bad({{"hidden_activation", "relu"}}),
                      "Gemma2Model: hidden_activation 'relu' is not supported (gelu_pytorch_tanh)");
    CHECK_THROWS_WITH(bad({{"attention_bias", true}}),
                      "Gemma2Model: attention_bias true is not supported (q/k/v/o without bias)");
    CHECK_THROWS_WITH(bad({{"num_attention_heads", 6}, {"num_key_value_heads", 4}}),
                      Catch::Contains("heads must be a multiple of key/value heads"));
    CHECK_THROWS_WITH(bad({{"head_dim", "24"}}), Catch::Contains("'head_dim' has the wrong type"));
}
