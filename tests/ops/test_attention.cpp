// attention softmax(q k^T s + mask) v, heads packed in the last dim, head_dim 1..512 (scalar and
// 4-vector variants, 1..4 query rows per invocation), Sq != Sk,
// with/without an additive mask broadcast over batch or rows. Scores: D-term f32 dot products of
// |q k| <= 1 scaled by 1/sqrt(D): ~sqrt(D) 2^-24 absolute; exp <= 3 + 2|s - max| ulp; the output is
// a convex combination of |v| <= 1 accumulated over Sk terms: ~Sk 2^-24. Max-abs 2e-5, rel L2 1e-5.
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
struct AttnCase {
    int64_t B, Sq, Sk, H, D;
    int mask;  // 0 none, 1 [1, 1, Sk], 2 [B, Sq, Sk]
};

// y = attention(q, k, v) of case c, with random inputs from `seed` on (q, k in [-2, 2]).
struct AttnProblem {
    ir::Graph g;
    std::map<std::string, Tensor> in;
    Shape sm;
    AttnProblem(const AttnCase& c, unsigned seed) {
        const int64_t W = c.H * c.D;
        auto q = g.input("q", {c.B, c.Sq, W});
        auto k = g.input("k", {c.B, c.Sk, W});
        auto v = g.input("v", {c.B, c.Sk, W});
        sm = c.mask == 1 ? Shape{1, 1, c.Sk} : Shape{c.B, c.Sq, c.Sk};
        ir::Val m = c.mask ? g.input("m", sm) : ir::Val{};
        g.output(g.attention(q, k, v, (int)c.H, m), "y");
        in = {{"q", test::random_tensor({c.B, c.Sq, W}, seed, -2.f, 2.f)},
              {"k", test::random_tensor({c.B, c.Sk, W}, seed + 1, -2.f, 2.f)},
              {"v", test::random_tensor({c.B, c.Sk, W}, seed + 2)}};
        if (c.mask) in["m"] = test::random_tensor(sm, seed + 3);
    }
};
}  // namespace

TEST_CASE("attention matches the CPU reference", "[op:attention]") {
    AttnCase c = GENERATE(AttnCase{1, 1, 1, 1, 1, 0}, AttnCase{1, 3, 13, 1, 3, 0}, AttnCase{2, 13, 7, 3, 8, 1},
                          AttnCase{2, 33, 127, 2, 64, 2}, AttnCase{1, 5, 40, 1, 256, 0}, AttnCase{1, 70, 19, 4, 72, 1},
                          AttnCase{1, 45, 9, 2, 100, 2}, AttnCase{1, 17, 17, 1, 512, 0});
    CAPTURE(c.B, c.Sq, c.Sk, c.H, c.D, c.mask);
    AttnProblem a(c, 40);
    if (c.mask) {
        float* p = a.in["m"].data<float>();
        for (int64_t i = 1; i < a.in["m"].numel(); i += 3) p[i] = -1e30f;  // masked out (never a whole row)
    }
    auto r = test::run_op(a.g, a.in);
    CHECK(test::max_err(r.gpu, r.cpu) <= 2e-5);
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("attention with an explicit scale", "[op:attention]") {
    ir::Graph g;
    Shape s{2, 9, 32};
    auto q = g.input("q", s), k = g.input("k", s), v = g.input("v", s);
    g.output(g.attention(q, k, v, 2, {}, 0.3f), "y");
    auto r = test::run_op(
        g, {{"q", test::random_tensor(s, 44)}, {"k", test::random_tensor(s, 45)}, {"v", test::random_tensor(s, 46)}});
    CHECK(test::max_err(r.gpu, r.cpu) <= 2e-5);
}

TEST_CASE("attention rejects bad shapes and head_dim", "[op:attention][bad]") {
    ir::Graph g;
    auto q = g.input("q", {1, 4, 12}), k = g.input("k", {1, 5, 12}), v = g.input("v", {1, 6, 12});
    REQUIRE_THROWS_WITH(g.attention(q, k, v, 2), Catch::Contains("attention") && Catch::Contains("[1, 6, 12]"));
    REQUIRE_THROWS_WITH(g.attention(q, k, k, 5), Catch::Contains("attention") && Catch::Contains("5 heads"));
    auto m = g.input("m", {1, 3, 5});
    REQUIRE_THROWS_WITH(g.attention(q, k, k, 2, m), Catch::Contains("attention") && Catch::Contains("[1, 3, 5]"));
    auto big = g.input("big", {1, 2, 1024});
    auto y = g.attention(big, big, big, 1);  // head_dim 1024 > 512: rejected at lowering
    REQUIRE_THROWS_WITH(vk::lower(g, g.nodes()[(size_t)g.value(y).producer]),
                        Catch::Contains("attention") && Catch::Contains("1024"));
}

TEST_CASE("attention through texel buffers equals the storage-buffer shaders bitwise", "[op:attention][tex]") {
    if (!test::op_ctx().info().texel_formats) {
        WARN("skipped: no uniform texel buffers of the needed formats on this device");
        return;
    }
    AttnCase c = GENERATE(AttnCase{1, 1, 1, 1, 1, 0}, AttnCase{1, 3, 13, 1, 3, 0}, AttnCase{2, 13, 7, 3, 8, 1},
                          AttnCase{2, 33, 127, 2, 64, 2}, AttnCase{1, 70, 19, 4, 72, 1}, AttnCase{1, 45, 9, 2, 100, 2});
    CAPTURE(c.B, c.Sq, c.Sk, c.H, c.D, c.mask);
    const AttnProblem a(c, 47);
    const auto buf = test::run_vk_env("KILN_ATTENTION", "buf", a.g, a.in, {}),
               tex = test::run_vk_env("KILN_ATTENTION", "tex", a.g, a.in, {});
    CHECK(buf.c.texel_dispatches == 0);
    CHECK(tex.c.texel_dispatches == 1);
    CHECK(tex.out.at("y").bytes == buf.out.at("y").bytes);
}
