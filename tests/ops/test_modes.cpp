// The lowerings under every executor mode: a small DiT-like block (f16 weights, 4-vector and 1-row
// linear variants, attention, norms, modulate) repeated as regions, run eager / full / regional
// (regional replays block 0's command buffer with each block's weights swapped in). Tolerance: a
// chain of f32 ops each within ~1e-6 relative of the reference: rel L2 1e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
void dit_like_blocks(exec::Mode mode) {
    CAPTURE(exec::mode_name(mode));
    const int64_t B = 2, S = 13, C = 32, H = 2, blocks = 3;
    ir::Graph g;
    auto x = g.input("x", {B, S, C});
    auto t = g.input("t", {B});
    ir::TimestepAttrs ta;
    ta.dim = 16;
    auto temb = g.silu(g.timestep_embedding(t, ta));  // [B, 16]
    std::map<std::string, Tensor> ws;
    unsigned seed = 200;
    auto weight = [&](const std::string& name, Shape s, DType dt) {
        ws[name] = test::random_weight(s, dt, seed++, -0.3f, 0.3f);
        return g.weight(name, s, dt);
    };
    for (int i = 0; i < blocks; ++i) {
        std::string p = "blocks." + std::to_string(i) + ".";
        auto ada_w = weight(p + "ada.weight", {2 * C, 16}, DType::bf16);
        auto qkv_w = weight(p + "qkv.weight", {3 * C, C}, DType::f16);
        auto qkv_b = weight(p + "qkv.bias", {3 * C}, DType::f32);
        auto out_w = weight(p + "out.weight", {C, C}, DType::f16);
        g.begin_region("block", i);
        auto mod = g.chunk(g.linear(temb, ada_w, {}), 1, 2);  // shift, scale [B, C]
        auto h = g.modulate(g.layer_norm(x, {}, {}, 1e-6f), mod[0], mod[1]);
        auto qkv = g.chunk(g.linear(h, qkv_w, qkv_b), 2, 3);  // [B, S, C] x 3
        auto a = g.attention(g.rms_norm(qkv[0], {}, 1e-6f), qkv[1], qkv[2], (int)H);
        x = g.add(x, g.gelu(g.linear(a, out_w, {}), true));
        g.end_region();
    }
    g.output(x, "y");
    std::map<std::string, Tensor> in{{"x", test::random_tensor({B, S, C}, 1)},
                                     {"t", Tensor::from_f32({B}, {3.f, 999.f})}};
    auto r = test::run_op(g, in, ws, mode);
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}
}  // namespace

TEST_CASE("a repeated block gives the CPU result in eager and full modes", "[modes]") {
    dit_like_blocks(GENERATE(exec::Mode::eager, exec::Mode::full));
}

// Regional mode replays the block: an activation computed before the blocks (here temb) and read by
// every instance must stay alive across all replays (this once failed; the case below isolates it).
TEST_CASE("a repeated block gives the CPU result in regional mode", "[modes]") {
    dit_like_blocks(exec::Mode::regional);
}

TEST_CASE("regional mode: an activation shared by every block instance", "[modes]") {
    bool from_input = GENERATE(true, false);
    CAPTURE(from_input);
    const int64_t B = 2, C = 8;
    ir::Graph g;
    auto x = g.input("x", {B, C});
    auto tin = g.input("tin", {B, C});
    auto temb = from_input ? tin : g.scale(tin, 2.f);  // read by every block
    for (int i = 0; i < 3; ++i) {
        g.begin_region("block", i);
        x = g.add(x, g.scale(temb, 1.f));
        g.end_region();
    }
    g.output(x, "y");
    auto r = test::run_op(g, {{"x", test::random_tensor({B, C}, 1)}, {"tin", test::random_tensor({B, C}, 3)}}, {},
                          exec::Mode::regional);
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}
