// Flux2Transformer2DModel parity with diffusers (fixture `flux2_klein_transformer`: FLUX.2 [klein] scaled down, 1
// double + 2 single blocks, 2 heads x 16, 4 rope axes, no guidance embedding; a 4 x 4 and a 3 x 5 latent): CPU
// reference, and Vulkan in every JIT mode from a converted Kiln file (f32 and f16 weights); other heads, blocks,
// mlp ratio, sequence lengths and a guidance embedding, CPU reference vs Vulkan.
#include <catch2/catch.hpp>
#include <cmath>

#include "models/core/forward.h"
#include "models/transformers/flux2.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
const char* kFixture = "flux2_klein_transformer";
const std::vector<std::string> kInputs = {"hidden_states", "encoder_hidden_states", "timestep", "img_ids", "txt_ids",
                                          "guidance"};  // guidance only where present
// The fixture's second latent: 3 x 5 tokens with their ids.
const test::FixtureCase kNonSquare{{{"hidden_states", "hidden_states_nonsquare"}, {"img_ids", "img_ids_nonsquare"}},
                                   "sample_nonsquare"};
}  // namespace

TEST_CASE("Flux2 matches diffusers on the CPU reference", "[models][flux2]") {
    test::check_cpu_parity(kFixture, kInputs);
    test::check_cpu_parity(kFixture, kInputs, kNonSquare);
}

TEST_CASE("Flux2 matches diffusers on Vulkan in every JIT mode", "[models][flux2][vulkan]") {
    // f16: weights rounded to f16; io.json observed max |diff| 1.28e-3 (sample) and 1.09e-3 (sample_nonsquare) on
    // outputs of absmax 3.49 and 3.07 (3.7e-4 and 3.6e-4 of absmax); a relative L2 sits below that ratio -> bound
    // 1e-3 (2.7x margin).
    test::check_vulkan_parity(kFixture, kInputs, 1e-3);
    test::check_vulkan_parity(kFixture, kInputs, 1e-3, kNonSquare);
}

TEST_CASE("Flux2 rope tables follow Flux2PosEmbed", "[models][flux2]") {
    // diffusers' pos_embed(img_ids[0])[0]: cos [N, head_dim], each value twice (repeat_interleave_real).
    auto io = SafeTensors::open(test::data_path(std::string("fixtures/") + kFixture + "/io.safetensors"));
    auto src = models::ModelSource::open(test::data_path(std::string("fixtures/") + kFixture));
    auto c = models::Flux2Config::from_json(src.config("transformer"));
    Tensor no_txt(DType::i64, {0, 4});
    auto [cos, sin] = models::flux2_rope_tables(c, no_txt, io.read("img_ids"));
    const Tensor dbg = io.read("dbg_img_rope_cos");
    const std::vector<float> ref = dbg.to_f32();
    REQUIRE(cos.shape == (Shape{16, 8}));
    REQUIRE(dbg.shape == (Shape{16, 16}));
    double worst = 0;
    for (int64_t s = 0; s < 16; ++s)
        for (int64_t i = 0; i < 16; ++i)
            worst = std::max(worst, (double)std::abs(cos.data<float>()[s * 8 + i / 2] - ref[(size_t)(s * 16 + i)]));
    CHECK(worst <= 1e-7);  // the same f64 angles cast to f32: equal up to libm's last bit
    // Axis dims (4, 4, 4, 4), theta 2000: the second frequency of each axis is 2000^(-1/2).
    Tensor txt = Tensor::from_f32({1, 4}, {1.f, 2.f, 3.f, 5.f}), img(DType::f32, {0, 4});
    auto [tc, ts] = models::flux2_rope_tables(c, txt, img);
    const double f1 = 1.0 / std::pow(2000.0, 2.0 / 4.0), pos[4] = {1, 2, 3, 5};
    for (int a = 0; a < 4; ++a) {
        CHECK(tc.data<float>()[2 * a] == (float)std::cos(pos[a]));
        CHECK(ts.data<float>()[2 * a + 1] == (float)std::sin(pos[a] * f1));
    }
}

