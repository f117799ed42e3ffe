// DiTTransformer2DModel parity with diffusers (fixture `dit`): CPU reference, and Vulkan in every JIT
// mode from a converted Kiln file (f32 and f16 weights).
#include "models/dit.h"
#include "tests/models/model_harness.h"

using namespace kiln;

namespace {
const std::vector<std::string> kInputs = {"hidden_states", "timestep", "class_labels"};
}

TEST_CASE("DiT matches diffusers on the CPU reference", "[models][dit]") { test::check_cpu_parity("dit", kInputs); }

TEST_CASE("DiT matches diffusers on Vulkan in every JIT mode", "[models][dit][vulkan]") {
    // f16: weights rounded to f16 (2^-11 relative each); io.json observed max |diff| 1.8e-3 on outputs of
    // absmax 6.1 -> relative L2 bound 2e-3.
    test::check_vulkan_parity("dit", kInputs, 2e-3);
}

TEST_CASE("a config value of the wrong type is an error naming the key", "[models][dit]") {
    CHECK_THROWS_WITH(models::DiTConfig::from_json({{"num_layers", "many"}}), Catch::Contains("num_layers"));
    CHECK_THROWS_WITH(models::DiTConfig::from_json({{"norm_type", "ada_norm"}}), Catch::Contains("norm_type"));
}
