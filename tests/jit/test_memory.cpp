// Device memory (vk::Allocator): what is allocated tracks what is handed out. A reservation makes one block of exactly
// its size; requests without one get blocks doubling from 1 MiB; a plan reserves everything but its small tables.
// Sizes only, never times.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/core/error.h"
#include "runtime/exec/executor.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/memory.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
constexpr VkDeviceSize kMiB = 1ull << 20;
constexpr VkDeviceSize kFirstBlock = kMiB;  // memory.cpp: the first block made without a reservation

vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// Blocks x = x + W2 gelu(W1 x + b1), one region each, and a linear outside them (its weight: a plain upload).
struct Stack {
    ir::Graph g;
    std::map<std::string, Tensor> weights;
    Stack(int blocks, int B, int N, int D) {
        ir::Val x = g.input("x", {B, N, D});
        ir::Val w0 = g.weight("in.weight", {D, D});
        weights["in.weight"] = test::random_tensor({D, D}, 1, -0.3f, 0.3f);
        x = g.linear(x, w0, {});
        unsigned seed = 2;
        for (int i = 0; i < blocks; ++i) {
            const std::string p = "blk." + std::to_string(i) + ".";
            g.begin_region("blocks", i);
            ir::Val w1 = g.weight(p + "w1", {2 * D, D}), b1 = g.weight(p + "b1", {2 * D});
            ir::Val w2 = g.weight(p + "w2", {D, 2 * D});
            weights[p + "w1"] = test::random_tensor({2 * D, D}, seed++, -0.3f, 0.3f);
            weights[p + "b1"] = test::random_tensor({2 * D}, seed++);
            weights[p + "w2"] = test::random_tensor({D, 2 * D}, seed++, -0.3f, 0.3f);
            x = g.add(x, g.linear(g.gelu(g.linear(x, w1, b1), true), w2, {}));
            g.end_region();
        }
        g.output(x, "y");
    }
    exec::WeightBytesFn gpu() const {
        return [this](const ir::Value& v, void* dst, size_t) {
            const Tensor& t = weights.at(v.name);
            convert(t.bytes.data(), t.dtype, dst, v.dtype, (size_t)t.numel());
        };
    }
};
}  // namespace

