// Block weights over one binding and past the binding limit: selected by offset, split into windows, copied or by
// address, block-major and weight-major, at every weight dtype and linear form; each bitwise equal to full mode.
#include <catch2/catch.hpp>
#include <memory>

#include "runtime/exec/linear_select.h"
#include "runtime/vulkan/pipeline.h"
#include "tests/jit/toy_stack.h"

using namespace kiln;
using namespace kiln::test::toy_stack;

TEST_CASE("block weights by offset into one bound range: no copy of any kind, bitwise equal to full", "[jit]") {
    // Quantized matrices need whole blocks per row: K = 32 (q8_0, q4_0, q5_1) or 256 (q4_k, q6_k).
    auto [wdt, D] =
        GENERATE(std::make_pair(DType::f32, 32), std::make_pair(DType::f16, 32), std::make_pair(DType::bf16, 32),
                 std::make_pair(DType::q8_0, 32), std::make_pair(DType::q4_0, 32), std::make_pair(DType::q5_1, 32),
                 std::make_pair(DType::q4_k, 256), std::make_pair(DType::q6_k, 256));
    const int blocks = GENERATE(4, 5);
    INFO("weight dtype " << dtype_name(wdt) << ", " << blocks << " blocks");
    Toy toy(blocks, 2, 13, D, wdt);
    auto in = inputs(2, 13, D, 31);
    Tensor full = exec::run_graph(context(), toy.g, toy.gpu(), in, exec::Mode::full)["y"];
    exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional, false, exec::BlockWeights::offset);
    const auto& c = ex.counters();
    CHECK(c.block_kinds_by_offset == 1);
    CHECK(c.copies_per_run == 0);  // neither weights nor the residual stream are copied
    CHECK(c.weight_copy_bytes_per_run == 0);
    CHECK(c.table_updates_per_run == 1);  // instance 0's offsets; the replays move them on themselves
    CHECK(c.executes_per_run == 1);
    // The block at both parities (replay i reads slot copy i % 2) + the step.
    CHECK(c.command_buffers_recorded == 3);
    CHECK(bitwise_equal(full, run_y(ex, in)));
    CHECK(bitwise_equal(full, run_y(ex, in)));  // a second run replays the same selection
    // auto takes the same path wherever the kind fits one binding.
    exec::Executor automatic(context(), toy.g, toy.gpu(), exec::Mode::regional);
    CHECK(automatic.counters().block_kinds_by_offset == 1);
    CHECK(automatic.counters().copies_per_run == 0);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("block-major weights over the binding limit: split into windows, copied or by address, all bitwise equal",
          "[jit]") {
    // f32, D = 32: w1 and w2 8 KiB each, b1 and gate 256 B each: 16.5 KiB per block. Weight-major layout (the next
    // test) is off: it would take some of these cases.
    test::ScopedEnv layout("KILN_BLOCK_LAYOUT", "block");
    Toy toy(5, 2, 13, 32);
    auto in = inputs(2, 13, 32, 41);
    Tensor full = exec::run_graph(context(), toy.g, toy.gpu(), in, exec::Mode::full)["y"];
    const size_t stride = 2 * 8192 + 2 * 256;
    SECTION("two blocks per window: three windows, one recording each, still no copies") {
        BindingLimit limit(2 * stride + 100);
        // Windows where offset selection is asked for, on every device.
        exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional, false, exec::BlockWeights::offset);
        const auto& c = ex.counters();
        CHECK(c.block_kinds_by_offset == 1);
        CHECK(c.copies_per_run == 0);
        CHECK(c.command_buffers_recorded == 3 * 2 + 1);  // per window both parities, + the step
        CHECK(c.block_weights_note.find("3 bound windows") != std::string::npos);
        CHECK(bitwise_equal(full, run_y(ex, in)));
        // auto splits into windows only on a CPU device; a GPU selects by device address (one recording).
        exec::Executor automatic(context(), toy.g, toy.gpu(), exec::Mode::regional);
        const auto& a = automatic.counters();
        const bool cpu = context().info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
        CHECK(a.block_kinds_on_device == 1);
        CHECK(a.block_kinds_by_offset == (cpu ? 1 : 0));
        CHECK(a.copies_per_run == 0);
        CHECK(a.command_buffers_recorded == (cpu ? 3 * 2 + 1 : 2 + 1));
        CHECK(bitwise_equal(full, run_y(automatic, in)));
    }
    SECTION("no block fits a binding but every weight does: copied on a CPU device, addresses elsewhere") {
        BindingLimit limit(stride - 256);
        exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional);
        const auto& c = ex.counters();
        CHECK(c.block_kinds_by_offset == 0);
        if (context().info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU)
            CHECK(c.copies_per_run == 5);  // the weights only: the residual stream ping-pongs
        CHECK(bitwise_equal(full, run_y(ex, in)));
    }
    SECTION("a weight over the limit: device addresses, no copies") {
        BindingLimit limit(4096);
        exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional);
        const auto& c = ex.counters();
        CHECK(c.block_kinds_on_device == 1);
        CHECK(c.block_kinds_by_offset == 0);
        CHECK(c.copies_per_run == 0);
        CHECK(bitwise_equal(full, run_y(ex, in)));
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("weight-major block weights past the binding limit: one recording, no copies, bitwise equal", "[jit]") {
    // Toy(5, 2, 13, 32) f32: w1 and w2 8 KiB per instance (40 KiB for all five), b1 and gate 256 B (1.25 KiB);
    // 16.5 KiB per block, 82.5 KiB for the kind.
    Toy toy(5, 2, 13, 32);
    auto in = inputs(2, 13, 32, 43);
    Tensor full = exec::run_graph(context(), toy.g, toy.gpu(), in, exec::Mode::full)["y"];
    auto regional = [&](size_t limit, const char* linear, const char* layout = "auto",
                        exec::BlockWeights bw = exec::BlockWeights::automatic) {
        BindingLimit lim(limit);
        test::ScopedEnv lin("KILN_LINEAR", linear), lay("KILN_BLOCK_LAYOUT", layout);
        return std::make_unique<exec::Executor>(context(), toy.g, toy.gpu(), exec::Mode::regional, false, bw);
    };
    auto check_weight_major = [&](exec::Executor& ex) {
        const auto& c = ex.counters();
        CHECK(c.block_kinds_weight_major == 1);
        CHECK(c.block_kinds_by_offset == 1);
        CHECK(c.copies_per_run == 0);
        CHECK(c.command_buffers_recorded == 3);  // the block at both parities + the step, whatever its bindings
        CHECK(c.block_weights_note.find("weight-major") != std::string::npos);
        CHECK(bitwise_equal(full, run_y(ex, in)));
        CHECK(bitwise_equal(full, run_y(ex, in)));
    };
    SECTION("storage-buffer readers: every weight's instances fit one binding, the kind does not") {
        auto ex = regional(5 * 8192 + 100, "reg");
        check_weight_major(*ex);
        // Block-major at the same limit, offset selection asked for (auto splits only on a CPU device): two blocks
        // per window, three recordings.
        auto windows = regional(5 * 8192 + 100, "reg", "block", exec::BlockWeights::offset);
        CHECK(windows->counters().block_kinds_weight_major == 0);
        CHECK(windows->counters().command_buffers_recorded == 3 * 2 + 1);
        CHECK(bitwise_equal(full, run_y(*windows, in)));
    }
    SECTION("texel readers: a weight's instances may exceed a storage binding, not a texel view") {
        if (!context().info().texel_formats) {
            WARN("skipped: no uniform texel buffer formats on this device");
            return;
        }
        // w1's 40 KiB against a 16 KiB storage binding: only a texel view holds them.
        auto tex = regional(16 * 1024 + 512, "tex");
        check_weight_major(*tex);
        CHECK(tex->counters().texel_dispatches > 0);
        // The same limit with storage-buffer linears: no weight-major layout (the kind is copied or addressed).
        auto reg = regional(16 * 1024 + 512, "reg");
        CHECK(reg->counters().block_kinds_weight_major == 0);
        CHECK(bitwise_equal(full, run_y(*reg, in)));
        // Nor with texel views of at most 2048 RGBA32F texels (32 KiB): the view limit is the device's.
        test::ScopedEnv texels("KILN_TEST_MAX_TEXEL_ELEMENTS", "2048");
        vk::Context small{test::settings()};
        BindingLimit lim(16 * 1024 + 512);
        test::ScopedEnv lin("KILN_LINEAR", "tex");
        exec::Executor capped(small, toy.g, toy.gpu(), exec::Mode::regional);
        CHECK(capped.counters().block_kinds_weight_major == 0);
        CHECK(bitwise_equal(full, run_y(capped, in)));
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("weight-major layout at every weight dtype, storage and texel linears: bitwise equal to full", "[jit]") {
    // KILN_BLOCK_LAYOUT=weight lays out weight-major wherever it fits (here: always, with no lowered limit). Each
    // weight's instances then sit at their own aligned stride, so every slot offset differs from block-major's.
    auto [wdt, D] =
        GENERATE(std::make_pair(DType::f32, 32), std::make_pair(DType::f16, 32), std::make_pair(DType::bf16, 32),
                 std::make_pair(DType::q8_0, 32), std::make_pair(DType::q4_0, 32), std::make_pair(DType::q4_k, 256));
    const std::string linear = GENERATE("reg", "tex");
    if (linear == "tex" && !context().info().texel_formats) {
        WARN("skipped: no uniform texel buffer formats on this device");
        return;
    }
    INFO("weight dtype " << dtype_name(wdt) << ", KILN_LINEAR=" << linear);
    Toy toy(5, 2, 13, D, wdt);
    auto in = inputs(2, 13, D, 47);
    // The reference under the same linear kernel: the table may send full mode's linears elsewhere (coopmat, smem64),
    // whose arithmetic differs.
    test::ScopedEnv lin("KILN_LINEAR", linear);
    Tensor full = exec::run_graph(context(), toy.g, toy.gpu(), in, exec::Mode::full)["y"];
    test::ScopedEnv lay("KILN_BLOCK_LAYOUT", "weight");
    exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional);
    CHECK(ex.counters().block_kinds_weight_major == 1);
    CHECK(ex.counters().copies_per_run == 0);
    CHECK(ex.counters().command_buffers_recorded == 3);  // the block at both parities + the step
    CHECK(bitwise_equal(full, run_y(ex, in)));
    CHECK(vk::Context::validation_errors() == 0);
}

// The few-row kernel (gemv: never the table's pick on a CPU device) reads block weights through each selection's
// shader form: "_off" (weight-major and block-major windows) and "_ptr" (device addresses). Its "_gated" forms run
// in test_linear_gated.cpp, which forces every kernel.
TEST_CASE("gemv under every block weight selection: bitwise equal to full", "[jit][gemv]") {
    Toy toy(5, 2, 13, 32, DType::f16);
    auto in = inputs(2, 13, 32, 49);
    test::ScopedEnv lin("KILN_LINEAR", "gemv");
    const uint64_t before = exec::linear_kernel_dispatches("gemv");
    Tensor full = exec::run_graph(context(), toy.g, toy.gpu(), in, exec::Mode::full)["y"];
    CHECK(exec::linear_kernel_dispatches("gemv") > before);
    const auto regional = [&](const char* layout, exec::BlockWeights bw) {
        test::ScopedEnv lay("KILN_BLOCK_LAYOUT", layout);
        exec::Executor ex(context(), toy.g, toy.gpu(), exec::Mode::regional, false, bw);
        CHECK(ex.counters().copies_per_run == 0);
        CHECK(bitwise_equal(full, run_y(ex, in)));
        return ex.counters();
    };
    CHECK(regional("weight", exec::BlockWeights::automatic).block_kinds_weight_major == 1);
    CHECK(regional("block", exec::BlockWeights::offset).block_kinds_by_offset == 1);
    const auto by_address = regional("block", exec::BlockWeights::device);
    CHECK(by_address.block_kinds_on_device == 1);
    CHECK(by_address.block_kinds_by_offset == 0);
    CHECK(vk::Context::validation_errors() == 0);
}
