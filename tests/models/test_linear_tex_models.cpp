// The "tex" linear (x and W through uniform texel buffers, linear_select.h) on the transformer fixtures, forced,
// against the register path: bitwise equal in full mode and in regional mode with block weights copied, selected
// by address ("_ptr": W stays a buffer read through its address, x a texel buffer) and by offset ("_off": W's view
// covers every instance, offset per replay), with block weights laid out block-major or weight-major (each weight's
// instances in a view of their own, block_weights.cpp). Weights f32, f16, bf16, q4_0 and q6_k (all four texel
// formats).
#include "runtime/exec/linear_select.h"
#include "tests/models/model_harness.h"

using namespace kiln;

namespace {
struct Run {
    Tensor sample;
    exec::Counters c;
};

Run run(const ir::Graph& g, const exec::WeightBytesFn& wf, const std::map<std::string, Tensor>& in, exec::Mode m,
        const char* block_weights, const char* linear, const char* layout) {
    exec::set_linear_override(linear);
    test::ScopedEnv lay("KILN_BLOCK_LAYOUT", layout);
    ::setenv("KILN_BLOCK_WEIGHTS", block_weights, 1);
    ::setenv("KILN_STREAM_IN_PLACE", std::string(block_weights) == "offset" ? "0" : "", 1);
    exec::Executor ex(test::context(), g, wf, m);
    ::unsetenv("KILN_BLOCK_WEIGHTS");
    ::unsetenv("KILN_STREAM_IN_PLACE");
    exec::set_linear_override("");
    for (auto& [name, t] : in) ex.set_input(name, t);
    ex.run();
    return {ex.output("sample"), ex.counters()};
}
}  // namespace

TEST_CASE("transformers with texel-buffer linears equal the register path bitwise", "[models][tex][vulkan]") {
    if (!test::context().info().texel_formats) {
        WARN("skipped: no RGBA32F/RGBA16F/RGBA16_UINT uniform texel buffers on this device");
        return;
    }
    const std::string fx = GENERATE("dit", "flux");
    const DType dt = GENERATE(DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q6_k);
    CAPTURE(fx, dtype_name(dt));
    auto io = SafeTensors::open(test::data_path("fixtures/" + fx + "/io.safetensors"));
    const std::string file = test::convert_fixture(fx, dt, "tex");
    auto src = models::ModelSource::open(file);
    auto ws = src.weights("transformer");
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, src.class_of("transformer"), src.config("transformer"),
                                      test::fixture_inputs(io, test::kTransformerInputs));
    const auto wf = b.weight_fn();
    struct Case {
        exec::Mode m;
        const char* bw;
        const char* layout = "block";
    };
    std::vector<uint8_t> block_major;  // regional, offset, block-major, tex
    for (Case c :
         {Case{exec::Mode::full, "auto"}, Case{exec::Mode::regional, "copy"}, Case{exec::Mode::regional, "device"},
          Case{exec::Mode::regional, "offset"}, Case{exec::Mode::regional, "offset", "weight"}}) {
        CAPTURE(exec::mode_name(c.m), c.bw, c.layout);
        const Run reg = run(g, wf, in, c.m, c.bw, "reg", c.layout), tex = run(g, wf, in, c.m, c.bw, "tex", c.layout);
        INFO("block weights: " << tex.c.block_weights_note);
        CHECK(reg.c.texel_dispatches == 0);
        CHECK(tex.c.texel_dispatches > 0);
        CHECK(tex.sample.bytes == reg.sample.bytes);
        if (c.m == exec::Mode::regional && std::string(c.bw) == "offset") CHECK(tex.c.block_kinds_by_offset > 0);
        if (std::string(c.layout) == "weight") {
            CHECK(tex.c.block_kinds_weight_major == tex.c.block_kinds_by_offset);
            CHECK(reg.c.block_kinds_weight_major == reg.c.block_kinds_by_offset);
            CHECK(tex.sample.bytes == block_major);
        } else if (c.m == exec::Mode::regional && std::string(c.bw) == "offset") {
            CHECK(tex.c.block_kinds_weight_major == 0);
            block_major = tex.sample.bytes;
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}
