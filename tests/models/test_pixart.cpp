// PixArtTransformer2DModel parity with diffusers (fixture `pixart`): CPU reference, and Vulkan in every JIT
// mode from a converted Kiln file (f32 and f16 weights); a non-square latent, CPU reference vs Vulkan.
#include <catch2/catch.hpp>
#include <filesystem>

#include "converter/convert.h"
#include "models/forward.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
std::map<std::string, Tensor> pixart_inputs(const SafeTensors& io) {
    return {{"hidden_states", io.read("hidden_states")},
            {"encoder_hidden_states", io.read("encoder_hidden_states")},
            {"encoder_attention_mask", io.read("encoder_attention_mask")},
            {"timestep", io.read("timestep")}};
}
}  // namespace

TEST_CASE("PixArt matches diffusers on the CPU reference", "[models][pixart]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/pixart"));
    auto io = SafeTensors::open(test::data_path("fixtures/pixart/io.safetensors"));
    auto out = models::forward_component(nullptr, src, "transformer", pixart_inputs(io));
    // f32 weights and activations, f64 accumulation: only diffusers' own f32 rounding differs (~1e-6).
    double err = rel_l2(out["sample"].to_f32(), io.read("sample").to_f32());
    INFO("relative L2 error " << err);
    CHECK(err <= 1e-4);
}

TEST_CASE("PixArt matches diffusers on Vulkan in every JIT mode", "[models][pixart][vulkan]") {
    auto io = SafeTensors::open(test::data_path("fixtures/pixart/io.safetensors"));
    const auto ref = io.read("sample").to_f32();
    auto dir = std::filesystem::temp_directory_path() / "kiln_test_pixart";
    std::filesystem::create_directories(dir);
    for (DType dt : {DType::f32, DType::f16}) {
        std::string file = (dir / (std::string("pixart_") + dtype_name(dt) + ".kiln")).string();
        converter::Options opt;
        opt.dtype = dt;
        opt.quiet = true;
        converter::convert_folder(test::data_path("fixtures/pixart"), file, opt);
        auto src = models::ModelSource::open(file);
        Tensor first;
        for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
            auto out = models::forward_component(&test::context(), src, "transformer", pixart_inputs(io), m);
            double err = rel_l2(out["sample"].to_f32(), ref);
            INFO(dtype_name(dt) << " " << exec::mode_name(m) << " relative L2 " << err);
            // f32: as the CPU reference. f16: weights rounded to f16; io.json observed max |diff| 2.7e-3 on
            // outputs of absmax 4.9 (5.5e-4 of absmax) -> relative L2 bound 2e-3 (3.6x margin).
            CHECK(err <= (dt == DType::f32 ? 1e-4 : 2e-3));
            if (m == exec::Mode::eager)
                first = out["sample"];
            else
                CHECK(first.bytes == out["sample"].bytes);  // modes are bitwise identical
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
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
