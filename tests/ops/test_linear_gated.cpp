// The gated linear: ir::fuse folds mul_add(gate, h, res) into the linear making h (adaLN-Zero's gated residual after
// the attention out-projection and the MLP's fc2), y = res + gate * act(x W^T + b) in the linear's store.
// Arithmetic: the linear's epilogue computes h = act(acc + b) in f32 as the plain linear stores it, then the product
// rounded to f32 and the sum (`precise`, shaders/linear_gate.glsl), the two IEEE operations mul_add.comp performs on
// the stored h: fused equals unfused bitwise on every kernel. Against the CPU (f64 sums, rounded to f32, then the
// same two f32 operations): test_linear's bound on h (max-abs 2 K^2 2^-24 / 4, floor 1e-6; coopmat and gemm + splits
// 2 K / 4 2^-22; x1.13 through an activation's slope), times |gate| <= 1, plus two roundings of |t|, |y| < 64: ulp
// 2^-18 each -> + 1e-5.
#include "runtime/exec/linear_select.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/linear_kernels.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
// y = res + gate * h (or h * gate, res first: gate_first), gate a [B, 1, N] chunk of an adaLN embedding e [B, 6 N].
struct Gated {
    ir::Graph g;
    std::map<std::string, Tensor> in, ws;
    int64_t K = 0;
};
Gated gated_graph(DType wt, bool bias, ir::Act act, bool gate_first, int64_t B = 2, int64_t S = 37, int64_t N = 130) {
    const int64_t K = dtype_is_quant(wt) ? 2 * dtype_block(wt) : 68;
    Gated t;
    t.K = K;
    ir::Graph& g = t.g;
    auto x = g.input("x", {B, S, K}), e = g.input("e", {B, 6 * N}), res = g.input("res", {B, S, N});
    auto gate = g.reshape(g.chunk(e, 1, 6)[2], {B, 1, N});
    auto h = g.linear(x, g.weight("w", {N, K}, wt), bias ? g.weight("b", {N}) : ir::Val{}, act);
    g.output(gate_first ? g.add(res, g.mul(gate, h)) : g.add(g.mul(h, gate), res), "y");
    t.in = {{"x", test::random_tensor({B, S, K}, 30)},
            {"e", test::random_tensor({B, 6 * N}, 31)},
            {"res", test::random_tensor({B, S, N}, 32, -4.f, 4.f)}};
    t.ws = {{"w", test::random_weight({N, K}, wt, 33)}};
    if (bias) t.ws["b"] = test::random_tensor({N}, 34);
    return t;
}

double h_bound(const std::string& kernel, DType wt, int64_t K) {
    double b = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    b += vk::linear_splits(*vk::find_linear_kernel(kernel), wt) * 2.0 * K / 4 * std::ldexp(1.0, -22);
    return 1.13 * b;
}
}  // namespace

TEST_CASE("a gated residual folds into its linear on every kernel, bitwise", "[op:linear_gated][every-kernel]") {
    vk::Context& ctx = test::op_ctx();
    const std::string kernel = GENERATE(from_range(exec::linear_variants()));
    const DType wt = GENERATE(DType::f32, DType::f16, DType::q4_k);
    struct Epi {
        bool bias;
        ir::Act act;
    };
    const Epi epi = GENERATE(Epi{false, ir::Act::none}, Epi{true, ir::Act::none}, Epi{false, ir::Act::gelu_tanh},
                             Epi{true, ir::Act::silu});
    const bool gate_first = epi.act != ir::Act::gelu_tanh;
    CAPTURE(kernel, dtype_name(wt), epi.bias, (int)epi.act);
    // The 128 tiles store through the 64 tiles' gated epilogue text (linear_gate.glsl), the split-K reduce through
    // its own (linear_splitk.glsl, also tested gated in test_linear_splitk.cpp), and each of their pipelines costs
    // lavapipe up to a minute to compile cold: f16 W, with the gate read before the activation and after it.
    const bool costly = kernel.find("128") != std::string::npos || kernel.find("_sk") != std::string::npos;
    const bool two = (epi.bias && epi.act == ir::Act::silu) || (!epi.bias && epi.act == ir::Act::gelu_tanh);
    if (costly && (wt != DType::f16 || !two)) return;
    if (!exec::linear_variant_available(ctx, kernel, wt)) {
        SUCCEED(
            "not on this device: " << vk::linear_kernel_unavailable(*vk::find_linear_kernel(kernel), ctx.info(), wt));
        return;
    }
    Gated t = gated_graph(wt, epi.bias, epi.act, gate_first);
    test::ForceLinear force(kernel);
    auto plain = test::run_vk(t.g, t.in, t.ws, exec::Mode::full, "0");
    const uint64_t before = exec::linear_kernel_dispatches(kernel);
    auto fused = test::run_vk(t.g, t.in, t.ws, exec::Mode::full, "1");
    if (kernel != "reg") CHECK(exec::linear_kernel_dispatches(kernel) > before);  // the forced kernel took it
    CHECK(fused.c.gated_linears == 1);
    // Gone: the mul, the add (mul_add), the gate's slice (read in place).
    CHECK(fused.c.dispatches_per_run == plain.c.dispatches_per_run - 3);
    CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
    const auto cpu = cpu::run(t.g, t.in, [&](const ir::Value& v) { return t.ws.at(v.name); });
    CHECK(test::max_err(fused.out.at("y").to_f32(), cpu.at("y").to_f32()) <= h_bound(kernel, wt, t.K) + 1e-5);
}

