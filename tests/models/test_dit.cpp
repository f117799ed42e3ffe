// DiTTransformer2DModel parity with diffusers (fixture `dit`): CPU reference, and Vulkan in every JIT
// mode from a converted Kiln file (f32 and f16 weights).
#include "models/transformers/dit.h"
#include "runtime/exec/linear_select.h"
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

TEST_CASE("DiT matches diffusers with every linear on the shared-memory path", "[models][dit][vulkan][smem]") {
    // KILN_LINEAR=smem forces linear_smem.comp (64 x 64 tiles) wherever it applies (K % 4 == 0: every DiT linear):
    // only the f32 summation order changes, so the same bounds as above hold. Block weights copied per replay,
    // selected through device addresses ("_ptr" variants), then by offsets into one bound range ("_off").
    const uint64_t before = exec::linear_smem_dispatches();
    ::setenv("KILN_LINEAR", "smem", 1);
    test::check_vulkan_parity("dit", kInputs, 2e-3);
    auto io = SafeTensors::open(test::data_path("fixtures/dit/io.safetensors"));
    auto src = models::ModelSource::open(
        (std::filesystem::temp_directory_path() / "kiln_test_models" / "dit_f32.kiln").string());
    ::setenv("KILN_BLOCK_WEIGHTS", "offset", 1);
    auto out = models::forward_component(&test::context(), src, "transformer", test::fixture_inputs(io, kInputs),
                                         exec::Mode::regional);
    ::unsetenv("KILN_BLOCK_WEIGHTS");
    ::unsetenv("KILN_LINEAR");
    double err = rel_l2(out["sample"].to_f32(), io.read("sample").to_f32());
    INFO("f32 regional, block weights by offset, relative L2 " << err);
    CHECK(err <= 1e-4);
    CHECK(exec::linear_smem_dispatches() > before);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("a config value of the wrong type is an error naming the key", "[models][dit]") {
    CHECK_THROWS_WITH(models::DiTConfig::from_json({{"num_layers", "many"}}), Catch::Contains("num_layers"));
    CHECK_THROWS_WITH(models::DiTConfig::from_json({{"norm_type", "ada_norm"}}), Catch::Contains("norm_type"));
}