TEST_CASE("Flux2 with other heads, blocks, mlp ratio and guidance: Vulkan matches the CPU reference",
          "[models][flux2][vulkan]") {
    // 3 heads x 8 (rope axes 2+2+2+2), 2 double + 3 single blocks (both kinds replayed), mlp_ratio 2.5 (M = 60),
    // 64 timestep channels, a guidance embedding, a 3 x 7 grid of image tokens with t = 1 and 5 text tokens, batch 2.
    nlohmann::json cfg = {{"num_attention_heads", 3},
                          {"attention_head_dim", 8},
                          {"num_layers", 2},
                          {"num_single_layers", 3},
                          {"in_channels", 12},
                          {"out_channels", 8},
                          {"joint_attention_dim", 20},
                          {"timestep_guidance_channels", 64},
                          {"mlp_ratio", 2.5},
                          {"guidance_embeds", true},
                          {"axes_dims_rope", {2, 2, 2, 2}}};
    const int64_t B = 2, S_img = 21, S_txt = 5;
    std::map<std::string, Tensor> raw = {{"hidden_states", test::random_tensor({B, S_img, 12}, 1)},
                                         {"encoder_hidden_states", test::random_tensor({B, S_txt, 20}, 2)},
                                         {"timestep", Tensor::from_f32({B}, {0.37f, 0.81f})},
                                         {"guidance", Tensor::from_f32({B}, {4.f, 2.5f})}};
    Tensor img(DType::i64, {S_img, 4}), txt(DType::i64, {S_txt, 4});
    for (int64_t i = 0; i < S_img; ++i) {
        int64_t* id = img.data<int64_t>() + i * 4;
        id[0] = 1, id[1] = i / 7, id[2] = i % 7, id[3] = 0;
    }
    for (int64_t i = 0; i < S_txt; ++i) txt.data<int64_t>()[i * 4 + 3] = i;
    raw["img_ids"] = img;
    raw["txt_ids"] = txt;
    auto ws = models::synthetic_store(DType::f32, 5);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, "Flux2Transformer2DModel", cfg, raw);
    CHECK(g.regions().size() == 5);
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    REQUIRE(ref["sample"].shape == (Shape{B, S_img, 8}));
    Tensor first;
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m);
        double err = rel_l2(out["sample"].to_f32(), ref["sample"].to_f32());
        INFO(exec::mode_name(m) << " relative L2 " << err);
        CHECK(err <= 1e-5);  // same f32 weights and math; only summation order differs
        if (m == exec::Mode::eager)
            first = out["sample"];
        else
            CHECK(first.bytes == out["sample"].bytes);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Flux2 refuses guidance without a guidance embedding", "[models][flux2]") {
    auto src = models::ModelSource::open(test::data_path(std::string("fixtures/") + kFixture));
    auto io = SafeTensors::open(test::data_path(std::string("fixtures/") + kFixture + "/io.safetensors"));
    auto in = test::fixture_inputs(io, kInputs);
    in["guidance"] = Tensor::from_f32({2}, {4.f, 4.f});
    CHECK_THROWS_WITH(models::forward_component(nullptr, src, "transformer", in),
                      Catch::Contains("'guidance' given but the config has no guidance_embeds"));
}

TEST_CASE("flux2-klein-4b-1024 synthetic arch builds at its native size", "[models][flux2]") {
    const auto& arch = models::synthetic_archs().at("flux2-klein-4b-1024");
    auto ws = models::synthetic_store(DType::f16);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, arch.cls, arch.config,
                                      models::example_inputs(arch.cls, arch.config, 1, arch.latent, arch.latent));
    CHECK(in.at("hidden_states").shape == (Shape{1, 4096, 128}));
    CHECK(in.at("encoder_hidden_states").shape == (Shape{1, 512, 7680}));
    CHECK(in.at("rope_cos").shape == (Shape{512 + 4096, 64}));
    CHECK(in.count("guidance") == 0);
    CHECK(g.regions().size() == 5 + 20);
    CHECK(g.shape(ir::Val{g.outputs().at(0).second}) == (Shape{1, 4096, 128}));
    // Image token (row 1, col 2) of the 64 x 64 grid has ids (0, 1, 2, 0): its h angle (axis 1, frequency 1) is 1.
    CHECK(in.at("rope_cos").data<float>()[(512 + 64 + 2) * 64 + 16] == (float)std::cos(1.0));
}