TEST_CASE("allocator: a reservation makes one block of exactly its size", "[jit][memory]") {
    vk::Context& ctx = context();
    vk::Allocator a(ctx);
    const VkDeviceSize sizes[] = {100, 3000, 5 * kMiB + 7, 17, 70 * kMiB};  // 70 MiB: over the old quarter-block rule
    VkDeviceSize total = 0;
    for (VkDeviceSize s : sizes) total += a.footprint(s);
    a.reserve(total);
    std::vector<vk::BufferRange> r;
    for (VkDeviceSize s : sizes) r.push_back(a.alloc(s, "reserved", false));
    CHECK(a.blocks() == 1);
    CHECK(a.bytes() == total);  // no tail: the block holds exactly the reserved requests
    CHECK(a.used() == total);
    CHECK(a.reserved() == 0);
    for (size_t i = 0; i < r.size(); ++i) {
        CHECK(r[i].buffer == r[0].buffer);
        CHECK(r[i].offset % a.alignment() == 0);
        if (i) CHECK(r[i].offset >= r[i - 1].offset + r[i - 1].size);  // no overlap
    }
    CHECK(r.back().offset + r.back().size <= a.bytes());
    // Nothing reserved: the next request opens the first doubling block.
    a.alloc(16, "unreserved");
    CHECK(a.blocks() == 2);
    CHECK(a.bytes() == total + kFirstBlock);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("allocator: a reservation uses up what fits an earlier block's tail first", "[jit][memory]") {
    vk::Allocator a(context());
    a.alloc(1000, "first");  // a 1 MiB block, mostly free
    const VkDeviceSize small = a.footprint(4096), big = a.footprint(3 * kMiB);
    a.reserve(small + big);
    a.alloc(4096, "fits the tail");
    a.alloc(3 * kMiB, "needs a block");
    CHECK(a.blocks() == 2);
    CHECK(a.bytes() == kFirstBlock + big);  // the new block is what was left of the reservation, not more
    // A reservation larger than what follows is dropped, and leaves no block behind.
    a.reserve(100 * kMiB);
    a.drop_reservation();
    a.alloc(5000, "after a dropped reservation");
    CHECK(a.bytes() == kFirstBlock + big);  // it fit the first block's tail
}

TEST_CASE("allocator: a range over maxStorageBufferRange is refused in one line", "[jit][memory]") {
    vk::Context& ctx = context();
    vk::Allocator a(ctx);
    const VkDeviceSize over = ctx.info().max_storage_buffer_range + 1;
    a.reserve(a.footprint(over));
    try {
        a.alloc(over, "too wide");
        FAIL("no error");
    } catch (const Error& e) {
        const std::string m = e.what();
        CHECK(m.find("too wide") != std::string::npos);
        CHECK(m.find("maxStorageBufferRange") != std::string::npos);
        CHECK(m.find('\n') == std::string::npos);
    }
    CHECK(a.blocks() == 0);  // refused before anything was allocated
    CHECK(a.bytes() == 0);
}

TEST_CASE("allocator: out of memory says what was asked, and whether the driver or the test limit refused",
          "[jit][memory]") {
    vk::Context& ctx = context();
    struct Restore {
        vk::Context& c;
        ~Restore() { c.faults().memory_limit = 0; }
    } restore{ctx};
    vk::Allocator a(ctx);
    ctx.faults().memory_limit = ctx.memory_bytes() + 1;  // the next allocation is refused
    try {
        a.alloc(1000, "a small table");
        FAIL("no error");
    } catch (const Error& e) {
        const std::string m = e.what();
        CAPTURE(m);
        CHECK(e.kind() == ErrorKind::out_of_memory);
        CHECK(m.find("out of GPU memory allocating 1.0 MiB for a small table") != std::string::npos);
        CHECK(m.find("allocationSize ") != std::string::npos);  // what vkAllocateMemory would have been asked
        CHECK(m.find("refused by the test limit KILN_TEST_DEVICE_MEMORY_LIMIT") != std::string::npos);
        CHECK(m.find("vkAllocateMemory") == std::string::npos);  // never called
        CHECK(m.find("this allocator holds 0.0 MiB in 0 blocks") != std::string::npos);
        CHECK(m.find(" allocations in this process") != std::string::npos);
        CHECK(m.find('\n') == std::string::npos);
    }
    CHECK(a.blocks() == 0);
    // Within the limit the same request succeeds.
    ctx.faults().memory_limit = 0;
    a.alloc(1000, "a small table");
    CHECK(a.blocks() == 1);
}

TEST_CASE("allocator: many small requests stay within the doubling rule's block count", "[jit][memory]") {
    vk::Allocator a(context());
    const VkDeviceSize size = 3000, fp = a.footprint(size);
    const int n = 4096;  // 12 MiB at 3 KiB each
    for (int i = 0; i < n; ++i) a.alloc(size, "small");
    // Without reservations block k holds 2^k MiB, and every block but the last was given up only when a request of
    // fp bytes did not fit it, so it is used to within fp. With b blocks: (2^(b-1) - 1) MiB - (b - 1) fp < used.
    const auto b = (VkDeviceSize)a.blocks();
    CHECK(b >= 1);
    CHECK(((1ull << (b - 1)) - 1) * kMiB - (b - 1) * fp < a.used());
    CHECK(b <= 4);  // 1 + 2 + 4 + 8 MiB hold 12 MiB of 3 KiB requests (less than 3 KiB lost at each block's end)
    CHECK(a.bytes() == ((1ull << b) - 1) * kMiB);
    // The slack is within the last block: under half of what is allocated, plus one first block.
    CHECK(a.bytes() - a.used() < (1ull << (b - 1)) * kMiB);
}

TEST_CASE("a plan allocates what it uses, plus at most one first block for its tables", "[jit][memory]") {
    const auto bw = GENERATE(exec::BlockWeights::automatic, exec::BlockWeights::offset, exec::BlockWeights::device,
                             exec::BlockWeights::copy);
    const int depth = GENERATE(3, 6);
    INFO("block weights " << (int)bw << ", " << depth << " blocks");
    Stack s(depth, 2, 13, 64);
    exec::Executor ex(context(), s.g, s.gpu(), exec::Mode::regional, false, bw);
    const auto& c = ex.counters();
    // Weights outside blocks, inputs/outputs and activations: one reservation; block weights: another; the selection
    // table, replay rows and absent-output bindings (a few KiB here) are not reserved and share one 1 MiB block.
    // Every footprint already counts its alignment, so the only slack is that last block's tail.
    CHECK(c.device_bytes >= c.device_bytes_used);
    CHECK(c.device_bytes <= c.device_bytes_used + kFirstBlock);
    CHECK(ex.allocator().blocks() <= 3);
    CHECK(ex.allocator().reserved() == 0);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("streamed block weights: host copies and ring slots reserved too", "[jit][memory]") {
    Stack s(6, 2, 13, 64);
    exec::Executor all(context(), s.g, s.gpu(), exec::Mode::regional);
    const uint64_t minimum = all.counters().budget_minimum_bytes;
    exec::Budget budget{minimum, 2, false};  // two ring slots, copies from host memory (no in-place reads)
    exec::Executor ex(context(), s.g, s.gpu(), exec::Mode::regional, false, exec::BlockWeights::automatic, budget);
    const auto& c = ex.counters();
    REQUIRE(c.blocks_streamed > 0);
    CHECK(c.device_bytes <= c.device_bytes_used + kFirstBlock);
    CHECK(ex.allocator().blocks() <= 3);
    CHECK(vk::Context::validation_errors() == 0);
}