namespace {
// Runs g with fusion `fuse` in `mode`, block weights selected as `bw` (regional replays: "_off" / "_ptr" shaders).
test::VkRun run_as(const ir::Graph& g, const std::map<std::string, Tensor>& in, const std::map<std::string, Tensor>& ws,
                   exec::Mode mode, const char* fuse, exec::BlockWeights bw = exec::BlockWeights::automatic) {
    auto wbytes = [&](const ir::Value& v, void* dst, size_t n) {
        const Tensor& t = ws.at(v.name);
        REQUIRE(t.nbytes() == n);
        std::memcpy(dst, t.bytes.data(), n);
    };
    ::setenv("KILN_FUSE", fuse, 1);
    exec::Executor ex(test::op_ctx(), g, wbytes, mode, false, bw);
    ::unsetenv("KILN_FUSE");
    for (auto& [name, t] : in) ex.set_input(name, t);
    ex.run();
    test::VkRun r;
    for (auto& [name, v] : g.outputs()) r.out[name] = ex.output(name);
    r.c = ex.counters();
    INFO("last validation message: " << vk::Context::last_validation_message());
    CHECK(vk::Context::validation_errors() == 0);
    return r;
}
}  // namespace

// DiT-like blocks as regions: the residual stream x is updated by two gated linears per block (the attention
// out-projection stand-in and the MLP's fc2, reading an f16-stored GELU hidden under KILN_ACT_F16). Regional mode
// replays block 0 with each block's weights (bound ranges, "_off" offsets or "_ptr" addresses) and x updated in place
// by the gated linear (it reads the residual only at its own element).
TEST_CASE("gated linears in replayed blocks, with block weights selected on the device, bitwise", "[op:linear_gated]") {
    const DType wt = GENERATE(DType::f16, DType::q4_k);
    const bool act_f16 = GENERATE(false, true);
    CAPTURE(dtype_name(wt), act_f16);
    const int64_t B = 2, S = 13, C = dtype_is_quant(wt) ? 256 : 64, blocks = 3;
    ir::Graph g;
    std::map<std::string, Tensor> ws;
    unsigned seed = 300;
    auto weight = [&](const std::string& name, Shape s, DType dt) {
        ws[name] = test::random_weight(s, dt, seed++, -0.3f, 0.3f);
        return g.weight(name, s, dt);
    };
    auto x = g.input("x", {B, S, C});
    auto c = g.input("c", {B, 16});
    for (int i = 0; i < blocks; ++i) {
        const std::string p = "blocks." + std::to_string(i) + ".";
        auto ada = weight(p + "ada.weight", {4 * C, 16}, DType::f16);
        auto proj = weight(p + "proj.weight", {C, C}, wt);
        auto proj_b = weight(p + "proj.bias", {C}, DType::f32);
        auto fc1 = weight(p + "fc1.weight", {2 * C, C}, wt);
        auto fc2 = weight(p + "fc2.weight", {C, 2 * C}, wt);
        g.begin_region("block", i);
        auto m = g.chunk(g.linear(c, ada, {}), 1, 4);  // shift, scale, gate_msa, gate_mlp [B, C]
        auto n1 = g.modulate(g.layer_norm(x, {}, {}, 1e-6f), m[0], m[1]);
        x = g.add(x, g.mul(g.reshape(m[2], {B, 1, C}), g.linear(n1, proj, proj_b)));
        // The GELU built into the linear, so the unfused plan stores the hidden f16 too (linear_act is a fusion).
        auto hid = g.linear(g.layer_norm(x, {}, {}, 1e-6f), fc1, {}, ir::Act::gelu_tanh);
        x = g.add(g.mul(g.linear(hid, fc2, {}), g.reshape(m[3], {B, 1, C})), x);
        g.end_region();
    }
    g.output(x, "y");
    std::map<std::string, Tensor> in{{"x", test::random_tensor({B, S, C}, 1)}, {"c", test::random_tensor({B, 16}, 2)}};
    if (act_f16) ::setenv("KILN_ACT_F16", "1", 1);
    const auto plain = run_as(g, in, ws, exec::Mode::full, "0");
    for (auto [mode, bw] : {std::pair{exec::Mode::full, exec::BlockWeights::automatic},
                            std::pair{exec::Mode::regional, exec::BlockWeights::automatic},
                            std::pair{exec::Mode::regional, exec::BlockWeights::offset},
                            std::pair{exec::Mode::regional, exec::BlockWeights::device}}) {
        CAPTURE(exec::mode_name(mode), (int)bw);
        const auto fused = run_as(g, in, ws, mode, "1", bw);
        CHECK(fused.c.gated_linears == 2 * blocks);
        CHECK(fused.c.f16_activations == plain.c.f16_activations);
        CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
    }
    ::unsetenv("KILN_ACT_F16");
    // Per block: the GELU hidden (read only by fc2) and the modulated norm (read only by proj). The second norm feeds
    // the residual's gated linear too, but is a plain layer_norm, which stores f32.
    if (act_f16) CHECK(plain.c.f16_activations == 2 * blocks);
}

