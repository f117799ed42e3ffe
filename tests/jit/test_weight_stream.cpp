// Block weights streamed under a device-memory budget: bitwise equal to the all-resident run whatever the budget,
// the selection (address table or copy), the ring size and in-place reads; the budget floor is the minimum working set.
#include <catch2/catch.hpp>
#include <cstring>

#include "runtime/exec/executor.h"
#include "runtime/exec/weight_stream.h"
#include "runtime/vulkan/context.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// Two block kinds (like Flux's double and single blocks): per block x = x + W2 gelu(W1 x + b1) * gate.
struct Stack {
    ir::Graph g;
    std::map<std::string, Tensor> weights;
    Stack(int a_blocks, int b_blocks, int D, DType wdt) {
        ir::Val x = g.input("x", {2, 13, D});
        unsigned seed = 10;
        auto block = [&](const std::string& kind, int i, int hidden) {
            std::string p = kind + "." + std::to_string(i) + ".";
            g.begin_region(kind, i);
            ir::Val w1 = g.weight(p + "w1", {hidden, D}, wdt), b1 = g.weight(p + "b1", {hidden});
            ir::Val w2 = g.weight(p + "w2", {D, hidden}, wdt), gate = g.weight(p + "gate", {D});
            weights[p + "w1"] = test::random_tensor({hidden, D}, seed++, -0.3f, 0.3f);
            weights[p + "b1"] = test::random_tensor({hidden}, seed++);
            weights[p + "w2"] = test::random_tensor({D, hidden}, seed++, -0.3f, 0.3f);
            weights[p + "gate"] = test::random_tensor({D}, seed++);
            ir::Val h = g.linear(g.gelu(g.linear(g.layer_norm(x, {}, {}, 1e-6f), w1, b1), true), w2, {});
            x = g.add(x, g.mul(h, gate));
            g.end_region();
        };
        for (int i = 0; i < a_blocks; ++i) block("double", i, 2 * D);
        for (int i = 0; i < b_blocks; ++i) block("single", i, 4 * D);
        g.output(g.scale(x, 0.5f), "y");
    }
    exec::WeightBytesFn gpu() const {
        return [this](const ir::Value& v, void* dst, size_t n) {
            const Tensor& t = weights.at(v.name);
            convert(t.bytes.data(), t.dtype, dst, v.dtype, (size_t)t.numel());
        };
    }
};

struct Result {
    Tensor y;
    exec::Counters c;
};

Result run(const Stack& s, exec::BlockWeights bw, const exec::Budget& budget, int runs = 2) {
    exec::Executor ex(context(), s.g, s.gpu(), exec::Mode::regional, false, bw, budget);
    ex.set_input("x", test::random_tensor({2, 13, (int64_t)s.g.value(s.g.inputs()[0]).shape[2]}, 5));
    for (int i = 0; i < runs; ++i) ex.run();  // a second run replays the same ring from the start
    return {ex.output("y"), ex.counters()};
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    return a.shape == b.shape && a.bytes.size() == b.bytes.size() &&
           std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}
}  // namespace

