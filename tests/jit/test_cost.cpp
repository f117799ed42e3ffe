// The cost model (docs/benchmarks.md#the-cost-model): the traffic table of each kernel family (vk::traffic) and the
// executor's per-step cost (exec::StepCost), against hand-computed values.
#include <catch2/catch.hpp>
#include <cstring>

#include "runtime/exec/executor.h"
#include "runtime/ir/cost.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/attention_flash.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/pipeline.h"
#include "runtime/vulkan/traffic.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}
// Bytes of each binding of the node that made v: its inputs in order, then its output (0: absent input).
std::vector<double> bindings(const ir::Graph& g, const ir::Node& n) {
    std::vector<double> b;
    for (int v : n.in) b.push_back(v < 0 ? 0.0 : (double)dtype_nbytes(g.value(v).dtype, shape_numel(g.value(v).shape)));
    b.push_back((double)dtype_nbytes(g.value(n.out).dtype, shape_numel(g.value(n.out).shape)));
    return b;
}
const ir::Node& producer(const ir::Graph& g, ir::Val v) { return g.nodes().at((size_t)g.value(v).producer); }
}  // namespace

TEST_CASE("traffic: a tiled linear reads x once per column tile and W once per row tile", "[cost]") {
    ir::Graph g;
    // x [100, 64] f32 = 25600 bytes, W [200, 64] f16 = 25600, b [200] f32 = 800, y [100, 200] f32 = 80000.
    ir::Val y = g.linear(g.input("x", {100, 64}), g.weight("w", {200, 64}, DType::f16), g.weight("b", {200}));
    const ir::Node& n = producer(g, y);
    vk::Dispatch d = vk::lower(g, n);
    // lower_linear's register tile: 128 columns (N > 64), 16 rows (M = 100 pads least to 112).
    REQUIRE(d.groups[0] == 2);
    REQUIRE(d.groups[1] == 7);
    vk::Traffic t = vk::traffic(g, n, d, bindings(g, n));
    CHECK(t.read == 25600 * 2 + 25600 * 7 + 800 * 7);
    CHECK(t.written == 80000);
    // Any linear kernel: the shared-memory 64 x 64 tiles of linear_smem, as its lowering would set them.
    d.shader = vk::ShaderKey::weights("linear", "smem", DType::f16);
    d.groups[0] = 4, d.groups[1] = 2;
    t = vk::traffic(g, n, d, bindings(g, n));
    CHECK(t.read == 25600 * 4 + 25600 * 2 + 800 * 2);
}

// The tiled GEMM's tiles (linear_kernels.h): as their lowering sets the groups, x is read once per column tile and
// W once per row tile. x [300, 64] f32 = 76800 bytes, W [200, 64] f16 = 25600, b [200] f32 = 800. The 64 tile:
// 4 column tiles, 5 row tiles; the 128 tile (gemm128 at 16 x 16 x 16 with room for it): 2 and 3.
TEST_CASE("traffic: the tiled GEMM's 128 tile re-reads x and W half as often as its 64 tile", "[cost]") {
    ir::Graph g;
    ir::Val y = g.linear(g.input("x", {300, 64}), g.weight("w", {200, 64}, DType::f16), g.weight("b", {200}));
    const ir::Node& n = producer(g, y);
    vk::DeviceInfo dev;
    dev.name = "roomy", dev.subgroup_size = 32, dev.max_shared_memory = 65536;
    const vk::Dispatch d64 = vk::find_linear_kernel("gemm")->lower(dev, g, n);
    const vk::Dispatch d128 = vk::find_linear_kernel("gemm128")->lower(dev, g, n);
    REQUIRE((d64.groups[0] == 4 && d64.groups[1] == 5));
    REQUIRE((d128.groups[0] == 2 && d128.groups[1] == 3));
    const vk::Traffic t64 = vk::traffic(g, n, d64, bindings(g, n)), t128 = vk::traffic(g, n, d128, bindings(g, n));
    CHECK(t64.read == 76800 * 4 + 25600 * 5 + 800 * 5);
    CHECK(t128.read == 76800 * 2 + 25600 * 3 + 800 * 3);
    CHECK(t128.written == 300 * 200 * 4);
    // One band of the grouped order (3 row tiles): x's three panels and a column tile of W and b between two reads
    // of a panel; a W tile read by the band's 3 rows one after another (that tile and a panel in between).
    REQUIRE(t128.rereads.size() == 3);  // x, W, b
    CHECK(t128.rereads[0].times == 2);
    CHECK(t128.rereads[0].reuse == Approx(76800.0 + 26400.0 / 2));
    CHECK(t128.rereads[1].times == 3);
    CHECK(t128.rereads[1].reuse == Approx(26400.0 / 2 + 76800.0 / 3));
}