// A gated linear's y read only by another linear stays f32 under KILN_ACT_F16 (the mul_add it replaces stores f32),
// and its x may be f16 (the tiled kernels' XF16 path). Every kernel, so [every-kernel]: CI runs it on lavapipe 22.3
// only (lavapipe 26 runs the cooperative-matrix kernels' f16-x path in "the tiled GEMM takes f16-stored x as it is").
TEST_CASE("a gated linear's y stays f32 under f16 activation storage", "[op:linear_gated][every-kernel]") {
    vk::Context& ctx = test::op_ctx();
    const std::string kernel = GENERATE(from_range(exec::linear_variants()));
    CAPTURE(kernel);
    if (!exec::linear_variant_available(ctx, kernel, DType::f16)) return;
    const int64_t M = 70, C = 68;
    ir::Graph g;
    auto x = g.input("x", {M, C}), gate = g.input("g", {C}), res = g.input("res", {M, C});
    auto hid = g.linear(x, g.weight("w1", {2 * C, C}, DType::f16), g.weight("b1", {2 * C}), ir::Act::gelu);
    auto y = g.add(res, g.mul(gate, g.linear(hid, g.weight("w2", {C, 2 * C}, DType::f16), {})));
    g.output(g.linear(y, g.weight("w3", {C, C}, DType::f16), {}), "z");
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, C}, 3)},
                                     {"g", test::random_tensor({C}, 4)},
                                     {"res", test::random_tensor({M, C}, 5)}};
    std::map<std::string, Tensor> ws{{"w1", test::random_weight({2 * C, C}, DType::f16, 6)},
                                     {"b1", test::random_tensor({2 * C}, 7)},
                                     {"w2", test::random_weight({C, 2 * C}, DType::f16, 8)},
                                     {"w3", test::random_weight({C, C}, DType::f16, 9)}};
    test::ForceLinear force(kernel);
    ::setenv("KILN_ACT_F16", "1", 1);
    const auto plain = test::run_vk(g, in, ws, exec::Mode::full, "0");
    const auto fused = test::run_vk(g, in, ws, exec::Mode::full, "1");
    ::unsetenv("KILN_ACT_F16");
    CHECK(fused.c.gated_linears == 1);
    CHECK(plain.c.f16_activations == 1);  // the hidden only
    CHECK(fused.c.f16_activations == 1);
    CHECK(fused.out.at("z").bytes == plain.out.at("z").bytes);
}

