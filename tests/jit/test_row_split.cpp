// Activations over the binding limit (KILN_MAX_BINDING_RANGE lowers it): every op binding one runs as row-chunk
// dispatches, bitwise equal to the unsplit run in every mode and block-weight selection; an op that cannot be split
// names itself, the shape, the bytes and the limit.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "runtime/exec/executor.h"
#include "runtime/exec/linear_select.h"
#include "runtime/vulkan/context.h"
#include "tests/support/force_linear.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// Every row-wise op on a [B, N, 4C] hidden value, in and out of repeated blocks. B = 2, N = 64, C = 16: the hidden
// value is 32 KiB, the C-wide stream 8 KiB, each block's weights ~8.5 KiB.
struct RowOps {
    static constexpr int B = 2, N = 64, C = 16, H = 4 * C;
    ir::Graph g;
    std::map<std::string, Tensor> w;
    unsigned seed = 1;
    ir::Val weight(const std::string& name, Shape s) {
        w[name] = test::random_tensor(s, seed++, -0.3f, 0.3f);
        return g.weight(name, s);
    }
    explicit RowOps(int blocks) {
        ir::Val x = g.input("x", {B, N, C});
        ir::Val cond = g.input("cond", {B, 2 * H});  // per-batch shift | scale of the hidden value
        ir::Val gate = g.input("gate", {B, 1, C});   // per-batch, broadcast over the rows
        ir::Val kn = g.input("kn", {B, H, H / 2});   // per-batch matmul operand (8 KiB per batch)
        auto ss = g.chunk(cond, 1, 2);
        // Outside blocks: linear, gelu, modulate (per batch), softmax, rms_norm, matmul (per batch), slice and concat
        // along the last axis, silu, scale, sub.
        ir::Val h = g.gelu(g.linear(x, weight("up.w", {H, C}), weight("up.b", {H})), true);  // [B, N, H]
        h = g.modulate(h, ss[0], ss[1]);
        h = g.rms_norm(g.softmax(h), weight("rms.w", {H}), 1e-6f);
        h = g.matmul(h, kn);                                         // [B, N, H / 2]
        ir::Val cat = g.concat(g.slice(h, 2, 8, 20), g.silu(h), 2);  // [B, N, 20 + H / 2]
        cat = g.sub(g.scale(cat, 0.5f, 0.25f), g.layer_norm(cat, {}, {}, 1e-6f));
        x = g.add(x, g.linear(cat, weight("down.w", {C, 20 + H / 2}), {}));
        for (int i = 0; i < blocks; ++i) {
            const std::string p = "blk." + std::to_string(i) + ".";
            g.begin_region("blocks", i);
            ir::Val n = g.layer_norm(x, weight(p + "ln.w", {C}), weight(p + "ln.b", {C}), 1e-6f);
            ir::Val m = g.gelu(g.linear(n, weight(p + "w1", {H, C}), weight(p + "b1", {H})), false);  // [B, N, H]
            m = g.mul(m, weight(p + "g", {H}));
            x = g.add(x, g.mul(g.linear(m, weight(p + "w2", {C, H}), {}), gate));
            g.end_region();
        }
        g.output(g.scale(x, 2.f), "y");
    }
    exec::WeightBytesFn bytes() const {
        return [this](const ir::Value& v, void* dst, size_t n) { std::memcpy(dst, w.at(v.name).bytes.data(), n); };
    }
    std::map<std::string, Tensor> inputs() const {
        return {{"x", test::random_tensor({B, N, C}, 101)},
                {"cond", test::random_tensor({B, 2 * H}, 102, -0.5f, 0.5f)},
                {"gate", test::random_tensor({B, 1, C}, 103)},
                {"kn", test::random_tensor({B, H, H / 2}, 104, -0.2f, 0.2f)}};
    }
};

bool same(const Tensor& a, const Tensor& b) { return a.shape == b.shape && a.bytes == b.bytes; }

Tensor run_y(exec::Executor& ex, const std::map<std::string, Tensor>& in) {
    for (auto& [n, t] : in) ex.set_input(n, t);
    ex.run();
    return ex.output("y");
}
}  // namespace