// The floors' cache model (vk::memory_bytes): a re-read binding counts once where its reuse set (the bytes touched
// between two reads of the same bytes, in the kernel's workgroup order) fits half the cache. The grouped order
// (tile_xy, shaders/common.glsl): bands of tile_group row tiles, each walked column tile by column tile.
TEST_CASE("traffic: re-reads that fit half the last-level cache count once", "[cost]") {
    ir::Graph g;
    // x [100, 64] f32 = 25600 bytes, W [200, 64] f16 = 25600, b [200] f32 = 800, y [100, 200] f32 = 80000.
    ir::Val y = g.linear(g.input("x", {100, 64}), g.weight("w", {200, 64}, DType::f16), g.weight("b", {200}));
    const ir::Node& n = producer(g, y);
    vk::Dispatch d = vk::lower(g, n);
    d.groups[0] = 2, d.groups[1] = 20;  // 2 column tiles, 20 row tiles (x panels of 1280 bytes): bands of 8, 8, 4
    d.tile_group = 8;
    const vk::Traffic t = vk::traffic(g, n, d, bindings(g, n));
    CHECK(t.read == 25600 * 2 + (25600 + 800) * 20);
    REQUIRE(t.rereads.size() == 5);  // x; W within bands, W across; b within, b across
    // x: its band's 8 panels and one column tile of W and b ((25600 + 800) / 2) between two reads of a panel.
    CHECK(t.rereads[0].times == 2);
    CHECK(t.rereads[0].reuse == Approx(8 * 1280 + 13200));
    // W: 20 reads; 17 by the next row of a band (a W tile and a panel in between), 2 by the next band (all of W and
    // b, and a band's 8 panels).
    CHECK(t.rereads[1].times == 1 + 17);
    CHECK(t.rereads[1].reuse == Approx(13200 + 1280));
    CHECK(t.rereads[2].times == 1 + 2);
    CHECK(t.rereads[2].reuse == Approx(26400 + 8 * 1280));
    CHECK(t.rereads[3].bytes == 800);
    const double all = t.read + t.written, once = 25600 + 25600 + 800 + 80000;
    CHECK(vk::memory_bytes(t, 0) == all);                                         // no cache
    CHECK(vk::memory_bytes(t, 1e6) == Approx(once));                              // everything fits
    CHECK(vk::memory_bytes(t, 2 * 15000) == Approx(all - 26400.0 * 17));          // the band's W tiles
    CHECK(vk::memory_bytes(t, 2 * 30000) == Approx(all - 25600 - 26400.0 * 17));  // and x's panels, not all of W
    // The order before bands (one row tile at a time) read W from memory 20 times here: with the bands, 3.
    CHECK(vk::memory_bytes(t, 2 * 30000) == Approx(25600 + 26400.0 * 3 + 80000));
}

// The band's row tiles: as many x row panels as fit 8 MiB, 1 to 8 (vk::linear_tile_group), set in the push constants
// the shader reads and in the Dispatch the model reads.
TEST_CASE("traffic: a band of the grouped order holds the row panels that fit 8 MiB", "[cost]") {
    // Flux-dev at 1024^2, batch 2, 128-row tiles: x [9216, 3072] f32 in 72 panels of 1.5 MiB: 5 of them; its
    // single blocks' proj_out x [9216, 15360] (7.5 MiB panels): 1; DiT-XL/2's x [512, 1152] in 8 panels: 8.
    CHECK(vk::linear_tile_group(9216.0 * 3072 * 4, 72) == 5);
    CHECK(vk::linear_tile_group(9216.0 * 15360 * 4, 72) == 1);
    CHECK(vk::linear_tile_group(512.0 * 1152 * 4, 8) == 8);
    CHECK(vk::linear_tile_group(9216.0 * 3072 * 2, 72) == 8);  // x stored f16: 0.75 MiB panels, 10 would fit
    ir::Graph g;
    ir::Val y = g.linear(g.input("x", {4096, 3072}), g.weight("w", {64, 3072}, DType::f16), g.weight("b", {64}));
    const vk::Dispatch d = vk::lower(g, producer(g, y));
    params::LinearParams p;
    REQUIRE(d.push.size() == sizeof p);
    std::memcpy(&p, d.push.data(), sizeof p);
    CHECK(d.tile_group == vk::linear_tile_group(4096.0 * 3072 * 4, d.groups[1]));
    CHECK(p.tile_group == d.tile_group);
}

