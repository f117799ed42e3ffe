// The fixture transformers with the binding limit lowered (KILN_MAX_BINDING_RANGE) below their MLP hidden values, as
// Flux-dev's [1, 4608, 12288] and SD3's [2, 4096, 6144] exceed lavapipe's 128 MiB at 1024²: the ops binding them run
// as row chunks, bitwise equal to the unsplit run in eager, full and regional modes (block weights by offset, device
// address and copy) and under a budget that streams block weights.
#include <cstdlib>

#include "tests/models/model_harness.h"

using namespace kiln;

namespace {
using Env = test::ScopedEnv;

Tensor run(exec::Executor& ex, const std::map<std::string, Tensor>& in) {
    for (auto& [n, t] : in) ex.set_input(n, t);
    ex.run();
    return ex.output("sample");
}
}  // namespace

TEST_CASE("fixture transformers with activations over the binding limit: row chunks, bitwise equal",
          "[models][split]") {
    const std::string fx = GENERATE("dit", "sd3", "flux");
    CAPTURE(fx);
    auto io = SafeTensors::open(test::data_path("fixtures/" + fx + "/io.safetensors"));
    const auto raw = test::fixture_inputs(io, test::kTransformerInputs);
    const std::string file = test::convert_fixture(fx, DType::f16, "split");
    auto src = models::ModelSource::open(file);
    auto ws = src.weights("transformer");
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, src.class_of("transformer"), src.config("transformer"), raw);
    // The limit: half the largest activation (the MLP hidden value, 4x the width of the residual stream), so the
    // MLP's linear, gelu and (Flux) concat split, while what attention and the token concats bind still fits.
    uint64_t largest = 0;
    for (auto& v : g.values())
        if (v.role == ir::Role::activation)
            largest = std::max<uint64_t>(largest, dtype_nbytes(v.dtype, shape_numel(v.shape)));
    uint64_t widest_weight = 0;
    for (auto& v : g.values())
        if (v.role == ir::Role::weight)
            widest_weight = std::max<uint64_t>(widest_weight, dtype_nbytes(v.dtype, shape_numel(v.shape)));
    const std::string limit = std::to_string(largest / 2);
    INFO("largest activation " << largest << " bytes, limit " << limit);
    vk::Context& ctx = test::context();
    exec::Executor plain(ctx, g, b.weight_fn(), exec::Mode::full);
    REQUIRE(plain.counters().split_ops == 0);
    const Tensor ref = run(plain, in);
    struct Case {
        exec::Mode mode;
        exec::BlockWeights bw;
        const char* what;
    };
    for (const Case& c : {Case{exec::Mode::eager, exec::BlockWeights::automatic, "eager"},
                          Case{exec::Mode::full, exec::BlockWeights::automatic, "full"},
                          Case{exec::Mode::regional, exec::BlockWeights::offset, "regional, offset"},
                          Case{exec::Mode::regional, exec::BlockWeights::device, "regional, device addresses"},
                          Case{exec::Mode::regional, exec::BlockWeights::copy, "regional, copy"}}) {
        // Copied block weights are bound whole: DiT's timestep MLP weight (16 KiB) is over its 8 KiB limit.
        if (c.bw == exec::BlockWeights::copy && widest_weight > largest / 2) continue;
        Env lim("KILN_MAX_BINDING_RANGE", limit);
        exec::Executor split(ctx, g, b.weight_fn(), c.mode, false, c.bw);
        const exec::Counters& k = split.counters();
        INFO(c.what << ": " << k.split_ops << " ops in " << k.split_dispatches << " chunk dispatches; "
                    << k.block_weights_note);
        CHECK(k.split_ops > 0);
        CHECK(k.split_dispatches >= 2 * k.split_ops);
        if (c.mode == exec::Mode::full) CHECK(k.dispatches_per_run > plain.counters().dispatches_per_run);
        CHECK(run(split, in).bytes == ref.bytes);
    }
    {
        // Block weights streamed under a budget at the minimum working set, with row chunks.
        Env lim("KILN_MAX_BINDING_RANGE", limit);
        exec::Budget budget;
        budget.bytes = 1;
        budget.in_place = false;
        exec::Executor split(ctx, g, b.weight_fn(), exec::Mode::regional, false, exec::BlockWeights::automatic, budget);
        // The minimum working set's two slots per kind hold the two DiT and SD3 fixture blocks. Flux's kinds (1 and
        // 2 blocks) fit theirs too where streamed kinds are selected on the device (a GPU); a CPU device copies
        // them (choose_selection), whose copy window the minimum does not count, so Flux streams there.
        const auto& info = ctx.info();
        const bool copied = info.vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU || !info.buffer_device_address;
        if (fx == "flux") CHECK((split.counters().blocks_streamed > 0) == copied);
        CHECK(split.counters().split_ops > 0);
        CHECK(run(split, in).bytes == ref.bytes);
    }
    CHECK(vk::Context::validation_errors() == 0);
}
