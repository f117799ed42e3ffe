// PixArtTransformer2DModel parity with diffusers (fixture `pixart`): CPU reference, and Vulkan in every JIT
// mode from a converted Kiln file (f32 and f16 weights); a non-square latent, CPU reference vs Vulkan.
#include <catch2/catch.hpp>
#include <filesystem>

#include "converter/convert.h"
#include "models/core/forward.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
const std::vector<std::string> kInputs = {"hidden_states", "encoder_hidden_states", "encoder_attention_mask",
                                          "timestep"};
}

TEST_CASE("PixArt matches diffusers on the CPU reference", "[models][pixart]") {
    test::check_cpu_parity("pixart", kInputs);
}

TEST_CASE("PixArt matches diffusers on Vulkan in every JIT mode", "[models][pixart][vulkan]") {
    // f16: weights rounded to f16; io.json observed max |diff| 2.7e-3 on outputs of absmax 4.9 (5.5e-4 of
    // absmax) -> relative L2 bound 2e-3 (3.6x margin).
    test::check_vulkan_parity("pixart", kInputs, 2e-3);
}

TEST_CASE("PixArt on a non-square latent: Vulkan matches the CPU reference", "[models][pixart][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/pixart"));
    // 8 x 12 latent (4 x 6 patches), 300 text tokens of which 120 are unmasked.
    auto in = models::example_inputs("PixArtTransformer2DModel", src.config("transformer"), 2, 8, 12);
    auto ref = models::forward_component(nullptr, src, "transformer", in);
    auto out = models::forward_component(&test::context(), src, "transformer", in, exec::Mode::regional);
    REQUIRE(out["sample"].shape == (Shape{2, 8, 8, 12}));
    double err = rel_l2(out["sample"].to_f32(), ref["sample"].to_f32());
    INFO("relative L2 " << err);
    CHECK(err <= 1e-5);  // same f32 weights and math; only summation order differs
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("PixArt with micro-conditions (resolution, aspect ratio): Vulkan matches the CPU reference",
          "[models][pixart][vulkan]") {
    // PixArt-alpha 1024's use_additional_conditions path (no fixture has it): tiny synthetic weights, D = 48.
    nlohmann::json cfg = {{"num_attention_heads", 2}, {"attention_head_dim", 24}, {"num_layers", 3},
                          {"in_channels", 4},         {"out_channels", 8},        {"sample_size", 128},
                          {"caption_channels", 40},   {"cross_attention_dim", 48}};
    auto ws = models::synthetic_store(DType::f32, 7);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, "PixArtTransformer2DModel", cfg,
                                      models::example_inputs("PixArtTransformer2DModel", cfg, 2, 6, 10));
    REQUIRE(in.count("resolution") == 1);
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, exec::Mode::regional);
    double err = rel_l2(out["sample"].to_f32(), ref["sample"].to_f32());
    INFO("relative L2 " << err);
    CHECK(err <= 1e-5);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("pixart-sigma-1024 synthetic arch builds at its native size", "[models][pixart]") {
    const auto& arch = models::synthetic_archs().at("pixart-sigma-1024");
    auto ws = models::synthetic_store(DType::f16);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, arch.cls, arch.config,
                                      models::example_inputs(arch.cls, arch.config, 1, arch.latent, arch.latent));
    CHECK(in.at("encoder_hidden_states").shape == (Shape{1, 300, 4096}));
    CHECK(g.regions().size() == 28);
    CHECK(g.shape(ir::Val{g.outputs().at(0).second}) == (Shape{1, 8, 128, 128}));
}