TEST_CASE("traffic: a gated linear reads its gate and residual once", "[cost]") {
    ir::Graph g;
    // x [2, 50, 64] f32 = 25600 bytes, W [200, 64] f16 = 25600, no bias; gate [2, 1, 200] f32 = 1600, residual and
    // y [2, 50, 200] f32 = 80000.
    auto x = g.input("x", {2, 50, 64}), gate = g.input("g", {2, 1, 200}), res = g.input("r", {2, 50, 200});
    g.output(g.add(g.mul(gate, g.linear(x, g.weight("w", {200, 64}, DType::f16), {})), res), "y");
    ir::FuseStats st;
    const ir::Graph f = ir::fuse(g, &st);
    REQUIRE(st.linear_gated == 1);
    const ir::Node& n = f.nodes().back();
    REQUIRE(ir::linear_gated(n));
    const vk::Dispatch d = vk::lower(f, n);
    REQUIRE(d.shader.gated);
    REQUIRE(d.groups[0] == 2);  // as the plain linear: 128 columns, 16-row tiles (M = 100)
    REQUIRE(d.groups[1] == 7);
    const vk::Traffic t = vk::traffic(f, n, d, bindings(f, n));
    CHECK(t.read == 25600 * 2 + 25600 * 7 + 1600 + 80000);
    CHECK(t.written == 80000);
    CHECK(ir::node_flops(f, n) == 2.0 * 2 * 50 * 200 * 64 + 2.0 * 2 * 50 * 200);  // the linear's, then mul_add's
}

TEST_CASE("traffic: attention reads K and V once per query tile; matmul re-reads a shared b per batch", "[cost]") {
    ir::Graph g;
    // q [2, 256, 128] f32 = 262144 bytes, 2 heads of 64; k, v [2, 300, 128] = 307200 each.
    ir::Val a = g.attention(g.input("q", {2, 256, 128}), g.input("k", {2, 300, 128}), g.input("v", {2, 300, 128}), 2);
    const ir::Node& n = producer(g, a);
    vk::Dispatch d = vk::lower(g, n);
    // head_dim 64: 4 query rows per lane, 128-row query tiles: 2 tiles x 2 heads x 2 batches.
    REQUIRE(d.groups[0] == 2);
    vk::Traffic t = vk::traffic(g, n, d, bindings(g, n));
    CHECK(t.read == 262144 + 2 * 307200 * 2);
    CHECK(t.written == 262144);
    // The flash kernels' tiles of BR rows: flash 16 x 32 at head_dim 64 (16 KiB): 16 query tiles; the
    // cooperative-matrix variant on an H200-like device (16 x 16 x 16, subgroups of 32, 48 KiB): 16 x 32 too.
    d = vk::lower_attention_flash(g, n, 16384);
    REQUIRE(d.groups[0] == 16);
    CHECK(vk::traffic(g, n, d, bindings(g, n)).read == 262144 + 16 * 307200 * 2);
    if (vk::has_shader("attention_coopmat")) {
        vk::DeviceInfo h200;
        h200.coopmat_m = h200.coopmat_n = h200.coopmat_k = 16, h200.subgroup_size = 32;
        d = vk::lower_attention_coopmat(h200, g, n, 49152);
        REQUIRE(d.groups[0] == 16);
        CHECK(vk::traffic(g, n, d, bindings(g, n)).read == 262144 + 16 * 307200 * 2);
    }
    // The rows-per-subgroup variant there: 4 subgroups of 16 rows share each K/V tile, 64-row query tiles: K and V
    // read 4 times per head, not 16.
    if (vk::has_shader("attention_coopmat4")) {
        vk::DeviceInfo h200;
        h200.coopmat_m = h200.coopmat_n = h200.coopmat_k = 16, h200.subgroup_size = 32;
        d = vk::lower_attention_coopmat4(h200, g, n, 49152);
        REQUIRE(d.groups[0] == 4);
        CHECK(vk::traffic(g, n, d, bindings(g, n)).read == 262144 + 4 * 307200 * 2);
    }

    // a [3, 100, 64] f32 = 76800 bytes, b [1, 64, 50] = 12800; N % 4 != 0: 64 x 64 tiles, groups (1, 2, 3).
    ir::Val m = g.matmul(g.input("a", {3, 100, 64}), g.input("b", {1, 64, 50}));
    const ir::Node& nm = producer(g, m);
    d = vk::lower(g, nm);
    REQUIRE((d.groups[0] == 1 && d.groups[1] == 2 && d.groups[2] == 3));
    t = vk::traffic(g, nm, d, bindings(g, nm));
    CHECK(t.read == 76800 * 1 + 12800 * 2 * 3);
    CHECK(t.written == 3 * 100 * 50 * 4);

    // Elementwise: every binding once.
    ir::Val s = g.add(m, m);
    t = vk::traffic(g, producer(g, s), vk::lower(g, producer(g, s)), bindings(g, producer(g, s)));
    CHECK(t.read == 2 * 60000);
    CHECK(t.written == 60000);
}

