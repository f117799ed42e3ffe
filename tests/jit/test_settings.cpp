// Settings reach the Context and the executors made on it when given explicitly, with no environment variable set:
// the device index, the test limits and faults, fusion, f16 activations, the binding limit, the kernel choice.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <list>
#include <optional>

#include "runtime/exec/executor.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/memory.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
// The knobs these cases set through the settings alone.
constexpr const char* kKnobs[] = {"KILN_DEVICE",
                                  "KILN_TEST_MAX_TEXEL_ELEMENTS",
                                  "KILN_TEST_MAX_STORAGE_BUFFERS",
                                  "KILN_TEST_DEVICE_MEMORY_LIMIT",
                                  "KILN_TEST_DEVICE_LOST_AFTER",
                                  "KILN_FUSE",
                                  "KILN_ACT_F16",
                                  "KILN_MAX_BINDING_RANGE",
                                  "KILN_LINEAR",
                                  "KILN_TEST_DISCRETE"};

// Unsets the knobs for one case and restores them after, so that the suite also passes when run whole under one
// of them (KILN_TEST_DISCRETE=1 presents lavapipe as a GPU: docs/testing.md).
struct CleanEnv {
    std::list<test::ScopedEnv> unset;
    CleanEnv() {
        for (const char* n : kKnobs) unset.emplace_back(n, std::nullopt);
    }
};

// The environment's settings read once (validation as the test run asks), without the live hook.
Settings explicit_settings() {
    for (const char* n : kKnobs)
        REQUIRE(std::getenv(n) == nullptr);  // what follows takes effect through the settings alone (CleanEnv)
    Settings s = test::fixed_settings();
    REQUIRE(s.test.live == nullptr);
    return s;
}

// y = linear(gelu(linear(x, w1)), w2): gelu folds into the first linear, whose output feeds a linear (f16-able).
struct Mlp {
    ir::Graph g;
    Mlp() {
        ir::Val x = g.input("x", {4, 16});
        ir::Val w1 = g.weight("w1", {32, 16}), w2 = g.weight("w2", {16, 32});
        g.output(g.linear(g.gelu(g.linear(x, w1, {}), true), w2, {}), "y");
    }
    exec::Counters plan(vk::Context& ctx) const {
        exec::Executor ex(
            ctx, g, [](const ir::Value&, void* dst, size_t n) { std::memset(dst, 0, n); }, exec::Mode::full);
        return ex.counters();
    }
};
}  // namespace

TEST_CASE("settings: the device index and the test limits reach the Context", "[settings][vulkan]") {
    const CleanEnv clean;
    Settings s = explicit_settings();
    s.context.device = 0;
    s.test.max_texel_elements = 1000;
    s.test.max_storage_buffers = 8;
    s.test.device_memory_limit = 123456789;
    s.test.device_lost_after = 7;
    vk::Context ctx(s);
    CHECK(ctx.info().index == 0);
    CHECK(ctx.info().max_texel_elements <= 1000);
    CHECK(ctx.info().max_storage_buffers_per_stage <= 8);
    CHECK(ctx.faults().memory_limit == 123456789);
    CHECK(ctx.faults().lose_device_after == 7);
    CHECK(ctx.settings().test.max_texel_elements == 1000);

    s.context.device = (int)vk::list_devices().size();
    CHECK_THROWS_WITH(vk::Context(s), Catch::Contains("does not exist"));
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("settings: KILN_TEST_DISCRETE presents the device as a discrete GPU without unified memory",
          "[settings][vulkan]") {
    const CleanEnv clean;
    Settings s = explicit_settings();
    s.test.discrete = true;
    vk::Context ctx(s);
    CHECK(ctx.presented_discrete());
    CHECK(ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU);
    CHECK(ctx.info().type == "discrete");
    CHECK(!ctx.info().unified_memory);
    // Device blocks unmapped (uploads and downloads staged, as to a GPU's device-local memory); host blocks mapped.
    vk::Allocator dev(ctx), host(ctx, true);
    const vk::BufferRange r = dev.alloc(64, "device range");
    CHECK(!dev.unified());
    CHECK(r.mapped == nullptr);
    CHECK(host.alloc(64, "host range").mapped != nullptr);
    std::vector<uint32_t> up(16), down(16, 0);
    for (uint32_t i = 0; i < 16; ++i) up[i] = 7 * i + 1;
    dev.upload(r, up.data(), 64);
    dev.download(r, down.data(), 64);
    CHECK(down == up);
    // Off: the device as it is.
    s.test.discrete = false;
    vk::Context plain(s);
    CHECK(!plain.presented_discrete());
    CHECK(plain.info().vk_type == vk::list_devices()[(size_t)plain.info().index].vk_type);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("settings: executor options come from the Context's settings", "[settings][vulkan]") {
    const CleanEnv clean;
    Settings s = explicit_settings();
    vk::Context ctx(s);
    const Mlp m;
    const exec::Counters plain = m.plan(ctx);
    CHECK(plain.nodes_fused == 1);  // the gelu
    CHECK(plain.f16_activations == 0);
    CHECK(plain.binding_limit_bytes == ctx.info().max_storage_buffer_range);

    s.exec.fuse = "0";
    s.test.max_binding_range = 4096;
    ctx.set_settings(s);
    const exec::Counters unfused = m.plan(ctx);
    CHECK(unfused.nodes_fused == 0);
    CHECK(unfused.binding_limit_bytes == 4096);

    s.exec.fuse = "1";
    s.exec.act_f16 = true;
    ctx.set_settings(s);
    const exec::Counters half = m.plan(ctx);
    CHECK(half.nodes_fused == 1);
    CHECK(half.f16_activations == 1);  // the gelu'd hidden, read by the second linear

    s.exec.linear = "fast";  // the kernel choice: a bad value given explicitly still names the variable
    ctx.set_settings(s);
    CHECK_THROWS_WITH(m.plan(ctx), Catch::Contains("KILN_LINEAR='fast'"));
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("settings: the tests' live hook reads the environment anew; fixed settings do not", "[settings][vulkan]") {
    const CleanEnv clean;
    vk::Context live(test::settings()), fixed(explicit_settings());
    const Mlp m;
    test::ScopedEnv fuse("KILN_FUSE", "0");
    CHECK(live.settings().exec.fuse == "0");
    CHECK(m.plan(live).nodes_fused == 0);
    CHECK(fixed.settings().exec.fuse == "1");
    CHECK(m.plan(fixed).nodes_fused == 1);
    CHECK(vk::Context::validation_errors() == 0);
}
