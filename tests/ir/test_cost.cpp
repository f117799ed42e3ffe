// The IR side of the cost model: node FLOPs and bytes_min (every weight once + each block's inputs and outputs),
// against hand-computed values.
#include <catch2/catch.hpp>

#include "runtime/ir/cost.h"
#include "runtime/ir/graph.h"

using namespace kiln;

TEST_CASE("node FLOPs: 2 M N K for a linear, 2 B M N K for a matmul, 4 B Sq Sk W for attention", "[ir][cost]") {
    ir::Graph g;
    auto x = g.input("x", {2, 5, 8});  // M = 10 rows of K = 8
    auto y = g.linear(x, g.weight("w", {16, 8}, DType::f16), g.weight("b", {16}));
    auto m = g.matmul(g.input("a", {3, 4, 6}), g.input("bm", {1, 6, 7}));
    auto q = g.input("q", {2, 9, 16}), kv = g.input("kv", {2, 11, 16});
    auto att = g.attention(q, kv, kv, 2);
    auto s = g.silu(y);
    const auto& nodes = g.nodes();
    auto flops_of = [&](ir::Val v) { return ir::node_flops(g, nodes.at((size_t)g.value(v).producer)); };
    CHECK(flops_of(y) == 2.0 * 10 * 16 * 8);
    CHECK(flops_of(m) == 2.0 * 3 * 4 * 7 * 6);
    CHECK(flops_of(att) == 4.0 * 2 * 9 * 11 * 16);
    CHECK(flops_of(s) == 2.0 * 5 * 16);  // one per output element
    CHECK(ir::count_cost(g).flops == 2.0 * 10 * 16 * 8 + 2.0 * 3 * 4 * 7 * 6 + 4.0 * 2 * 9 * 11 * 16 + 2.0 * 5 * 16);
}

TEST_CASE("bytes_min: every weight once, each block's inputs and outputs once", "[ir][cost]") {
    // x [2, 8, 16] f32 = 1024 bytes; two blocks x = x + linear(x, W_i [16, 16] f16 = 512 bytes, b_i [16] f32 = 64),
    // then a scale outside the blocks. Units: block 0, block 1, the scale.
    ir::Graph g;
    ir::Val x = g.input("x", {2, 8, 16});
    for (int i = 0; i < 2; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        g.begin_region("blocks", i);
        ir::Val h = g.linear(x, g.weight(p + "w", {16, 16}, DType::f16), g.weight(p + "b", {16}));
        x = g.add(x, g.reshape(h, {2, 8, 16}));  // a view: its bytes are h's
        g.end_region();
    }
    g.output(g.scale(x, 0.5f), "y");
    const double weights = 2 * (512 + 64);
    // block 0: reads x (1024), writes x1 (1024); block 1: reads x1, writes x2; the scale: reads x2, writes y.
    const double units = 1024 * 6;
    CHECK(ir::min_bytes(g) == weights + units);
    // A weight read twice counts once; the intermediate h never leaves its block.
    ir::Graph g2;
    ir::Val a = g2.input("a", {4, 16});
    ir::Val w = g2.weight("w", {16, 16});  // f32: 1024 bytes
    ir::Val h = g2.linear(g2.linear(a, w, {}), w, {});
    g2.output(h, "h");
    CHECK(ir::min_bytes(g2) == 1024 + 256 + 256);  // w, a in, h out
}