// The executed FLOPs the floors divide by a device's peak: the tiled GEMM and the cooperative-matrix attention run
// one matrix product per f16 part of their operands (linear_gemm.glsl, attention_flash_cm.glsl), every other kernel
// its node's FLOPs.
TEST_CASE("products per term: the tiled GEMM's and cooperative-matrix attention's f16 splits", "[cost]") {
    vk::DeviceInfo dev;
    dev.name = "roomy", dev.subgroup_size = 32, dev.max_shared_memory = 65536;
    auto linear = [&](const char* kernel, DType wt, bool x16) {
        ir::Graph g;
        ir::Val x = g.input("x", {64, 256});
        if (x16) g.set_storage(x, DType::f16);
        ir::Val y = g.linear(x, g.weight("w", {64, 256}, wt), {});
        const ir::Node& n = producer(g, y);
        const vk::Dispatch d = vk::find_linear_kernel(kernel)->lower(dev, g, n);
        vk::Dispatch fast = d;
        fast.spec.push_back(1u);  // KILN_PRECISION=fast: constant 13 (exec::choose_linear)
        return std::pair{vk::products_per_term(g, n, d), vk::products_per_term(g, n, fast)};
    };
    for (const char* k : {"gemm", "gemm128"}) {
        CAPTURE(k);
        CHECK(linear(k, DType::f16, false) == std::pair{2.0, 1.0});   // x f32: hi + lo
        CHECK(linear(k, DType::f16, true) == std::pair{1.0, 1.0});    // x f16: as stored
        CHECK(linear(k, DType::bf16, false) == std::pair{2.0, 1.0});  // bf16 W is exact in f16 (scaled)
        CHECK(linear(k, DType::q4_k, false) == std::pair{3.0, 1.0});  // ggml W split too, lo x lo left out
        CHECK(linear(k, DType::q4_k, true) == std::pair{2.0, 1.0});
    }
    CHECK(linear("smem64", DType::f16, false).first == 1.0);
    // Where the floors take the matrix units' peak: the cooperative-matrix kernels and the GEMM's scalar twins.
    auto on_matrix = [](const char* op, const char* kernel) {
        vk::Dispatch d;
        d.shader = vk::ShaderKey(op, kernel, "f16");
        return vk::matrix_units(d);
    };
    for (const char* k : {"coopmat", "coopmat_sk", "cm2", "gemm", "gemm_sk"}) CHECK(on_matrix("linear", k));
    for (const char* k : {"", "vec4", "tex", "smem", "gemv", "multi"}) CHECK_FALSE(on_matrix("linear", k));
    CHECK(on_matrix("attention", "coopmat"));
    CHECK(on_matrix("attention", "coopmat4"));
    CHECK_FALSE(on_matrix("attention", "flash"));
    CHECK_FALSE(on_matrix("attention", ""));
    CHECK_FALSE(on_matrix("conv2d", ""));
    ir::Graph g;
    ir::Val q = g.input("q", {1, 32, 128}), k = g.input("k", {1, 32, 128}), v = g.input("v", {1, 32, 128});
    g.set_storage(v, DType::f16);
    const ir::Node& n = producer(g, g.attention(q, k, v, 2));
    vk::Dispatch d = vk::lower_attention_flash(g, n, 16384);
    CHECK(vk::products_per_term(g, n, d) == 1.0);  // scalar
    d.shader.kernel = "coopmat";                   // its F16 constant, index 3, as lower_attention_coopmat sets it
    CHECK(vk::products_per_term(g, n, d) == (3.0 + 2.0) / 2);  // q and k split, v f16: Q K^T 3 products, P V 2
    d.spec[3] |= 8u;
    CHECK(vk::products_per_term(g, n, d) == 1.0);
}

