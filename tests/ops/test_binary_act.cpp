// add / sub / mul / div followed by gelu / gelu-tanh / silu, fused by ir::fuse into one dispatch (the binary op with
// ir::ActAttrs; DiT's silu(timestep + class embedding) in each block).
// Arithmetic: the fused shader evaluates the op's f32 result, then activation.glsl's act_apply on it, the
// expression silu.comp / gelu.comp apply to the stored f32 sum, so fused equals unfused bitwise. The CPU reference
// applies the same activate() to the same f32 result: fused and unfused graphs agree exactly there too. Against the
// CPU reference the activation's own bound holds (test_silu.cpp, test_gelu.cpp: 1e-5 max-abs on |y| <= 8).
#include "runtime/ir/fuse.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
ir::Val binary(ir::Graph& g, ir::Op op, ir::Val a, ir::Val b) {
    switch (op) {
        case ir::Op::add:
            return g.add(a, b);
        case ir::Op::sub:
            return g.sub(a, b);
        case ir::Op::mul:
            return g.mul(a, b);
        default:
            return g.div(a, b);
    }
}
ir::Val activation(ir::Graph& g, ir::Act act, ir::Val x) {
    return act == ir::Act::silu ? g.silu(x) : g.gelu(x, act == ir::Act::gelu_tanh);
}
}  // namespace

TEST_CASE("an elementwise op then an activation is one dispatch, bitwise", "[op:add][fuse]") {
    const ir::Op op = GENERATE(ir::Op::add, ir::Op::sub, ir::Op::mul, ir::Op::div);
    const ir::Act act = GENERATE(ir::Act::silu, ir::Act::gelu, ir::Act::gelu_tanh);
    auto [sa, sb] = GENERATE(std::make_pair(Shape{2, 1152}, Shape{2, 1152}), std::make_pair(Shape{3, 13}, Shape{13}),
                             std::make_pair(Shape{2, 1, 127}, Shape{13, 1}));
    CAPTURE(ir::op_name(op), (int)act, shape_str(sa), shape_str(sb));
    ir::Graph g;
    auto a = g.input("a", sa), b = g.input("b", sb);
    g.output(activation(g, act, binary(g, op, a, b)), "y");
    // Operands in [0.5, 2] and [-2, -0.5]: results in about [-8, 8] (div: |a / b| <= 4), away from division by 0.
    std::map<std::string, Tensor> in{{"a", test::random_tensor(sa, 140, 0.5f, 2.f)},
                                     {"b", test::random_tensor(sb, 141, -2.f, -0.5f)}};
    for (int i = 0; i < 8; ++i) in.at("a").data<float>()[i % shape_numel(sa)] *= -1.f;  // both signs into the act

    ir::FuseStats st;
    const ir::Graph fg = ir::fuse(g, &st);
    CHECK(st.binary_act == 1);
    CHECK(fg.nodes().size() == g.nodes().size() - 1);
    const Tensor ref = cpu::run(g, in, {}).at("y");
    CHECK(cpu::run(fg, in, {}).at("y").bytes == ref.bytes);  // the CPU reference of the fused node: exact

    auto plain = test::run_vk(g, in, {}, exec::Mode::full, "0");
    auto fused = test::run_vk(g, in, {}, exec::Mode::full, "1");
    CHECK(fused.c.nodes_fused == 1);
    CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run - 1);
    CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
    CHECK(test::max_err(fused.out.at("y").to_f32(), ref.to_f32()) <= 1e-5);
}

TEST_CASE("an activation is not fused into an op whose result is read elsewhere", "[op:add][fuse]") {
    ir::Graph g;
    auto a = g.input("a", {4, 8}), b = g.input("b", {4, 8});
    auto s = g.add(a, b);
    g.output(g.silu(s), "y");
    g.output(g.mul(s, a), "z");
    std::map<std::string, Tensor> in{{"a", test::random_tensor({4, 8}, 1)}, {"b", test::random_tensor({4, 8}, 2)}};
    auto fused = test::run_vk(g, in, {}, exec::Mode::full, "1");
    CHECK(fused.c.nodes_fused == 0);
    CHECK(fused.out.at("y").bytes == test::run_vk(g, in, {}, exec::Mode::full, "0").out.at("y").bytes);
}

// Over the binding limit the op runs in row chunks, which row_split lowers without a fused activation: the fusion
// leaves such an op alone, and the result is the unfused one.
TEST_CASE("an op split into row chunks keeps its activation separate", "[op:add][fuse]") {
    const Shape s{64, 256};
    ir::Graph g;
    g.output(g.silu(g.add(g.input("a", s), g.input("b", s))), "y");
    std::map<std::string, Tensor> in{{"a", test::random_tensor(s, 3)}, {"b", test::random_tensor(s, 4)}};
    auto plain = test::run_vk(g, in, {}, exec::Mode::full, "0");
    ::setenv("KILN_MAX_BINDING_RANGE", std::to_string(16 * 256 * 4).c_str(), 1);
    auto split = test::run_vk(g, in, {}, exec::Mode::full, "1");
    ::unsetenv("KILN_MAX_BINDING_RANGE");
    CHECK(split.c.split_ops > 0);
    CHECK(split.c.nodes_fused == 0);
    CHECK(split.out.at("y").bytes == plain.out.at("y").bytes);
}
