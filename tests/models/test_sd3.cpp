// SD3Transformer2DModel parity with diffusers (fixtures `sd3`, `sd3_qknorm_dual`: SD3.5's per-head RMS qk norm
// and a dual-attention block): CPU reference, and Vulkan in every JIT mode from a converted Kiln file (f32
// and f16 weights); a non-square latent and replayed block runs, CPU reference vs Vulkan.
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
const std::vector<std::string> kInputs = {"hidden_states", "encoder_hidden_states", "pooled_projections", "timestep"};
}

TEST_CASE("SD3 matches diffusers on the CPU reference", "[models][sd3]") {
    test::check_cpu_parity(GENERATE("sd3", "sd3_qknorm_dual"), kInputs);
}

TEST_CASE("SD3 matches diffusers on Vulkan in every JIT mode", "[models][sd3][vulkan]") {
    // f16: weights rounded to f16; io.json observed max |diff| 1.2e-3 (sd3) and 1.8e-3 (sd3_qknorm_dual) on
    // outputs of absmax 3.2 and 3.8 (<= 4.8e-4 of absmax) -> relative L2 bound 2e-3 (4x margin).
    test::check_vulkan_parity(GENERATE("sd3", "sd3_qknorm_dual"), kInputs, 2e-3);
}

TEST_CASE("SD3 on a non-square latent: Vulkan matches the CPU reference", "[models][sd3][vulkan]") {
    std::string fx = GENERATE("sd3", "sd3_qknorm_dual");
    auto src = models::ModelSource::open(test::data_path("fixtures/" + fx));
    // 8 x 12 latent (4 x 6 patches, an off-centre crop of the 16 x 16 table), 333 text tokens.
    auto in = models::example_inputs("SD3Transformer2DModel", src.config("transformer"), 2, 8, 12);
    auto ref = models::forward_component(nullptr, src, "transformer", in);
    auto out = models::forward_component(&test::context(), src, "transformer", in, exec::Mode::regional);
    REQUIRE(out["sample"].shape == (Shape{2, 4, 8, 12}));
    double err = rel_l2(out["sample"].to_f32(), ref["sample"].to_f32());
    INFO(fx << " relative L2 " << err);
    CHECK(err <= 1e-5);  // same f32 weights and math; only summation order differs
    CHECK(vk::Context::validation_errors() == 0);
}

namespace {
// SD3.5-like: blocks 0-1 dual attention, 2-4 plain, 5 context_pre_only (two replayed kinds, an inline last block).
nlohmann::json sd35_like_config() {
    return {{"num_attention_heads", 2},
            {"attention_head_dim", 16},
            {"num_layers", 6},
            {"in_channels", 4},
            {"out_channels", 4},
            {"sample_size", 8},
            {"joint_attention_dim", 40},
            {"caption_projection_dim", 32},
            {"pooled_projection_dim", 24},
            {"pos_embed_max_size", 16},
            {"qk_norm", "rms_norm"},
            {"dual_attention_layers", {0, 1}}};
}
}  // namespace

TEST_CASE("SD3.5-like block runs replay in the regional JIT: Vulkan matches the CPU reference",
          "[models][sd3][vulkan]") {
    // Blocks 0-1 dual attention, 2-4 plain, 5 context_pre_only: two replayed kinds and an inline last block.
    const nlohmann::json cfg = sd35_like_config();
    auto ws = models::synthetic_store(DType::f32, 3);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, "SD3Transformer2DModel", cfg,
                                      models::example_inputs("SD3Transformer2DModel", cfg, 2, 10, 6));
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    Tensor first;
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m);
        double err = rel_l2(out["sample"].to_f32(), ref["sample"].to_f32());
        INFO(exec::mode_name(m) << " relative L2 " << err);
        CHECK(err <= 1e-5);
        if (m == exec::Mode::eager)
            first = out["sample"];
        else
            CHECK(first.bytes == out["sample"].bytes);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("sd3-medium-1024 synthetic arch builds at its native size", "[models][sd3]") {
    const auto& arch = models::synthetic_archs().at("sd3-medium-1024");
    auto ws = models::synthetic_store(DType::f16);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, arch.cls, arch.config,
                                      models::example_inputs(arch.cls, arch.config, 1, arch.latent, arch.latent));
    CHECK(in.at("encoder_hidden_states").shape == (Shape{1, 333, 4096}));
    CHECK(g.regions().size() == 23);  // the last block (context_pre_only) runs inline
    CHECK(g.shape(ir::Val{g.outputs().at(0).second}) == (Shape{1, 16, 128, 128}));
}

TEST_CASE("SD3 skip_layers (skip-layer guidance's call): blocks left out, both streams passing them unchanged",
          "[models][sd3][vulkan]") {
    const nlohmann::json cfg = sd35_like_config();
    auto ws = models::synthetic_store(DType::f32, 3);
    const auto inputs = models::example_inputs("SD3Transformer2DModel", cfg, 2, 10, 6);
    auto cpu_sample = [&](const std::vector<int>& skip, const std::map<std::string, Tensor>& in) {
        ir::Graph g;
        models::Builder b(g, *ws);
        models::ComponentOptions co;
        co.skip_layers = skip;
        auto gin = models::build_component(b, "SD3Transformer2DModel", cfg, in, co);
        return cpu::run(g, gin, models::cpu_weights(*ws, b.constants())).at("sample");
    };
    // Skipping 1 and 3 leaves runs {0} dual, {2, 4} plain with a gap, and the last block inline: the regional JIT
    // replays the runs across the gap as the CPU reference computes them.
    {
        ir::Graph g;
        models::Builder b(g, *ws);
        models::ComponentOptions co;
        co.skip_layers = {1, 3};
        auto gin = models::build_component(b, "SD3Transformer2DModel", cfg, inputs, co);
        CHECK(g.regions().size() == 3);
        const Tensor ref = cpu::run(g, gin, models::cpu_weights(*ws, b.constants())).at("sample");
        CHECK(ref.bytes != cpu_sample({}, inputs).bytes);
        for (exec::Mode m : {exec::Mode::eager, exec::Mode::regional}) {
            auto out = exec::run_graph(test::context(), g, b.weight_fn(), gin, m);
            const double err = rel_l2(out["sample"].to_f32(), ref.to_f32());
            INFO(exec::mode_name(m) << " relative L2 " << err);
            CHECK(err <= 1e-5);  // f32 both sides; summation order only
        }
    }
    // Every block skipped: nothing reads the text any more (the context stream only feeds the blocks).
    auto other = inputs;
    for (int64_t i = 0; i < other["encoder_hidden_states"].numel(); ++i)
        other["encoder_hidden_states"].data<float>()[i] += 0.5f;
    const std::vector<int> all{0, 1, 2, 3, 4, 5};
    CHECK(cpu_sample(all, inputs).bytes == cpu_sample(all, other).bytes);
    CHECK(cpu_sample({}, inputs).bytes != cpu_sample({}, other).bytes);
    CHECK_THROWS_WITH(cpu_sample({6}, inputs), Catch::Contains("skip layer 6 is not a block (0..5)"));
    CHECK(vk::Context::validation_errors() == 0);
}