// Gate shapes the store reads by rows: full [B, S, N], [N] (every row), [B, 1, N] (per batch, also from a wider
// value). Others stay a mul_add, as do an h read twice, a residual read through a slice and a gate that is a weight
// (block weights are selected per replay for W and b only); over the binding limit (row chunks) nothing is fused
// either. Every plan gives the unfused bits.
TEST_CASE("which gated residuals fold into their linear", "[op:linear_gated]") {
    const int64_t B = 2, S = 5, N = 12, K = 8;
    struct Case {
        const char* name;
        int gated;
    };
    const Case k = GENERATE(Case{"full gate", 1}, Case{"row gate", 1}, Case{"batch gate", 1}, Case{"per-position", 0},
                            Case{"h read twice", 0}, Case{"residual slice", 0}, Case{"weight gate", 0},
                            Case{"over the binding limit", 0});
    CAPTURE(k.name);
    ir::Graph g;
    auto x = g.input("x", {B, S, K});
    auto h = g.linear(x, g.weight("w", {N, K}), g.weight("b", {N}));
    const std::string name = k.name;
    ir::Val gate = name == "full gate"      ? g.input("g", {B, S, N})
                   : name == "row gate"     ? g.input("g", {N})
                   : name == "per-position" ? g.input("g", {1, S, N})
                   : name == "weight gate"  ? g.weight("g", {N})  // a layer-scale parameter
                                            : g.input("g", {B, 1, N});
    ir::Val res = name == "residual slice" ? g.chunk(g.input("r", {B, S, 2 * N}), 2, 2)[1] : g.input("r", {B, S, N});
    g.output(g.add(g.mul(gate, h), res), "y");
    if (name == "h read twice") g.output(h, "h");
    std::map<std::string, Tensor> in{
        {"x", test::random_tensor({B, S, K}, 11)},
        {"g", test::random_tensor(g.value(gate.id).shape, 12)},
        {"r", test::random_tensor(name == "residual slice" ? Shape{B, S, 2 * N} : Shape{B, S, N}, 13)}};
    std::map<std::string, Tensor> ws{{"w", test::random_weight({N, K}, DType::f32, 14)},
                                     {"b", test::random_tensor({N}, 15)}};
    if (name == "weight gate") ws["g"] = in.at("g"), in.erase("g");
    const auto plain = test::run_vk(g, in, ws, exec::Mode::full, "0");
    if (name == "over the binding limit") ::setenv("KILN_MAX_BINDING_RANGE", std::to_string(S * N * 4).c_str(), 1);
    const auto fused = test::run_vk(g, in, ws, exec::Mode::full, "1");
    ::unsetenv("KILN_MAX_BINDING_RANGE");
    CHECK(fused.c.gated_linears == k.gated);
    if (name == "over the binding limit") CHECK(fused.c.split_ops > 0);
    CHECK(fused.out.at("y").bytes == plain.out.at("y").bytes);
    const auto cpu = cpu::run(g, in, [&](const ir::Value& v) { return ws.at(v.name); });
    CHECK(test::max_err(fused.out.at("y").to_f32(), cpu.at("y").to_f32()) <= h_bound("reg", DType::f32, K) + 1e-5);
}

TEST_CASE("gate_row_span: rows of the output per gate row", "[op:linear_gated]") {
    CHECK(ir::gate_row_span({2, 1, 8}, {2, 5, 8}) == 5);
    CHECK(ir::gate_row_span({2, 5, 8}, {2, 5, 8}) == 1);
    CHECK(ir::gate_row_span({8}, {2, 5, 8}) == 10);
    CHECK(ir::gate_row_span({1, 1, 8}, {2, 5, 8}) == 10);
    CHECK(ir::gate_row_span({2, 1, 1, 8}, {2, 3, 5, 8}) == 15);
    CHECK(ir::gate_row_span({2, 3, 1, 8}, {2, 3, 5, 8}) == 5);
    CHECK(ir::gate_row_span({1, 5, 8}, {2, 5, 8}) == 0);  // per position: broadcast over the batch, not whole rows
    CHECK(ir::gate_row_span({2, 5, 1}, {2, 5, 8}) == 0);  // broadcast along the row
    CHECK(ir::gate_row_span({2, 5, 8}, {5, 8}) == 0);     // larger than the output
}