TEST_CASE("row-wise ops over the binding limit run in row chunks, bitwise equal in every mode", "[jit][split]") {
    RowOps t(3);
    auto in = t.inputs();
    const exec::Mode mode = GENERATE(exec::Mode::eager, exec::Mode::full, exec::Mode::regional);
    CAPTURE(exec::mode_name(mode));
    exec::Executor plain(context(), t.g, t.bytes(), mode);
    CHECK(plain.counters().split_ops == 0);
    const Tensor ref = run_y(plain, in);
    // 12 KiB: the hidden value (32 KiB, 256 B rows) goes in chunks of 48 rows, cut at the batch boundary (64 rows)
    // where an operand is per batch (modulate, matmul); every block's weights (8.5 KiB) still fit one binding.
    test::BindingLimit limit(12 << 10);
    for (auto bw : {exec::BlockWeights::offset, exec::BlockWeights::device, exec::BlockWeights::copy}) {
        if (mode != exec::Mode::regional && bw != exec::BlockWeights::offset) continue;
        exec::Executor split(context(), t.g, t.bytes(), mode, false, bw);
        const auto& c = split.counters();
        INFO("block weights: " << c.block_weights_note);
        CHECK(c.split_ops >= 10);  // 12 ops outside blocks, 3 in the template (+ 2 replayed twice in full/eager)
        CHECK(c.split_dispatches > 2 * c.split_ops);
        CHECK(c.dispatches_per_run > plain.counters().dispatches_per_run);
        if (mode == exec::Mode::regional && bw == exec::BlockWeights::offset) CHECK(c.block_kinds_by_offset == 1);
        if (mode == exec::Mode::regional && bw == exec::BlockWeights::copy) CHECK(c.block_kinds_on_device == 0);
        CHECK(same(ref, run_y(split, in)));
        CHECK(same(ref, run_y(split, in)));  // replayed
    }
    CHECK(vk::Context::validation_errors() == 0);
}

namespace {
// KILN_CACHE_DIR in a fresh folder for one scope (the linear table file lives there), then as it was.
struct CacheDirScope {
    test::TempDir dir{"kiln_row_split_table"};
    test::ScopedEnv env{"KILN_CACHE_DIR", dir.path.string()};
};
}  // namespace

