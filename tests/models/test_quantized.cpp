// Quantized model files (kiln-convert --dtype q8_0 / q4_0 / q4_k) on the model fixtures. Vulkan must match
// the CPU oracle, which dequantizes the same blocks: only f32 accumulation order differs, so relative L2
// <= 1e-4 as for f32 weights. Against diffusers' f32 output the error is the quantization's; it is printed
// (the figure to report) and bounded loosely from the format: a weight's quantization error is about
// step / sqrt(12) with step = amax / 127 (q8_0), amax / 8 (q4_0) or the q5_0 step amax / 16 (q4_k falls back
// to q5_0 on these 32-wide fixtures), i.e. 0.4%, 6% and 3% relative RMS for uniform weights; with a few
// layers in sequence the output may carry a few times that: bounds 2%, 30%, 15%.
#include <cstdio>

#include "runtime/core/gguf.h"
#include "tests/models/model_harness.h"

using namespace kiln;

TEST_CASE("quantized fixtures: Vulkan matches the CPU oracle, accuracy against f32", "[models][quant]") {
    const std::string fx = GENERATE("dit", "pixart", "sd3", "flux");
    const DType dt = GENERATE(DType::q8_0, DType::q4_0, DType::q4_k);
    CAPTURE(fx, dtype_name(dt));
    auto io = SafeTensors::open(test::data_path("fixtures/" + fx + "/io.safetensors"));
    const auto ref = io.read("sample").to_f32();
    auto in = test::fixture_inputs(io, test::kTransformerInputs);
    const std::string file = test::convert_fixture(fx, dt);
    size_t quantized = 0, matrices = 0;
    const GgufFile gguf = GgufFile::open(file);  // named: a temporary would die before the loop body
    for (auto& t : gguf.tensors()) {
        quantized += dtype_is_quant(t.dtype);
        matrices += t.shape.size() == 2;
    }
    INFO(quantized << " of " << matrices << " matrices quantized");
    CHECK(quantized >= matrices / 2);  // the linear layers (embedding/positional tables stay f16)
    auto src = models::ModelSource::open(file);
    auto gpu = models::forward_component(&test::context(), src, "transformer", in, exec::Mode::full)["sample"];
    auto cpu = models::forward_component(nullptr, src, "transformer", in)["sample"];
    CHECK(rel_l2(gpu.to_f32(), cpu.to_f32()) <= 1e-4);
    if (dt == DType::q4_0)  // replayed blocks read their quantized weights like the rest: modes bitwise equal
        for (exec::Mode m : {exec::Mode::eager, exec::Mode::regional})
            CHECK(models::forward_component(&test::context(), src, "transformer", in, m)["sample"].bytes == gpu.bytes);
    const double err = rel_l2(gpu.to_f32(), ref);
    std::printf("quantized fixture %-6s %-4s: %zu/%zu matrices quantized, relative L2 vs f32 %.4f\n", fx.c_str(),
                dtype_name(dt), quantized, matrices, err);
    CHECK(err <= (dt == DType::q8_0 ? 0.02 : dt == DType::q4_0 ? 0.3 : 0.15));
    CHECK(vk::Context::validation_errors() == 0);
}
