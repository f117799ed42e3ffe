// Fusion (ir::fuse, applied by the Vulkan executor before it plans) on the transformer fixtures: in every mode
// (eager with KILN_FUSE=all; full; regional with block weights copied, selected by address and by offset) the
// fused graph's output equals the unfused one's bitwise, with fewer dispatches. f16 weights and q4_0 (the
// quantized linear_multi / epilogue variants, "_off" included).
#include <filesystem>

#include "runtime/exec/regions.h"
#include "runtime/ir/fuse.h"
#include "tests/models/model_harness.h"

using namespace kiln;

namespace {
struct Run {
    Tensor sample;
    exec::Counters c;
};

Run run(const ir::Graph& g, const exec::WeightBytesFn& wf, const std::map<std::string, Tensor>& in, exec::Mode m,
        const char* fuse, const char* block_weights) {
    ::setenv("KILN_FUSE", fuse, 1);
    ::setenv("KILN_BLOCK_WEIGHTS", block_weights, 1);
    // Offset selection needs the instances in device memory, not read in place in the mapped file.
    ::setenv("KILN_STREAM_IN_PLACE", std::string(block_weights) == "offset" ? "0" : "", 1);
    exec::Executor ex(test::context(), g, wf, m);
    ::unsetenv("KILN_FUSE");
    ::unsetenv("KILN_BLOCK_WEIGHTS");
    ::unsetenv("KILN_STREAM_IN_PLACE");
    for (auto& [name, t] : in) ex.set_input(name, t);
    ex.run();
    return {ex.output("sample"), ex.counters()};
}
}  // namespace

TEST_CASE("fused transformers equal unfused ones bitwise in every mode", "[models][fuse][vulkan]") {
    const std::string fx = GENERATE("dit", "pixart", "sd3", "sd3_qknorm_dual", "flux", "flux_noguidance");
    const DType dt = GENERATE(DType::f16, DType::q4_0);
    CAPTURE(fx, dtype_name(dt));
    auto io = SafeTensors::open(test::data_path("fixtures/" + fx + "/io.safetensors"));
    const std::string file = test::convert_fixture(fx, dt, "fuse");
    auto src = models::ModelSource::open(file);
    auto ws = src.weights("transformer");
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, src.class_of("transformer"), src.config("transformer"),
                                      test::fixture_inputs(io, test::kTransformerInputs));
    // The SD3 fixtures have two blocks, the last one inline: nothing is replayed there.
    const bool replays = !exec::analyze_regions(g).empty();
    CHECK(replays == (fx.rfind("sd3", 0) != 0));
    // Flux's single blocks: q and k each get their per-head rms_norm and rope in one rms_norm_rope (the double
    // blocks concatenate the streams between the two, so they keep both ops).
    ir::FuseStats fs;
    ir::fuse(g, &fs);
    const int single = src.config("transformer").value("num_single_layers", 0);
    CHECK(fs.rms_norm_rope == (fx.rfind("flux", 0) == 0 ? 2 * single : 0));
    const auto wf = b.weight_fn();
    const Run ref = run(g, wf, in, exec::Mode::eager, "0", "auto");
    struct Case {
        exec::Mode m;
        const char* bw;
    };
    for (Case c : {Case{exec::Mode::eager, "auto"}, Case{exec::Mode::full, "auto"}, Case{exec::Mode::regional, "copy"},
                   Case{exec::Mode::regional, "device"}, Case{exec::Mode::regional, "offset"}}) {
        CAPTURE(exec::mode_name(c.m), c.bw);
        const Run plain = run(g, wf, in, c.m, "0", c.bw), fused = run(g, wf, in, c.m, "all", c.bw);
        CHECK(plain.sample.bytes == ref.sample.bytes);
        CHECK(fused.sample.bytes == ref.sample.bytes);
        CHECK(plain.c.nodes_fused == 0);
        CHECK(fused.c.nodes_fused > 0);
        INFO("block weights: " << fused.c.block_weights_note);
        INFO("dispatches per run: " << plain.c.dispatches_per_run << " unfused, " << fused.c.dispatches_per_run
                                    << " fused");
        CHECK(fused.c.dispatches_per_run < plain.c.dispatches_per_run);
        if (c.m == exec::Mode::regional && replays) {
            // The fused ops select block weights on the device as the unfused ones do.
            CHECK(fused.c.block_kinds_on_device == plain.c.block_kinds_on_device);
            CHECK(fused.c.block_kinds_by_offset == plain.c.block_kinds_by_offset);
            CHECK((std::string(c.bw) == "copy") == (fused.c.block_kinds_on_device == 0));
            if (std::string(c.bw) == "offset") CHECK(fused.c.block_kinds_by_offset > 0);
        }
    }
    // Eager runs the graph as built unless KILN_FUSE=all.
    CHECK(run(g, wf, in, exec::Mode::eager, "1", "auto").c.nodes_fused == 0);
    CHECK(vk::Context::validation_errors() == 0);
}