TEST_CASE("row chunks of a linear run the whole linear's kernel, whatever the table picks at the chunk's rows",
          "[jit][split]") {
    // A GPU's table may pick gemv at few rows (built for the H200's 2-row adaLN linears) and another kernel at many: a
    // linear of 128 rows runs on reg (nearest measured M 256), its 16-row chunk (the 12 KiB limit cuts RowOps'
    // 64-row batches in 48 + 16) would run gemv, which sums in another order. The table is written here, so the
    // case does not depend on what this device measures.
    CacheDirScope scope;
    exec::LinearTable t;
    t.rows.push_back({DType::f32, "gemv", {2, 1152, 1152}, 100.0, true, "-"});
    t.rows.push_back({DType::f32, "reg", {256, 1152, 1152}, 100.0, true, "-"});
    std::string why;
    REQUIRE(exec::write_linear_table(context(), exec::linear_table_path(context()), t, why));
    REQUIRE(exec::linear_table(context(), DType::f32).pick(DType::f32, 16) == "gemv");
    RowOps ops(2);
    auto in = ops.inputs();
    exec::Executor plain(context(), ops.g, ops.bytes(), exec::Mode::full);
    const Tensor ref = run_y(plain, in);
    test::BindingLimit limit(12 << 10);
    const uint64_t gemv_before = exec::linear_kernel_dispatches("gemv");
    exec::Executor split(context(), ops.g, ops.bytes(), exec::Mode::full);
    CHECK(split.counters().split_ops > 0);
    CHECK(exec::linear_kernel_dispatches("gemv") == gemv_before);  // no chunk took the table's few-rows kernel
    CHECK(same(ref, run_y(split, in)));
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("row chunks of a tiled GEMM start at whole workgroups: bitwise equal with x scaled per slice",
          "[jit][split][gemm]") {
    // linear_gemm.glsl scales x stored f32 per slice by a power of two from the max |x| of its workgroup's BM rows,
    // so a row's hi / lo split depends on its neighbours where the scaled lo parts reach f16 subnormals. Rows 0-299
    // are 2^-20 times rows 300-599: where a workgroup holds both (the unsplit node's rows 256-383 at BM 128, 288-319
    // at 32), the small rows' lo parts lose bits. A 38400-byte limit holds 300 rows of x (128 B each); chunks of 300
    // would put rows 256-299 in a workgroup of small rows only. Chunks start at multiples of 256 (256 + 256 + 88).
    ir::Graph g;
    const int M = 600, K = 32, N = 16;
    ir::Val x = g.input("x", {1, M, K});
    g.output(g.linear(x, g.weight("w", {N, K}, DType::f16), {}), "y");
    Tensor xs = test::random_tensor({1, M, K}, 7);
    float* xv = reinterpret_cast<float*>(xs.bytes.data());
    for (int i = 0; i < 300 * K; ++i) xv[i] = std::ldexp(xv[i], -20);
    const Tensor w = test::random_tensor({N, K}, 8, -0.5f, 0.5f);
    exec::WeightBytesFn wb = [&](const ir::Value&, void* dst, size_t) {
        convert(w.bytes.data(), DType::f32, dst, DType::f16, (size_t)w.numel());
    };
    const test::ForceLinear gemm("gemm");
    exec::Executor plain(context(), g, wb, exec::Mode::full);
    plain.set_input("x", xs);
    plain.run();
    const Tensor ref = plain.output("y");
    const uint64_t gemm_before = exec::linear_kernel_dispatches("gemm");
    {
        test::BindingLimit limit(300 * K * 4);
        exec::Executor split(context(), g, wb, exec::Mode::full);
        CHECK(split.counters().split_ops == 1);
        CHECK(split.counters().split_dispatches == 3);  // 256 + 256 + 88 rows (unaligned: 300 + 300)
        CHECK(exec::linear_kernel_dispatches("gemm") == gemm_before + 3);
        split.set_input("x", xs);
        split.run();
        CHECK(same(ref, split.output("y")));
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("row chunks under a budget that streams block weights: bitwise equal", "[jit][split]") {
    RowOps t(4);
    auto in = t.inputs();
    exec::Executor plain(context(), t.g, t.bytes(), exec::Mode::regional);
    const Tensor ref = run_y(plain, in);
    test::BindingLimit limit(12 << 10);
    exec::Budget budget;
    budget.bytes = 1;  // raised to the minimum working set: two block slots
    budget.in_place = false;
    exec::Executor split(context(), t.g, t.bytes(), exec::Mode::regional, false, exec::BlockWeights::automatic, budget);
    CHECK(split.counters().blocks_streamed > 0);
    CHECK(split.counters().split_ops > 0);
    CHECK(same(ref, run_y(split, in)));
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("an op that cannot be split names the op, the shape, the bytes and the limit", "[jit][split]") {
    ir::Graph g;
    ir::Val x = g.input("x", {2, 64, 32});              // 16 KiB
    g.output(g.scale(g.transpose(x, 1, 2), 2.f), "y");  // permute: not row-wise
    test::BindingLimit limit(8192);
    exec::WeightBytesFn none = [](const ir::Value&, void*, size_t) {};
    CHECK_THROWS_WITH(exec::Executor(context(), g, none, exec::Mode::full),
                      Catch::Contains("op permute binds activation [2, 64, 32] (16384 bytes)") &&
                          Catch::Contains("binding limit of 8192 bytes") && Catch::Contains("cannot be split"));
    // A broadcast that depends on part of the rows: [1, 64, 32] over [2, 64, 32].
    ir::Graph h;
    ir::Val a = h.input("a", {2, 64, 32}), b = h.input("b", {1, 64, 32});
    h.output(h.add(a, b), "y");
    CHECK_THROWS_WITH(exec::Executor(context(), h, none, exec::Mode::full),
                      Catch::Contains("op add binds activation [2, 64, 32] (16384 bytes)") &&
                          Catch::Contains("broadcasts over part of the rows"));
    CHECK(vk::Context::validation_errors() == 0);
}