TEST_CASE("the executor's step cost: FLOPs, bytes as planned, bytes_min, dispatches, submits, barriers", "[cost]") {
    test::ScopedEnv reg("KILN_LINEAR", "reg");  // lower_linear's tile, whatever this device's table picks
    ir::Graph g;
    ir::Val y = g.linear(g.input("x", {100, 64}), g.weight("w", {200, 64}), g.weight("b", {200}));
    g.output(y, "y");
    exec::WeightBytesFn none = [](const ir::Value&, void* dst, size_t n) { std::memset(dst, 0, n); };
    for (exec::Mode mode : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
        INFO(exec::mode_name(mode));
        exec::Executor ex(context(), g, none, mode);
        const exec::StepCost& c = ex.cost();
        CHECK(c.flops == 2.0 * 100 * 200 * 64);
        // x [100, 64] f32 read by 2 column tiles, W [200, 64] f32 (51200 bytes) and b by 7 row tiles, y written once.
        CHECK(c.bytes == 25600 * 2 + 51200 * 7 + 800 * 7 + 80000);
        CHECK(c.bytes_min == 25600 + 51200 + 800 + 80000);
        CHECK(c.dispatches == 1);
        CHECK(c.submits == 1);
        CHECK(c.barriers == 0);
        REQUIRE(c.per_dispatch.size() == 1);
        CHECK(c.per_dispatch[0].per_run == 1);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("the step cost counts every replay of a block: regional equals full", "[cost]") {
    // Three blocks of x = x + linear(gelu(linear(x))), weights f16.
    ir::Graph g;
    ir::Val x = g.input("x", {2, 16, 32});
    for (int i = 0; i < 3; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        g.begin_region("blocks", i);
        ir::Val h = g.gelu(g.linear(x, g.weight(p + "w1", {64, 32}, DType::f16), g.weight(p + "b1", {64})), true);
        x = g.add(x, g.linear(h, g.weight(p + "w2", {32, 64}, DType::f16), {}));
        g.end_region();
    }
    g.output(x, "y");
    exec::WeightBytesFn none = [](const ir::Value&, void* dst, size_t n) { std::memset(dst, 0, n); };
    exec::Executor full(context(), g, none, exec::Mode::full), reg(context(), g, none, exec::Mode::regional),
        eager(context(), g, none, exec::Mode::eager);
    const exec::StepCost &f = full.cost(), &r = reg.cost(), &e = eager.cost();
    for (const exec::StepCost* c : {&f, &r, &e}) {
        int n = 0;
        for (auto& d : c->per_dispatch)
            if (d.shader != "copy") n += d.per_run;
        CHECK(n == c->dispatches);
        CHECK(c->submits == 1);
        CHECK(c->barriers > 0);
        // Weights once: 3 x (4096 + 256 + 4096) bytes; each block reads x [2, 16, 32] f32 (4096 bytes) and writes
        // the next one.
        CHECK(c->bytes_min == 3 * (4096 + 256 + 4096) + 3 * 2 * 4096);
    }
    CHECK(r.flops == f.flops);  // the same fused graph, replayed: select_advance adds no FLOPs
    CHECK(r.bytes == f.bytes);
    CHECK(r.dispatches == f.dispatches + 3);    // one select_advance per replay
    CHECK(e.dispatches == 4 * 3);               // unfused: linear, gelu, linear, add per block
    CHECK(e.flops == ir::count_cost(g).flops);  // the graph as built, node by node
    CHECK(vk::Context::validation_errors() == 0);
}