TEST_CASE("streamed block weights give bitwise the all-resident output", "[jit][stream]") {
    const DType wdt = GENERATE(DType::f16, DType::q4_0);
    const auto bw = GENERATE(exec::BlockWeights::device, exec::BlockWeights::copy);
    const int slots = GENERATE(2, 3);
    const bool in_place = GENERATE(false, true);
    // Ring copies inside the step, or in batches of their own ordered by timeline semaphores (split: the
    // transfer queue's synchronisation on the compute queue; transfer where KILN_TRANSFER_QUEUE=1 made one).
    static const vk::CopyQueue made = context().copy_queue();
    const int which = GENERATE(0, 1, 2);
    if (which == 2 && made != vk::CopyQueue::transfer) return;  // no transfer queue made: covered by 0 and 1
    const vk::CopyQueue cq = which == 0 ? vk::CopyQueue::in_step : which == 1 ? vk::CopyQueue::split : made;
    if (cq != vk::CopyQueue::in_step && !context().info().timeline_semaphore) return;
    CAPTURE(dtype_name(wdt), bw == exec::BlockWeights::device, slots, in_place, vk::copy_queue_name(cq));
    struct Restore {
        ~Restore() { context().set_copy_queue(made); }
    } restore;
    context().set_copy_queue(cq);
    Stack s(5, 7, 64, wdt);
    const uint64_t all = uint64_t(1) << 40;
    Result ref = run(s, bw, {all, 0, false});
    REQUIRE(ref.c.blocks_streamed == 0);
    REQUIRE(ref.c.streamed_bytes_per_run == 0);
    REQUIRE(ref.c.budget_minimum_bytes > 0);
    // The minimum streams every block; half of the block weights keeps about half resident.
    for (uint64_t extra : {uint64_t(0), ref.c.block_weight_bytes / 2}) {
        exec::Budget b{ref.c.budget_minimum_bytes + extra, slots, in_place};
        Result r = run(s, bw, b);
        CAPTURE(extra, r.c.stream_note);
        CHECK(r.c.blocks_streamed > 0);
        CHECK(r.c.blocks_resident + r.c.blocks_streamed == 12);
        if (extra == 0) CHECK(r.c.blocks_resident <= 4);  // what the unused slots of the minimum leave, per kind
        if (extra) CHECK(r.c.blocks_resident > 0);
        // Read in place only on unified memory (weight_stream.cpp): a discrete GPU streams through ring slots.
        const bool read_in_place = bw == exec::BlockWeights::device && in_place && context().info().unified_memory;
        const bool ring = bw == exec::BlockWeights::device && !read_in_place;
        CHECK((r.c.ring_slots > 0) == ring);
        if (ring) CHECK(r.c.ring_slots <= 2 * slots);
        // Every streamed instance copied exactly once per run (its host copy's bytes).
        if (ring) CHECK(r.c.streamed_bytes_per_run == r.c.host_weight_bytes);
        if (ring && cq != vk::CopyQueue::in_step) {  // one batch per ring copy, one segment per streamed replay
            CHECK(r.c.copy_queue == vk::copy_queue_name(cq));
            CHECK(r.c.copy_batches_per_run == r.c.blocks_streamed);
            CHECK(r.c.compute_batches_per_run == 1 + 12);
        } else {
            CHECK(r.c.copy_queue == "in_step");
            CHECK(r.c.copy_batches_per_run == 0);
        }
        // Bytes from host memory per run: every streamed block once, except where read in place.
        const bool moved = !read_in_place;
        CHECK((r.c.streamed_bytes_per_run > 0) == moved);
        CHECK(r.c.host_weight_bytes > 0);
        CHECK(r.c.host_weight_bytes <= ref.c.block_weight_bytes);
        CHECK(bitwise_equal(ref.y, r.y));
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("a budget below the minimum working set is raised to it", "[jit][stream]") {
    Stack s(3, 3, 32, DType::f16);
    Result ref = run(s, exec::BlockWeights::automatic, {uint64_t(1) << 40, 0, true}, 1);
    Result r = run(s, exec::BlockWeights::automatic, {4096, 0, true}, 1);
    CHECK(r.c.budget_bytes == ref.c.budget_minimum_bytes);
    CHECK(r.c.blocks_streamed > 0);
    CHECK(bitwise_equal(ref.y, r.y));
    // The plan itself: two slots per kind on top of the fixed bytes, and the warning names both.
    auto p = exec::detail::plan_stream(100, 1000, {{4, 256, true}, {2, 512, false}}, 0, false);
    CHECK(p.minimum == 1000 + 2 * 256 + 2 * 512);
    CHECK(p.budget == p.minimum);
    CHECK_THAT(p.warning, Catch::Contains("minimum working set"));
    // The copied kind needs one window, not two slots: the spare slot keeps two instances of the first resident.
    CHECK(p.resident == std::vector<size_t>{2, 0});
    CHECK(p.slots == std::vector<int>{2, 0});  // the copied kind streams through its window
    auto q =
        exec::detail::plan_stream(1000 + 4 * 256 + 512 + 2 * 512, 1000, {{4, 256, true}, {2, 512, false}}, 0, false);
    CHECK(q.resident == std::vector<size_t>{4, 2});  // everything fits (the copy window included)
    CHECK(exec::parse_bytes("4G") == (uint64_t(4) << 30));
    CHECK(exec::parse_bytes("512M") == (uint64_t(512) << 20));
    CHECK(exec::parse_bytes("1.5GiB") == (uint64_t(3) << 29));
    CHECK(exec::parse_bytes("1000") == 1000);
    CHECK_THROWS_WITH(exec::parse_bytes("4X"), Catch::Contains("invalid byte count"));
}
