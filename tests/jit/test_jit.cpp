// The regional JIT: one recording per block kind, replayed; bitwise equal to full and eager;
// equal to the CPU reference; no stale state between runs; a new shape gets a new plan.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "runtime/core/quant.h"
#include "runtime/cpu/reference.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/linear_select.h"
#include "runtime/exec/regions.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/pipeline.h"
#include "tests/jit/toy_stack.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;
using namespace kiln::test::toy_stack;

TEST_CASE("regional records one block per kind, independent of depth", "[jit]") {
    for (int blocks : {2, 7}) {
        Toy toy(blocks, 2, 13, 32);
        exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional);
        const auto& c = ex.counters();
        // The block at two parities (its weight selection alternates between two slot copies) + the step.
        CHECK(c.command_buffers_recorded == 3);
        CHECK(c.submissions_per_run == 1);
        exec::Executor full(context(), toy.g, toy.gpu(), exec::Mode::full);
        CHECK(full.counters().command_buffers_recorded == 1);
        // The same dispatches, plus one select_advance per replay (it moves the weight selection on).
        CHECK(full.counters().dispatches_per_run + blocks == c.dispatches_per_run);
        CHECK(c.executes_per_run == 1);
        CHECK(c.activation_bytes_planned < c.activation_bytes_naive);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("eager, full and regional are bitwise identical and match the CPU reference", "[jit]") {
    for (DType wdt : {DType::f32, DType::f16}) {
        Toy toy(5, 2, 13, 32, wdt);
        auto in = inputs(2, 13, 32, 100);
        auto ref = cpu::run(toy.g, in, toy.cpu());
        Tensor outs[3];
        int i = 0;
        for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional})
            outs[i++] = exec::run_graph(context(), toy.g, toy.gpu(), in, m)["y"];
        CHECK(bitwise_equal(outs[0], outs[1]));
        CHECK(bitwise_equal(outs[0], outs[2]));
        // Same (rounded) weights on both sides; f32 accumulation over K <= 64 in 5 blocks: ~1e-6 relative.
        double err = rel_l2(outs[2].to_f32(), ref["y"].to_f32());
        INFO("dtype " << dtype_name(wdt) << " relative L2 " << err);
        CHECK(err < 1e-5);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("replaying one plan with new inputs gives fresh answers; a new shape gets a new plan", "[jit]") {
    Toy toy(4, 2, 13, 32);
    exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional);
    for (unsigned seed : {1u, 2u, 1u}) {
        auto in = inputs(2, 13, 32, seed);
        for (auto& [n, t] : in) ex.set_input(n, t);
        ex.run();
        auto ref = cpu::run(toy.g, in, toy.cpu());
        CHECK(rel_l2(ex.output("y").to_f32(), ref["y"].to_f32()) < 1e-5);
    }
    Toy bigger(4, 3, 7, 32);  // batch and sequence changed: planned anew
    auto in = inputs(3, 7, 32, 5);
    auto out = exec::run_graph(context(), bigger.g, bigger.gpu(), in, exec::Mode::regional);
    CHECK(rel_l2(out["y"].to_f32(), cpu::run(bigger.g, in, bigger.cpu())["y"].to_f32()) < 1e-5);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("profiling times every replayed block and changes no result", "[jit]") {
    Toy toy(6, 2, 13, 32);
    auto in = inputs(2, 13, 32, 9);
    exec::Executor plain(context(), toy.g, toy.gpu(), exec::Mode::regional);
    exec::Executor prof(context(), toy.g, toy.gpu(), exec::Mode::regional, true);
    for (exec::Executor* ex : {&plain, &prof}) {
        for (auto& [n, t] : in) ex->set_input(n, t);
        ex->run();
    }
    CHECK(plain.last_block_ms().empty());
    REQUIRE(prof.last_block_ms().size() == 6);
    for (double ms : prof.last_block_ms()) CHECK(ms >= 0);
    CHECK(bitwise_equal(plain.output("y"), prof.output("y")));
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("region analysis rejects blocks that differ", "[jit]") {
    ir::Graph g;
    ir::Val x = g.input("x", {2, 4});
    for (int i = 0; i < 2; ++i) {
        g.begin_region("blocks", i);
        x = i == 0 ? g.silu(x) : g.gelu(x, false);
        g.end_region();
    }
    g.output(x, "y");
    CHECK_THROWS_WITH(exec::analyze_regions(g), Catch::Contains("differs"));
}

TEST_CASE("regional replays select each block's own weights on the device, with no weight copies", "[jit]") {
    for (DType wdt : {DType::f32, DType::f16, DType::bf16}) {
        Toy toy(5, 2, 13, 32, wdt);
        auto in = inputs(2, 13, 32, 21);
        Tensor full = exec::run_graph(context(), toy.g, toy.gpu(), in, exec::Mode::full)["y"];
        exec::Executor copy(context(), toy.g, toy.gpu(), exec::Mode::regional, false, exec::BlockWeights::copy);
        exec::Executor dev(context(), toy.g, toy.gpu(), exec::Mode::regional, false, exec::BlockWeights::device);
        for (exec::Executor* ex : {&copy, &dev}) {
            for (auto& [n, t] : in) ex->set_input(n, t);
            ex->run();
        }
        INFO("weight dtype " << dtype_name(wdt));
        REQUIRE(context().info().buffer_device_address);  // lavapipe and every GPU Kiln targets have it
        const auto &cc = copy.counters(), &cd = dev.counters();
        CHECK(cd.block_kinds_on_device == 1);
        CHECK(cd.weight_copy_bytes_per_run == 0);
        // The primary writes instance 0's addresses once per run and executes all 5 replays at once; each replay's
        // first dispatch (select_advance) writes the next instance's into the other slot copy.
        CHECK(cd.table_updates_per_run == 1);
        CHECK(cd.executes_per_run == 1);
        CHECK(cd.kinds_counted_on_device == 1);
        CHECK(cc.executes_per_run == 5);  // copied weights: a copy before every replay
        CHECK(cc.kinds_counted_on_device == 0);
        CHECK(cc.block_kinds_on_device == 0);
        CHECK(cc.weight_copy_bytes_per_run > 0);
        CHECK(cd.copies_per_run == 0);  // the residual stream is updated in place: no carry copies either
        CHECK(cc.copies_per_run == 5);  // one weight copy per replay
        CHECK(cd.command_buffers_recorded == 3);
        CHECK(cd.dispatches_per_run == cc.dispatches_per_run + 5);  // + select_advance per replay
        // Each block's weights differ (seeded per block): equal outputs mean every replay read its own.
        CHECK(bitwise_equal(full, copy.output("y")));
        CHECK(bitwise_equal(full, dev.output("y")));
        // A second run replays the same selection.
        dev.run();
        CHECK(bitwise_equal(full, dev.output("y")));
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("a second executor on one context creates no pipeline; run figures add up", "[jit][pipeline_cache]") {
    vk::Context ctx{test::settings()};
    Toy toy(3, 2, 13, 32);
    auto in = inputs(2, 13, 32, 7);
    Tensor first;
    int pipelines = 0;
    for (int pass = 0; pass < 2; ++pass) {
        exec::Executor ex(ctx, toy.g, toy.gpu(), exec::Mode::regional);
        const auto& c = ex.counters();
        CHECK(c.pipelines > 0);
        CHECK(c.pipelines_created == (pass == 0 ? c.pipelines : 0));  // the second one finds them all
        if (pass == 0) pipelines = c.pipelines;
        CHECK(c.pipelines == pipelines);
        for (auto& [n, t] : in) ex.set_input(n, t);
        ex.run();
        CHECK(ex.last_run().idle_before_ms == -1);  // a new executor: nothing ran before
        ex.run();
        const exec::RunStats& s = ex.last_run();
        CHECK(s.submissions == 1);
        CHECK(s.barriers == c.barriers_per_run);
        CHECK(s.dispatches == c.dispatches_per_run);
        CHECK(s.gpu_ms > 0);  // lavapipe has timestamps
        CHECK(s.idle_ms == 0);
        CHECK(s.idle_before_ms >= 0);
        CHECK(s.host_ms >= 0);
        if (pass == 0) first = ex.output("y");
        CHECK(bitwise_equal(ex.output("y"), first));
    }
    ctx.set_pipeline_reuse(false);  // as a new process: every pipeline created again
    exec::Executor own(ctx, toy.g, toy.gpu(), exec::Mode::eager);
    CHECK(own.counters().pipelines_created == own.counters().pipelines);
    for (auto& [n, t] : in) own.set_input(n, t);
    own.run();
    own.run();
    CHECK(own.last_run().submissions == 1);  // recorded op by op, submitted once
    CHECK(own.last_run().barriers == own.counters().barriers_per_run);
    CHECK(own.counters().barriers_per_run > 0);  // the ops depend on one another
    CHECK(own.last_run().idle_ms == 0);
    CHECK(own.last_run().gpu_ms > 0);
    REQUIRE(own.last_op_ms().size() == (size_t)own.counters().dispatches_per_run);  // one time per op
    double sum = 0;
    for (auto& [name, ms] : own.last_op_ms()) sum += ms;
    CHECK(sum == Approx(own.last_run().gpu_ms).epsilon(1e-9));  // end-to-end deltas add up to the run
    CHECK(bitwise_equal(own.output("y"), first));
    {  // KILN_EAGER_SUBMIT=op: one submission per dispatch, waited, as eager mode used to be
        test::ScopedEnv per_op("KILN_EAGER_SUBMIT", "op");
        exec::Executor op(ctx, toy.g, toy.gpu(), exec::Mode::eager);
        for (auto& [n, t] : in) op.set_input(n, t);
        op.run();
        CHECK(op.last_run().submissions == op.counters().dispatches_per_run);
        CHECK(op.counters().barriers_per_run == 0);
        CHECK(op.last_op_ms().size() == (size_t)op.counters().dispatches_per_run);
        CHECK(bitwise_equal(op.output("y"), first));
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("a block whose output cannot overwrite its input: the residual stream ping-pongs, no copies", "[jit]") {
    // y = linear(x): every output element reads a whole row of x, so y cannot be written over x. Replays
    // alternate between two recordings with x and y in each other's buffers; even and odd depths leave the
    // result in either.
    for (int blocks : {4, 5}) {
        ir::Graph g;
        std::map<std::string, Tensor> w;
        ir::Val x = g.input("x", {2, 13, 32});
        for (int i = 0; i < blocks; ++i) {
            std::string p = "blk." + std::to_string(i) + ".";
            g.begin_region("blocks", i);
            x = g.linear(x, g.weight(p + "w", {32, 32}), g.weight(p + "b", {32}));
            w[p + "w"] = test::random_tensor({32, 32}, 50 + 2 * i, -0.3f, 0.3f);
            w[p + "b"] = test::random_tensor({32}, 51 + 2 * i);
            g.end_region();
        }
        g.output(g.scale(x, 2.0f), "y");
        exec::WeightBytesFn bytes = [&](const ir::Value& v, void* dst, size_t n) {
            std::memcpy(dst, w.at(v.name).bytes.data(), n);
        };
        std::map<std::string, Tensor> in{{"x", test::random_tensor({2, 13, 32}, 7)}};
        Tensor full = exec::run_graph(context(), g, bytes, in, exec::Mode::full)["y"];
        exec::Executor ex(context(), g, bytes, exec::Mode::regional);
        INFO(blocks << " blocks");
        CHECK(ex.counters().command_buffers_recorded == 3);  // the block at both parities + the step
        CHECK(ex.counters().copies_per_run == 0);
        CHECK(ex.counters().executes_per_run == 1);  // both parities, alternating, in one execute
        CHECK(bitwise_equal(full, run_y(ex, in)));
        CHECK(bitwise_equal(full, run_y(ex, in)));
    }
    CHECK(vk::Context::validation_errors() == 0);
}

// Issue 46: after the replays the last block's output lives in the chain's buffer; a view of it read after the blocks
// (a reshape, as DC-AE's DCDownBlock2d shortcut pixel-unshuffles a stage's output) must read it there too, not the
// never-written buffer of the last instance. Both chains: in place (Toy's residual add) and ping-pong (a linear), odd
// and even depths.
TEST_CASE("a view of the blocks' output read after the replays sees the last block's output", "[jit]") {
    for (bool ping_pong : {false, true})
        for (int blocks : {2, 3}) {
            ir::Graph g;
            std::map<std::string, Tensor> w;
            ir::Val x = g.input("x", {2, 12, 32});
            for (int i = 0; i < blocks; ++i) {
                std::string p = "blk." + std::to_string(i) + ".";
                g.begin_region("blocks", i);
                ir::Val h = g.linear(x, g.weight(p + "w", {32, 32}), g.weight(p + "b", {32}));
                x = ping_pong ? h : g.add(x, h);
                w[p + "w"] = test::random_tensor({32, 32}, 70 + 2 * i, -0.3f, 0.3f);
                w[p + "b"] = test::random_tensor({32}, 71 + 2 * i);
                g.end_region();
            }
            // Read twice after the blocks, as DCDownBlock2d does: directly, and through a view.
            ir::Val v = g.permute(g.reshape(x, {2, 12, 4, 8}), {0, 2, 1, 3});
            g.output(g.add(g.scale(x, 2.0f), g.reshape(v, {2, 12, 32})), "y");
            exec::WeightBytesFn bytes = [&](const ir::Value& val, void* dst, size_t n) {
                std::memcpy(dst, w.at(val.name).bytes.data(), n);
            };
            std::map<std::string, Tensor> in{{"x", test::random_tensor({2, 12, 32}, 8)}};
            Tensor full = exec::run_graph(context(), g, bytes, in, exec::Mode::full)["y"];
            Tensor regional = exec::run_graph(context(), g, bytes, in, exec::Mode::regional)["y"];
            INFO((ping_pong ? "ping-pong" : "in place") << ", " << blocks << " blocks");
            CHECK(bitwise_equal(full, regional));
        }
    CHECK(vk::Context::validation_errors() == 0);
}

namespace {
// KILN_SELECT_ADVANCE for one scope.
struct SelectAdvance {
    explicit SelectAdvance(bool on) { setenv("KILN_SELECT_ADVANCE", on ? "1" : "0", 1); }
    ~SelectAdvance() { unsetenv("KILN_SELECT_ADVANCE"); }
};
}  // namespace

TEST_CASE("replays counted on the device equal per-replay selection from the primary, bitwise, run after run",
          "[jit][advance]") {
    // The two ways to move a kind's selection on between replays: the primary writes the table before each
    // replay (KILN_SELECT_ADVANCE=0), or each replay's first dispatch copies the next instance's row from a
    // device buffer into the other slot copy (one execute of every instance). Same dispatches otherwise, so outputs are
    // bitwise equal. Offset and address selection, offset windows (3 recordings, replayed in turn), weight-major
    // offsets and the ping-pong parities.
    const size_t stride = 2 * 8192 + 2 * 256;  // Toy(…, 32) f32 block weights
    const std::string how = GENERATE("offset", "device", "windows", "weight-major");
    const int blocks = GENERATE(5, 6);
    INFO(how << ", " << blocks << " blocks");
    Toy toy(blocks, 2, 13, 32);
    auto in = inputs(2, 13, 32, 61);
    Tensor full = exec::run_graph(context(), toy.g, toy.gpu(), in, exec::Mode::full)["y"];
    std::unique_ptr<BindingLimit> limit;
    std::unique_ptr<test::ScopedEnv> layout;
    if (how == "windows") limit = std::make_unique<BindingLimit>(2 * stride + 100);
    if (how == "windows") layout = std::make_unique<test::ScopedEnv>("KILN_BLOCK_LAYOUT", "block");
    if (how == "weight-major") layout = std::make_unique<test::ScopedEnv>("KILN_BLOCK_LAYOUT", "weight");
    // Windows are asked for: auto splits into them only on a CPU device (a GPU selects by address).
    const exec::BlockWeights bw = how == "device"    ? exec::BlockWeights::device
                                  : how == "windows" ? exec::BlockWeights::offset
                                                     : exec::BlockWeights::automatic;
    std::vector<Tensor> outs;
    int barriers_off = 0;
    for (bool on : {false, true}) {
        SelectAdvance env(on);
        exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional, false, bw);
        const auto& c = ex.counters();
        // From the primary, a barrier after each table write and after each replay; counted on the device, one
        // after each replay: its select_advance writes the slot copy the replay does not read, beside its first
        // dispatches.
        if (on)
            CHECK(c.barriers_per_run == barriers_off - blocks);
        else
            barriers_off = c.barriers_per_run;
        CHECK(c.copies_per_run == 0);
        CHECK(c.kinds_counted_on_device == (on ? 1 : 0));
        CHECK(c.executes_per_run == (on ? 1 : blocks));
        CHECK(c.table_updates_per_run == (on ? 1 : blocks));
        // Per window one recording, two with select_advance (parities), + the step.
        if (how == "windows") CHECK(c.command_buffers_recorded == (blocks + 1) / 2 * (on ? 2 : 1) + 1);
        if (how == "weight-major") CHECK(c.block_kinds_weight_major == 1);
        for (int run = 0; run < 3; ++run) {  // each run starts again at instance 0
            outs.push_back(run_y(ex, in));
            CHECK(bitwise_equal(full, outs.back()));
        }
        CHECK(ex.last_run().dispatches == c.dispatches_per_run);
        // Recording again (kiln bench's record_again_ms) leaves the counters and the result as they were.
        const int dispatches = c.dispatches_per_run, executes = c.executes_per_run;
        CHECK(ex.record_again() > 0);
        CHECK(c.dispatches_per_run == dispatches);
        CHECK(c.executes_per_run == executes);
        CHECK(bitwise_equal(full, run_y(ex, in)));
        CHECK(ex.last_run().dispatches == dispatches);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("a device with few storage buffers per stage: no linear_multi, and a clear error past its limit", "[jit]") {
    // Two linears of one input fuse into linear_multi (13 storage buffers) under KILN_FUSE=all. On a device that
    // allows 8 per stage (KILN_TEST_MAX_STORAGE_BUFFERS caps lavapipe's 32), the executor keeps them apart, and
    // asking for the shader itself names the limit instead of creating an invalid pipeline.
    ir::Graph g;
    ir::Val x = g.input("x", {2, 5, 16});
    std::map<std::string, Tensor> w;
    for (int i = 0; i < 2; ++i) {
        const std::string n = "w" + std::to_string(i);
        w[n] = test::random_tensor({16, 16}, 40 + i, -0.3f, 0.3f);
        g.output(g.linear(x, g.weight(n, {16, 16}, DType::f32), {}), "y" + std::to_string(i));
    }
    exec::WeightBytesFn fn = [&](const ir::Value& v, void* dst, size_t n) {
        std::memcpy(dst, w.at(v.name).bytes.data(), n);
    };
    ::setenv("KILN_FUSE", "all", 1);
    // linear_multi groups only linears the kernel table keeps on reg or tex (exec::linear_choice); a GPU's table may
    // send f32 linears to smem64.
    test::ScopedEnv reg("KILN_LINEAR", "reg");
    const Tensor in = test::random_tensor({2, 5, 16}, 7);
    auto run = [&](vk::Context& ctx) {
        exec::Executor ex(ctx, g, fn, exec::Mode::full);
        ex.set_input("x", in);
        ex.run();
        return std::make_tuple(ex.output("y0"), ex.output("y1"), ex.counters().dispatches_per_run);
    };
    auto [a0, a1, wide] = run(context());
    ::setenv("KILN_TEST_MAX_STORAGE_BUFFERS", "8", 1);
    vk::Context small{test::settings()};
    ::unsetenv("KILN_TEST_MAX_STORAGE_BUFFERS");
    REQUIRE(small.info().max_storage_buffers_per_stage == 8);
    auto [b0, b1, narrow] = run(small);
    ::unsetenv("KILN_FUSE");
    CHECK(wide == 1);  // linear_multi where the device allows it
    CHECK(narrow == 2);
    CHECK(bitwise_equal(a0, b0));  // linear_multi computes each part as linear does
    CHECK(bitwise_equal(a1, b1));
    vk::Kernels k(small);
    CHECK_THROWS_WITH(k.get("linear_multi_f32"),
                      Catch::Contains("binds 13 storage") && Catch::Contains("maxPerStageDescriptorStorageBuffers"));
}
