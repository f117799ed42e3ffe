// DiTTransformer2DModel parity with diffusers (fixture `dit`, f32 weights): CPU reference and Vulkan.
#include <catch2/catch.hpp>

#include "models/dit.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

TEST_CASE("DiT matches diffusers on the CPU reference", "[models][dit]") {
    nlohmann::json cfg;
    auto ws = models::open_diffusers_component(test::data_path("fixtures/dit"), &cfg);
    auto io = SafeTensors::open(test::data_path("fixtures/dit/io.safetensors"));
    Tensor x = io.read("hidden_states");
    auto c = models::DiTConfig::from_json(cfg);
    ir::Graph g;
    models::Builder b(g, *ws);
    models::build_dit(b, c, (int)x.shape[0], (int)x.shape[2], (int)x.shape[3]);
    std::map<std::string, Tensor> in = {{"hidden_states", x},
                                        {"timestep", io.read("timestep").astype(DType::f32)},
                                        {"class_labels", io.read("class_labels").astype(DType::i32)}};
    auto out = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    // f32 weights and activations, f64 accumulation: diffusers' own f32 rounding dominates (~1e-6).
    double err = rel_l2(out["sample"].to_f32(), io.read("sample").to_f32());
    INFO("relative L2 error " << err);
    CHECK(err <= 1e-4);
}
