// Recording by level (ir::order_by_level, KILN_LEVEL_ORDER): independent chains in one block (SD3's and Flux's image
// and text streams) share their barriers. Values and what each node computes are unchanged, so outputs are bitwise
// those of graph order, in full and regional mode.

#include <catch2/catch.hpp>

#include "runtime/ir/level_order.h"
#include "tests/jit/toy_stack.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::test::toy_stack;

namespace {
// Blocks of two streams, each norm -> linear -> silu -> linear -> residual add, written one stream after the other
// (as the joint-attention models build them), plus the stream mix every block ends with.
struct TwoStreams {
    ir::Graph g;
    std::map<std::string, Tensor> weights;
    TwoStreams(int blocks, int D) {
        ir::Val a = g.input("a", {2, 7, D}), b = g.input("b", {2, 5, D});
        unsigned seed = 50;
        auto w = [&](const std::string& n, Shape s) {
            weights[n] = test::random_tensor(s, seed++, -0.3f, 0.3f);
            return g.weight(n, s);
        };
        for (int i = 0; i < blocks; ++i) {
            const std::string p = "blk." + std::to_string(i) + ".";
            g.begin_region("blocks", i);
            auto stream = [&](ir::Val x, const std::string& s) {
                ir::Val h = g.linear(g.layer_norm(x, {}, {}, 1e-6f), w(p + s + "1", {D, D}), {});
                h = g.linear(g.silu(h), w(p + s + "2", {D, D}), {});
                return g.add(x, h);
            };
            a = stream(a, "a");
            b = stream(b, "b");
            a = g.add(a, g.scale(g.slice(b, 1, 0, 1), 0.5f));  // the streams meet
            g.end_region();
        }
        g.output(a, "y");
        g.output(b, "z");
    }
    exec::WeightBytesFn bytes() const {
        return
            [this](const ir::Value& v, void* dst, size_t n) { std::memcpy(dst, weights.at(v.name).bytes.data(), n); };
    }
};
}  // namespace

TEST_CASE("order_by_level orders each stretch by level, graph order among equals", "[jit][level-order]") {
    TwoStreams t(3, 16);
    ir::LevelOrderStats st;
    const ir::Graph s = ir::order_by_level(t.g, &st);
    REQUIRE(s.nodes().size() == t.g.nodes().size());
    CHECK(st.moved > 0);
    // Per block: layer_norm, linear, silu, linear, add in each stream side by side (5 levels), then slice, scale,
    // add (3 more; the slice is a dispatch).
    CHECK(st.levels == 3 * 8);
    for (size_t r = 0; r < s.regions().size(); ++r) {
        const ir::Region& reg = s.regions()[r];
        CHECK(reg.first == t.g.regions()[r].first);
        CHECK(reg.end == t.g.regions()[r].end);
        // The two streams' layer_norms lead the block, then their first linears.
        CHECK(s.nodes()[(size_t)reg.first].op == ir::Op::layer_norm);
        CHECK(s.nodes()[(size_t)reg.first + 1].op == ir::Op::layer_norm);
        CHECK(s.nodes()[(size_t)reg.first + 2].op == ir::Op::linear);
        CHECK(s.nodes()[(size_t)reg.first + 3].op == ir::Op::linear);
    }
    // Every input is produced before its reader; every value keeps its producer's node.
    for (size_t i = 0; i < s.nodes().size(); ++i)
        for (int v : s.nodes()[i].in)
            if (v >= 0) CHECK(s.values()[(size_t)v].producer < (int)i);
    for (size_t i = 0; i < s.nodes().size(); ++i) CHECK(s.values()[(size_t)s.nodes()[i].out].producer == (int)i);
}

TEST_CASE("recording by level: fewer barriers, outputs bitwise those of graph order", "[jit][level-order]") {
    TwoStreams t(4, 32);
    std::map<std::string, Tensor> in{{"a", test::random_tensor({2, 7, 32}, 1)},
                                     {"b", test::random_tensor({2, 5, 32}, 2)}};
    for (exec::Mode mode : {exec::Mode::full, exec::Mode::regional}) {
        INFO("mode " << (mode == exec::Mode::full ? "full" : "regional"));
        std::map<std::string, Tensor> out[2];
        int barriers[2] = {0, 0};
        for (int on : {0, 1}) {
            test::ScopedEnv env("KILN_LEVEL_ORDER", on ? "1" : "0");
            exec::Executor ex(context(), t.g, t.bytes(), mode);
            for (auto& [n, v] : in) ex.set_input(n, v);
            ex.run();
            out[on] = {{"y", ex.output("y")}, {"z", ex.output("z")}};
            barriers[on] = ex.counters().barriers_per_run;
        }
        // Fused, a block is 7 levels: layer_norm, linear (+silu), linear, add in each stream side by side, then
        // slice, scale, add. In graph order the second stream's linear, linear and add each wait for a barrier of
        // their own after the first stream's: at least 3 per block more.
        INFO("barriers per run: " << barriers[0] << " in graph order, " << barriers[1] << " by level");
        CHECK(barriers[1] <= barriers[0] - 3 * 4);
        // By level, full mode: one barrier before each level, none before the first block's first (it reads only
        // inputs). More would mean a write into memory a node of the same level still reads (ir::level_run_ends).
        if (mode == exec::Mode::full) CHECK(barriers[1] == 7 * 4 - 1);
        CHECK(out[1].at("y").bytes == out[0].at("y").bytes);
        CHECK(out[1].at("z").bytes == out[0].at("z").bytes);
    }
    CHECK(vk::Context::validation_errors() == 0);
}
