// FluxTransformer2DModel parity with diffusers (fixtures `flux`: guidance, 1 double + 2 single blocks;
// `flux_noguidance`: 2 double + 1 single): CPU reference, and Vulkan in every JIT mode from a converted Kiln
// file (f32 and f16 weights); another head count / sequence length / id layout, CPU reference vs Vulkan.
#include <catch2/catch.hpp>
#include <filesystem>

#include "converter/convert.h"
#include "models/core/forward.h"
#include "models/transformers/flux.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
const std::vector<std::string> kInputs = {
    "hidden_states", "encoder_hidden_states", "pooled_projections", "timestep", "img_ids", "txt_ids",
    "guidance"};  // guidance only where present
}

TEST_CASE("Flux matches diffusers on the CPU reference", "[models][flux]") {
    test::check_cpu_parity(GENERATE("flux", "flux_noguidance"), kInputs);
}

TEST_CASE("Flux matches diffusers on Vulkan in every JIT mode", "[models][flux][vulkan]") {
    // f16: weights rounded to f16; io.json observed max |diff| 2.1e-3 (flux) and 2.6e-3 (flux_noguidance) on
    // outputs of absmax 3.45 and 3.21 (<= 8e-4 of absmax) -> relative L2 bound 2e-3 (2.5x margin over the
    // max-abs ratio, which bounds the L2 ratio).
    test::check_vulkan_parity(GENERATE("flux", "flux_noguidance"), kInputs, 2e-3);
}

TEST_CASE("Flux with other heads, sequence lengths and ids: Vulkan matches the CPU reference",
          "[models][flux][vulkan]") {
    // 3 heads x 8 (rope axes 2+2+4), 3 double + 2 single blocks (both kinds replayed), a 3 x 7 grid of image
    // tokens and 6 text tokens with non-zero ids, batch 1, guidance.
    nlohmann::json cfg = {{"num_attention_heads", 3},   {"attention_head_dim", 8},     {"num_layers", 3},
                          {"num_single_layers", 2},     {"in_channels", 12},           {"out_channels", 8},
                          {"joint_attention_dim", 20},  {"pooled_projection_dim", 10}, {"guidance_embeds", true},
                          {"axes_dims_rope", {2, 2, 4}}};
    const int64_t S_img = 21, S_txt = 6;
    std::map<std::string, Tensor> raw = {{"hidden_states", test::random_tensor({1, S_img, 12}, 1)},
                                         {"encoder_hidden_states", test::random_tensor({1, S_txt, 20}, 2)},
                                         {"pooled_projections", test::random_tensor({1, 10}, 3)},
                                         {"timestep", Tensor::from_f32({1}, {0.37f})},
                                         {"guidance", Tensor::from_f32({1}, {4.f})}};
    Tensor img(DType::f32, {S_img, 3}), txt(DType::f32, {S_txt, 3});
    for (int64_t i = 0; i < S_img; ++i)
        img.data<float>()[i * 3 + 1] = (float)(i / 7), img.data<float>()[i * 3 + 2] = (float)(i % 7);
    for (int64_t i = 0; i < S_txt * 3; ++i) txt.data<float>()[i] = (float)(i % 5);
    raw["img_ids"] = img;
    raw["txt_ids"] = txt;
    auto ws = models::synthetic_store(DType::f32, 5);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, "FluxTransformer2DModel", cfg, raw);
    CHECK(g.regions().size() == 5);
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    REQUIRE(ref["sample"].shape == (Shape{1, S_img, 8}));
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

TEST_CASE("Flux rope tables follow FluxPosEmbed", "[models][flux]") {
    // Axes dims (2, 2, 4): one frequency for each of the first two axes, theta^0 and theta^(-1/2) for the third.
    models::FluxConfig c;
    c.head_dim = 8;
    c.axes_dims_rope = {2, 2, 4};
    Tensor txt(DType::f32, {1, 3}), img = Tensor::from_f32({1, 3}, {0.f, 2.f, 3.f});
    auto [cos, sin] = models::flux_rope_tables(c, txt, img);
    REQUIRE(cos.shape == (Shape{2, 4}));
    for (int i = 0; i < 4; ++i) {
        CHECK(cos.data<float>()[i] == 1.f);
        CHECK(sin.data<float>()[i] == 0.f);
    }
    const double a[4] = {0.0, 2.0, 3.0, 3.0 / 100.0};
    for (int i = 0; i < 4; ++i) {
        CHECK(cos.data<float>()[4 + i] == (float)std::cos(a[i]));
        CHECK(sin.data<float>()[4 + i] == (float)std::sin(a[i]));
    }
}

TEST_CASE("flux-dev-1024 synthetic arch builds at its native size", "[models][flux]") {
    const auto& arch = models::synthetic_archs().at("flux-dev-1024");
    auto ws = models::synthetic_store(DType::f16);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, arch.cls, arch.config,
                                      models::example_inputs(arch.cls, arch.config, 1, arch.latent, arch.latent));
    CHECK(in.at("hidden_states").shape == (Shape{1, 4096, 64}));
    CHECK(in.at("encoder_hidden_states").shape == (Shape{1, 512, 4096}));
    CHECK(in.at("rope_cos").shape == (Shape{4608, 64}));
    CHECK(g.regions().size() == 19 + 38);
    CHECK(g.shape(ir::Val{g.outputs().at(0).second}) == (Shape{1, 4096, 64}));
}
