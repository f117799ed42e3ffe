// attention softmax(q k^T s + mask) v, heads packed in the last dim, head_dim 1..512 (scalar and
// 4-vector variants, 1..4 query rows per invocation), Sq != Sk,
// with/without an additive mask broadcast over batch or rows. Scores: D-term f32 dot products of
// |q k| <= 1 scaled by 1/sqrt(D): ~sqrt(D) 2^-24 absolute; exp <= 3 + 2|s - max| ulp; the output is
// a convex combination of |v| <= 1 accumulated over Sk terms: ~Sk 2^-24. Max-abs 2e-5, rel L2 1e-5.
// The flash kernel (KILN_ATTENTION=flash) forms every score by the same f32 dot (q pre-scaled, d ascending); its
// softmax differs in order only: per K/V tile of BC keys, p = exp(s - m_tile) and the running O and l are rescaled
// by alpha = exp(m_old - m_new) (at most Sk / BC times, each 3 + 2|m_old - m_new| ulp on terms whose weight that
// factor shrinks), and the PV sums run per tile: the same ~Sk 2^-24 order, so the same bounds (docs/attention.md).
// Soft-capping adds the tanh error: cap * tanh_accurate(s / cap) is a few (<= 4) ulp of cap in score, and a
// perturbation e of every score moves a convex combination of |v| <= 1 by at most 2 e: + 8 cap 2^-24.
#include <array>

#include "runtime/exec/attention_select.h"
#include "runtime/exec/attention_table.h"
#include "runtime/vulkan/attention_flash.h"
#include "runtime/vulkan/pipeline.h"
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
    const char* kernel = GENERATE("rows", "flash");
    AttnCase c = GENERATE(AttnCase{1, 1, 1, 1, 1, 0}, AttnCase{1, 3, 13, 1, 3, 0}, AttnCase{2, 13, 7, 3, 8, 1},
                          AttnCase{2, 33, 127, 2, 64, 2}, AttnCase{1, 5, 40, 1, 256, 0}, AttnCase{1, 70, 19, 4, 72, 1},
                          AttnCase{1, 45, 9, 2, 100, 2}, AttnCase{1, 17, 17, 1, 512, 0});
    CAPTURE(kernel, c.B, c.Sq, c.Sk, c.H, c.D, c.mask);
    AttnProblem a(c, 40);
    if (c.mask) {
        float* p = a.in["m"].data<float>();
        for (int64_t i = 1; i < a.in["m"].numel(); i += 3) p[i] = -1e30f;  // masked out (never a whole row)
    }
    test::ScopedEnv env("KILN_ATTENTION", kernel);
    auto r = test::run_op(a.g, a.in);
    CHECK(test::max_err(r.gpu, r.cpu) <= 2e-5);
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

TEST_CASE("attention with an explicit scale", "[op:attention]") {
    const char* kernel = GENERATE("rows", "flash");
    test::ScopedEnv env("KILN_ATTENTION", kernel);
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

namespace {
// Grouped-query, causal and soft-capped attention: Hkv key/value heads, mask 0 none, 1 [1, 1, Sk] padding (the last
// key of batch 0 hidden where B = 2: [B, 1, Sk]), 2 [B, Sq, Sk] with finfo.min as Gemma-2's masks.
struct OptCase {
    int64_t B, Sq, Sk, H, Hkv, D;
    int mask;
    bool causal;
    float softcap;
};

struct OptProblem {
    ir::Graph g;
    std::map<std::string, Tensor> in;
    // f16: q, k, v stored f16; o16: the output too (Graph::set_storage; both sides round it once where written).
    OptProblem(const OptCase& c, unsigned seed, bool f16 = false, bool o16 = false) {
        const int64_t W = c.H * c.D, Wk = c.Hkv * c.D;
        const Shape sq{c.B, c.Sq, W}, sk{c.B, c.Sk, Wk};
        auto q = g.input("q", sq), k = g.input("k", sk), v = g.input("v", sk);
        if (f16)
            for (ir::Val t : {q, k, v}) g.set_storage(t, DType::f16);
        const Shape sm = c.mask == 1 ? Shape{c.B, 1, c.Sk} : Shape{c.B, c.Sq, c.Sk};
        ir::Val m = c.mask ? g.input("m", sm) : ir::Val{};
        ir::AttentionAttrs a;
        a.heads = (int)c.H;
        a.kv_heads = (int)c.Hkv;
        a.causal = c.causal;
        a.softcap = c.softcap;
        ir::Val y = g.attention(q, k, v, a, m);
        if (o16) g.set_storage(y, DType::f16);
        g.output(y, "y");
        // Scores reach |s| ~ 2 sqrt(D) / 3 with q, k in [-2, 2]: well inside a 50 cap, across a 5 cap.
        in = {{"q", test::random_tensor(sq, seed, -2.f, 2.f)},
              {"k", test::random_tensor(sk, seed + 1, -2.f, 2.f)},
              {"v", test::random_tensor(sk, seed + 2)}};
        if (f16)  // the values the device reads, for the CPU too
            for (auto& [name, t] : in) t = t.astype(DType::f16).astype(DType::f32);
        if (c.mask) {
            Tensor t(DType::f32, sm);
            const float lowest = std::numeric_limits<float>::lowest();
            for (int64_t i = 0; i < t.numel(); ++i) {
                const int64_t j = i % c.Sk;
                t.data<float>()[i] = c.mask == 1 ? (i < c.Sk && j == c.Sk - 1 && c.Sk > 1 ? lowest : 0.f)
                                                 : ((i / c.Sk + j) % 5 == 1 && j > 0 ? lowest : 0.f);
            }
            in["m"] = t;
        }
    }
};

double opt_tolerance(const OptCase& c) { return 2e-5 + 8.0 * c.softcap * std::ldexp(1.0, -24); }

// Elements of gpu off cpu by more than tol (their f32 values' bound) or, with the output stored f16, by more than
// tol plus both sides' rounding of that value: G = f16(g) within 2^-10 |g| <= 2^-10 |G| / (1 - 2^-10) (RTE or RTZ,
// normal range), 2^-24 absolute below it; likewise C.
int64_t off_bound(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol, bool o16) {
    const double u = o16 ? std::ldexp(1.0, -10) / (1 - std::ldexp(1.0, -10)) : 0.0,
                 sub = o16 ? std::ldexp(1.0, -23) : 0;
    int64_t off = 0;
    for (size_t i = 0; i < gpu.size(); ++i)
        off += std::fabs((double)gpu[i] - cpu[i]) > tol + u * (std::fabs(gpu[i]) + std::fabs(cpu[i])) + sub;
    return off;
}
// The relative L2 bound: the f32 kernels' 1e-5, plus both roundings' 2 x 2^-10 / (1 - 2^-10) with the output f16.
double rel_bound(bool o16) { return 1e-5 + (o16 ? 2 * std::ldexp(1.0, -10) / (1 - std::ldexp(1.0, -10)) : 0.0); }
}  // namespace

TEST_CASE("attention with grouped-query heads, causal masks and soft-capping matches the CPU reference",
          "[op:attention]") {
    const char* kernel = GENERATE("rows", "flash");
    // Tokens 3, 13, 127; head_dim 64, 72, 128, 256; joint text + image lengths (SD3/Flux: 7 text + 64 image tokens,
    // 13 + 256); Sq < Sk (a causal prefix) and Sq > Sk (causal rows that see no key give 0).
    OptCase c = GENERATE(OptCase{1, 3, 3, 4, 2, 64, 0, true, 0.f}, OptCase{2, 13, 13, 8, 2, 72, 1, true, 50.f},
                         OptCase{1, 127, 127, 4, 1, 128, 2, false, 50.f}, OptCase{2, 13, 13, 2, 1, 256, 2, true, 5.f},
                         OptCase{1, 71, 71, 3, 3, 64, 1, false, 0.f}, OptCase{1, 269, 269, 2, 1, 64, 0, false, 20.f},
                         OptCase{1, 5, 40, 6, 3, 64, 0, true, 0.f}, OptCase{1, 40, 5, 2, 2, 72, 0, true, 0.f},
                         OptCase{2, 33, 127, 4, 2, 128, 1, true, 30.f});
    CAPTURE(kernel, c.B, c.Sq, c.Sk, c.H, c.Hkv, c.D, c.mask, c.causal, c.softcap);
    OptProblem a(c, 60);
    test::ScopedEnv env("KILN_ATTENTION", kernel);
    auto r = test::run_op(a.g, a.in);
    CHECK(test::max_err(r.gpu, r.cpu) <= opt_tolerance(c));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
    if (c.causal && c.Sq > c.Sk) {  // rows i < Sq - Sk see no key: exactly 0
        const int64_t W = c.H * c.D;
        for (int64_t i = 0; i < (c.Sq - c.Sk) * W; ++i) REQUIRE(r.gpu[(size_t)i] == 0.f);
    }
}

TEST_CASE("attention reads q/k/v and writes its output stored as f16 (the flash kernel, whatever KILN_ATTENTION says)",
          "[op:attention]") {
    // The CPU sees the same f16-rounded inputs: the f32 bounds above apply, plus the output's rounding where it is
    // stored f16 (off_bound). The output alone f16 also takes the flash kernel.
    const char* kernel = GENERATE("auto", "rows", "tex");
    const int io = GENERATE(1, 2, 3);  // bit 0: q/k/v f16, bit 1: the output f16
    OptCase c = GENERATE(OptCase{2, 13, 13, 4, 2, 64, 1, true, 0.f}, OptCase{1, 127, 127, 2, 1, 72, 2, false, 50.f},
                         OptCase{1, 3, 30, 2, 2, 256, 0, false, 0.f});
    CAPTURE(kernel, io, c.B, c.Sq, c.Sk, c.H, c.Hkv, c.D, c.mask, c.causal, c.softcap);
    const bool o16 = io & 2;
    OptProblem a(c, 70, io & 1, o16);
    test::ScopedEnv env("KILN_ATTENTION", kernel);
    const ir::Node& n = a.g.nodes().back();
    vk::Dispatch d = vk::lower(a.g, n);
    CHECK(d.shader.kernel == "flash");
    REQUIRE(exec::choose_attention_flash(test::op_ctx(), a.g, n, d));  // what the executor runs
    // auto on a GPU: the attention table's pick, a flash kernel; the cooperative-matrix ones are held to their own
    // bound with f16 q/k/v by "the cooperative-matrix flash kernels match the CPU reference".
    if (std::string(kernel) == "auto" && exec::attention_table_decides(test::op_ctx()) && d.shader.kernel != "flash") {
        CHECK((d.shader.kernel == "coopmat" || d.shader.kernel == "coopmat4"));
        return;
    }
    CHECK(d.shader.kernel == "flash");
    auto r = test::run_op(a.g, a.in);
    CHECK(off_bound(r.gpu, r.cpu, opt_tolerance(c), o16) == 0);
    CHECK(rel_l2(r.gpu, r.cpu) <= rel_bound(o16));
}

TEST_CASE("KILN_ATTENTION picks the attention kernel", "[op:attention]") {
    ir::Graph g;
    auto q = g.input("q", {1, 9, 128}), kv = g.input("kv", {1, 9, 64}), big = g.input("big", {1, 2, 1024});
    ir::AttentionAttrs a;
    a.heads = 2;
    a.kv_heads = 1;
    auto y = g.attention(q, kv, kv, a);
    auto y_big = g.attention(big, big, big, 1);  // head_dim 1024: neither kernel (rejected by both lowerings)
    const ir::Node &n = g.nodes()[(size_t)g.value(y).producer], &nb = g.nodes()[(size_t)g.value(y_big).producer];
    auto kernel_of = [&](const char* v) {
        test::ScopedEnv env("KILN_ATTENTION", v);
        vk::Dispatch d = vk::lower(g, n);
        exec::choose_attention_flash(test::op_ctx(), g, n, d);
        return d.shader.kernel;
    };
    const vk::DeviceInfo& dev = test::op_ctx().info();
    const bool cpu = dev.vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;  // auto: rows on lavapipe
    const bool cm = vk::attention_coopmat_unavailable(dev).empty();
    if (cpu || !exec::attention_table_decides(test::op_ctx())) {
        CHECK(kernel_of("auto") == (cpu ? "vec4" : "flash"));  // a CPU device; lavapipe presented as a GPU
    } else {  // a GPU: the attention table's pick for head size 64, f32, 9 keys (measured here if not yet)
        const std::string pick = exec::attention_table(test::op_ctx(), 64, false).pick(64, false, 9, [&](auto& k) {
            return exec::attention_kernel_unsupported(test::op_ctx(), k, g, n).empty();
        });
        CHECK(kernel_of("auto") == (pick.empty() ? "flash" : pick == "rows" ? "vec4" : pick));
    }
    if (cm) CHECK(kernel_of("coopmat") == "coopmat");
    if (vk::attention_coopmat4_unavailable(dev).empty()) CHECK(kernel_of("coopmat4") == "coopmat4");
    CHECK(kernel_of("flash") == "flash");
    CHECK(kernel_of("rows") == "vec4");
    CHECK(kernel_of("buf") == "vec4");
    CHECK(kernel_of("tex") == "vec4");  // the texel form is choose_texel_op's (linear_select.cpp)
    vk::Dispatch none;
    CHECK(!exec::choose_attention_flash(test::op_ctx(), g, nb, none));  // flash does not apply: the rows kernel's
    CHECK(exec::attention_texel_choice("rows") == "auto");
    CHECK(exec::attention_texel_choice("tex") == "tex");
    CHECK(!vk::attention_flash_unsupported(g, nb, 1u << 20).empty());
    REQUIRE_THROWS_WITH(vk::lower_attention_flash(g, nb, 1u << 20), Catch::Contains("1024"));
    // Tiles by head_dim and shared memory: 16 x 32 at head_dim 64 in 16 KiB, smaller as head_dim grows.
    CHECK(vk::flash_tile(64, 16384).br == 16);
    CHECK(vk::flash_tile(64, 16384).bc == 32);
    CHECK(vk::flash_tile(256, 32768).br == 8);
    CHECK(vk::flash_tile(512, 32768).br == 4);
    CHECK(vk::flash_tile(512, 16384).br == 0);
    // The cooperative-matrix variant's tiles: whole fragments, within shared memory (attention_flash_cm.glsl).
    vk::DeviceInfo h200, lvp26, bare;
    h200.coopmat_m = h200.coopmat_n = h200.coopmat_k = 16, h200.subgroup_size = 32;
    lvp26.coopmat_m = lvp26.coopmat_n = lvp26.coopmat_k = 8, lvp26.subgroup_size = 8;
    for (int64_t d : {64, 72, 128})
        CHECK((vk::flash_coopmat_tile(d, h200, 49152).br == 16 && vk::flash_coopmat_tile(d, h200, 49152).bc == 32));
    CHECK((vk::flash_coopmat_tile(256, h200, 49152).br == 16 && vk::flash_coopmat_tile(256, h200, 49152).bc == 16));
    CHECK((vk::flash_coopmat_tile(128, lvp26, 32768).br == 16 && vk::flash_coopmat_tile(128, lvp26, 32768).bc == 16));
    CHECK((vk::flash_coopmat_tile(256, lvp26, 32768).br == 8 && vk::flash_coopmat_tile(256, lvp26, 32768).bc == 16));
    CHECK(vk::flash_coopmat_tile(64, bare, 49152).br == 0);
    CHECK(vk::flash_coopmat_tile(256, h200, 16384).br == 0);
    // The rows-per-subgroup variant: 4 subgroups of 16 rows (64) against 16 keys on an H200 up to head dim 72, 2 at
    // 128, none at 256 (coopmat4 falls back to coopmat there); on lavapipe 26 (8 x 8 x 8, subgroups of 8, 32 KiB)
    // 4 x 16 rows against 8 keys at 64 and 72, 4 x 8 at 128, 1 x 8 at 256.
    auto cm4 = [](int64_t d, const vk::DeviceInfo& dev, uint32_t smem) {
        const vk::Coopmat4Tile t = vk::flash_coopmat4_tile(d, dev, smem);
        return std::array<uint32_t, 3>{t.nsg, t.rs, t.bc};
    };
    for (int64_t d : {64, 72}) CHECK(cm4(d, h200, 49152) == std::array<uint32_t, 3>{4, 16, 16});
    CHECK(cm4(128, h200, 49152) == std::array<uint32_t, 3>{2, 16, 16});
    CHECK(cm4(256, h200, 49152)[0] == 0);
    for (int64_t d : {64, 72}) CHECK(cm4(d, lvp26, 32768) == std::array<uint32_t, 3>{4, 16, 8});
    CHECK(cm4(128, lvp26, 32768) == std::array<uint32_t, 3>{4, 8, 8});
    CHECK(cm4(256, lvp26, 32768) == std::array<uint32_t, 3>{1, 8, 8});
    CHECK(cm4(64, bare, 49152)[0] == 0);
    bare.coopmat_why = "no VK_KHR_cooperative_matrix";
    CHECK_THAT(vk::attention_coopmat4_unavailable(bare), Catch::Contains("no VK_KHR_cooperative_matrix"));
    CHECK_THAT(vk::attention_coopmat_unavailable(bare), Catch::Contains("no VK_KHR_cooperative_matrix"));
    if (vk::has_shader("attention_coopmat")) {
        CHECK(vk::attention_coopmat_unsupported(h200, g, n, 49152).empty());  // head_dim 64
        CHECK(vk::attention_coopmat_unsupported(h200, g, nb, 49152).find("1024") != std::string::npos);
        const vk::Dispatch d = vk::lower_attention_coopmat(h200, g, n, 49152);
        CHECK(d.shader.name() == "attention_coopmat");
        CHECK((d.spec[1] == 16 && d.spec[2] == 32 && d.groups[0] == 1 && d.groups[1] == 2));
        CHECK((d.spec[4] == 16 && d.spec[7] == 32 && d.spec[8] == 64));  // shape, subgroup, D in whole fragments
        CHECK(d.spec[9] == 3);                                           // q scaled by 2^3 = 1 / scale
    }
    if (cm && vk::attention_coopmat4_unavailable(dev).empty()) {
        // coopmat4 where none of its tiles fits but one of coopmat's does: coopmat (head_dim 256 in 22000 bytes on
        // lavapipe 26: coopmat's 8 x 8 takes 20480, coopmat4's smallest 26176; an H200 at head_dim 256 in its 48 KiB).
        ir::Graph g2;  // not g: a node added there would move n and nb
        auto q256 = g2.input("q256", {1, 9, 512});
        auto y256 = g2.attention(q256, q256, q256, 2);
        const ir::Node& n256 = g2.nodes()[(size_t)g2.value(y256).producer];
        test::ScopedEnv env("KILN_ATTENTION", "coopmat4"), smem("KILN_TEST_MAX_SHARED_MEMORY", "22000");
        if (!vk::attention_coopmat4_unsupported(dev, g2, n256, 22000).empty() &&
            vk::attention_coopmat_unsupported(dev, g2, n256, 22000).empty()) {
            vk::Dispatch d = vk::lower(g2, n256);
            REQUIRE(exec::choose_attention_flash(test::op_ctx(), g2, n256, d));
            CHECK(d.shader.kernel == "coopmat");
        }
    }
    if (vk::has_shader("attention_coopmat4")) {
        CHECK(vk::attention_coopmat4_unsupported(h200, g, nb, 49152).find("1024") != std::string::npos);
        const vk::Dispatch d = vk::lower_attention_coopmat4(h200, g, n, 49152);
        CHECK(d.shader.name() == "attention_coopmat4");
        CHECK((d.spec[1] == 64 && d.spec[2] == 16 && d.groups[0] == 1 && d.groups[1] == 2));
        CHECK((d.spec[8] == 64 && d.spec[9] == 3 && d.spec[10] == 128 && d.spec[11] == 16));  // 4 subgroups of 16 rows
        CHECK(d.spec[12] == 2);  // 2 lanes per row in the softmax
    }
}

TEST_CASE("attention rejects bad grouped-query shapes", "[op:attention][bad]") {
    ir::Graph g;
    auto q = g.input("q", {1, 4, 24}), k = g.input("k", {1, 4, 12}), k3 = g.input("k3", {1, 4, 8});
    ir::AttentionAttrs a;
    a.heads = 4;
    a.kv_heads = 3;
    REQUIRE_THROWS_WITH(g.attention(q, k, k, a), Catch::Contains("not a multiple of 3 key/value heads"));
    a.kv_heads = 2;
    REQUIRE_THROWS_WITH(g.attention(q, k3, k3, a), Catch::Contains("do not match"));
    a.softcap = -1.f;
    REQUIRE_THROWS_WITH(g.attention(q, k, k, a), Catch::Contains("softcap"));
    a.softcap = 0.f;
    CHECK_NOTHROW(g.attention(q, k, k, a));
}

TEST_CASE("the flash kernel's smaller tiles match the CPU reference", "[op:attention]") {
    // KILN_TEST_MAX_SHARED_MEMORY: the tiles of devices with less shared memory than lavapipe's 32 KiB.
    struct TileCase {
        const char* limit;
        int64_t D;
        uint32_t br, bc;
    };
    const TileCase t =
        GENERATE(TileCase{"20000", 128, 16, 16}, TileCase{"8192", 64, 8, 16}, TileCase{"6000", 64, 8, 8});
    CAPTURE(t.limit, t.D);
    const OptCase c{2, 37, 45, 4, 2, t.D, 1, true, 30.f};
    OptProblem a(c, 80);
    test::ScopedEnv env("KILN_ATTENTION", "flash"), smem("KILN_TEST_MAX_SHARED_MEMORY", t.limit);
    const ir::Node& n = a.g.nodes().back();
    REQUIRE(n.op == ir::Op::attention);
    vk::Dispatch d = vk::lower(a.g, n);
    REQUIRE(exec::choose_attention_flash(test::op_ctx(), a.g, n, d));
    CHECK(d.spec[1] == t.br);
    CHECK(d.spec[2] == t.bc);
    auto r = test::run_op(a.g, a.in);
    CHECK(test::max_err(r.gpu, r.cpu) <= opt_tolerance(c));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

namespace {
// The cooperative-matrix variant's error beyond the scalar kernel's (docs/attention.md, attention_flash_cm.glsl):
// every operand x is an f16 pair hi + lo with |x - hi - lo| <= 2^-21 |x| + 2^-23, and a product x y takes hi hi +
// hi lo + lo hi: |error| <= 5 2^-22 |x y| + 2^-23 (|x| + |y|). q enters as q scale 2^qsh with 2^qsh within sqrt 2 of
// 1 / scale (softcap: scale / cap, the cap's tanh is 1-Lipschitz), so a score moves by at most
//   ds = 5 2^-22 scale sum_d |q_d k_d| + 2^-23 scale sum_d (|q_d| + sqrt2 |k_d|),
// taken here from the data (the largest over query/key pairs); P enters as P 2^12 against v: relative 5 2^-22 on
// the convex combination, + 2^-23 + Sk 2^-35 max|v|. A perturbation ds of every score moves a convex combination of
// v by at most 2 ds max|v|. Where the device's MulAdd keeps f32 precision (the spec's f32 C type) that is all; the
// spec leaves the precision to the device, so a device that rounds products to f16 fails this bound.
double coopmat_extra(const OptProblem& a, const OptCase& c) {
    const Tensor &q = a.in.at("q"), &k = a.in.at("k"), &v = a.in.at("v");
    const int64_t W = c.H * c.D, Wk = c.Hkv * c.D;
    const double scale = 1.0 / std::sqrt((double)c.D);
    double ds = 0, vmax = 0;
    for (int64_t i = 0; i < v.numel(); ++i) vmax = std::max(vmax, (double)std::abs(v.data<float>()[i]));
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.H; ++h) {
            const int64_t hk = h / (c.H / c.Hkv);
            for (int64_t i = 0; i < c.Sq; ++i)
                for (int64_t j = 0; j < c.Sk; ++j) {
                    const float* qr = q.data<float>() + (b * c.Sq + i) * W + h * c.D;
                    const float* kr = k.data<float>() + (b * c.Sk + j) * Wk + hk * c.D;
                    double prod = 0, sum = 0;
                    for (int64_t d = 0; d < c.D; ++d) {
                        prod += std::abs((double)qr[d] * kr[d]);
                        sum += std::abs(qr[d]) + std::sqrt(2.0) * std::abs(kr[d]);
                    }
                    ds = std::max(ds, scale * (5 * std::ldexp(prod, -22) + std::ldexp(sum, -23)));
                }
        }
    return 2 * ds * vmax + 5 * std::ldexp(vmax, -22) + std::ldexp(1.0, -23) + c.Sk * std::ldexp(vmax, -35);
}
}  // namespace

namespace {
// "" when KILN_ATTENTION=kernel (coopmat or coopmat4) can run on ctx's device, else why not.
std::string coopmat_unavailable(vk::Context& ctx, const std::string& kernel) {
    return kernel == "coopmat4" ? vk::attention_coopmat4_unavailable(ctx.info())
                                : vk::attention_coopmat_unavailable(ctx.info());
}

// As test::run_op under the caller's KILN_ATTENTION, checking that the plan ran attention_<kernel> once.
test::OpRun run_kernel(const OptProblem& a, const std::string& kernel) {
    exec::Executor ex(
        test::op_ctx(), a.g, [](const ir::Value&, void*, size_t) {}, exec::Mode::full);
    for (const auto& [name, t] : a.in) ex.set_input(name, t);
    ex.run();
    int runs = 0;
    for (const exec::DispatchCost& c : ex.cost().per_dispatch)
        if (c.shader == "attention_" + kernel) runs += c.per_run;
    CHECK(runs == 1);
    INFO("last validation message: " << vk::Context::last_validation_message());
    CHECK(vk::Context::validation_errors() == 0);
    const auto cpu = cpu::run(a.g, a.in, [](const ir::Value&) { return Tensor{}; });
    return {ex.output("y").to_f32(), cpu.at("y").to_f32()};
}
}  // namespace

TEST_CASE("the cooperative-matrix flash kernels match the CPU reference", "[op:attention][coopmat]") {
    vk::Context& ctx = test::op_ctx();
    // coopmat: 64 invocations per query tile; coopmat4: the query rows split over subgroups.
    const std::string kernel = GENERATE("coopmat", "coopmat4");
    const std::string why = coopmat_unavailable(ctx, kernel);
    if (!why.empty()) {
        test::ScopedEnv env("KILN_ATTENTION", kernel.c_str());
        OptProblem a(OptCase{1, 3, 3, 1, 1, 64, 0, false, 0.f}, 90);
        const ir::Node& n = a.g.nodes().back();
        vk::Dispatch d = vk::lower(a.g, n);
        CHECK_THROWS_WITH(exec::choose_attention_flash(ctx, a.g, n, d), Catch::Contains("KILN_ATTENTION=" + kernel));
        WARN("attention_" << kernel << " not run on '" << ctx.info().name << "': " << why);
        return;
    }
    // Head dims 64, 72 (DiT; 80 in 16-wide fragments), 128, 256 (Gemma-2); Sq = Sk = 269 (not a multiple of any
    // tile; SD3-like joint lengths), a padding mask [B, 1, Sk], [B, Sq, Sk] finfo.min masks, causal (Sq < Sk, Sq > Sk),
    // grouped-query heads, soft-capping; q/k/v stored f32 and f16.
    OptCase c = GENERATE(OptCase{1, 269, 269, 2, 1, 64, 1, false, 0.f}, OptCase{2, 269, 269, 2, 2, 72, 1, false, 0.f},
                         OptCase{1, 127, 127, 4, 1, 128, 2, false, 50.f}, OptCase{2, 13, 13, 8, 2, 72, 1, true, 50.f},
                         OptCase{2, 37, 45, 2, 1, 256, 2, true, 5.f}, OptCase{1, 5, 40, 6, 3, 64, 0, true, 0.f},
                         OptCase{1, 40, 5, 2, 2, 128, 0, true, 0.f}, OptCase{1, 70, 70, 2, 1, 256, 0, false, 20.f});
    const bool f16 = GENERATE(false, true);  // q, k, v and the output stored f16
    CAPTURE(kernel, c.B, c.Sq, c.Sk, c.H, c.Hkv, c.D, c.mask, c.causal, c.softcap, f16);
    OptProblem a(c, 90, f16, f16);
    test::ScopedEnv env("KILN_ATTENTION", kernel.c_str());
    const ir::Node& n = a.g.nodes().back();
    vk::Dispatch d = vk::lower(a.g, n);
    REQUIRE(exec::choose_attention_flash(ctx, a.g, n, d));
    REQUIRE(d.shader.kernel == kernel);
    CAPTURE(d.spec[1], d.spec[2]);  // the tile
    auto r = run_kernel(a, kernel);
    const double extra = coopmat_extra(a, c);
    CAPTURE(extra, test::max_err(r.gpu, r.cpu), rel_l2(r.gpu, r.cpu));
    CHECK(off_bound(r.gpu, r.cpu, opt_tolerance(c) + extra, f16) == 0);
    CHECK(rel_l2(r.gpu, r.cpu) <= rel_bound(f16));
    if (c.causal && c.Sq > c.Sk) {  // rows i < Sq - Sk see no key: exactly 0
        const int64_t W = c.H * c.D;
        for (int64_t i = 0; i < (c.Sq - c.Sk) * W; ++i) REQUIRE(r.gpu[(size_t)i] == 0.f);
    }
}

namespace {
// KILN_PRECISION=fast: every operand is hi alone, x rounded to 11 significant bits through its bits (2^-11 relative)
// and to f16's subnormals below 2^-14 (2^-25 absolute), each product one hi hi term:
//   |hi_x hi_y - x y| <= (2^-10 + 2^-22) |x y| + 2^-25 (1 + 2^-11) (|x| + |y|) + 2^-50.
// As for the exact variant (coopmat_extra), q enters as q scale 2^qsh with 2^qsh within sqrt 2 of 1 / scale, so a
// score moves by ds <= scale ((2^-10 + 2^-22) sum_d |q_d k_d| + 2^-24 sum_d (|q_d| + sqrt2 |k_d|)); a shift of every
// score by at most ds moves the convex combination of v by (e^(2 ds) - 1) max|v|. P enters as P 2^12 against v: each
// term P_j v_j relative 2^-10 + 2^-22, + 2^-24 for v's subnormals and Sk 2^-36 max|v| for P's.
double coopmat_fast_extra(const OptProblem& a, const OptCase& c) {
    const Tensor &q = a.in.at("q"), &k = a.in.at("k"), &v = a.in.at("v");
    const int64_t W = c.H * c.D, Wk = c.Hkv * c.D;
    const double scale = 1.0 / std::sqrt((double)c.D), rel = std::ldexp(1.0, -10) + std::ldexp(1.0, -22);
    double ds = 0, vmax = 0;
    for (int64_t i = 0; i < v.numel(); ++i) vmax = std::max(vmax, (double)std::abs(v.data<float>()[i]));
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.H; ++h)
            for (int64_t i = 0; i < c.Sq; ++i)
                for (int64_t j = 0; j < c.Sk; ++j) {
                    const float* qr = q.data<float>() + (b * c.Sq + i) * W + h * c.D;
                    const float* kr = k.data<float>() + (b * c.Sk + j) * Wk + h / (c.H / c.Hkv) * c.D;
                    double prod = 0, sum = 0;
                    for (int64_t d = 0; d < c.D; ++d) {
                        prod += std::abs((double)qr[d] * kr[d]);
                        sum += std::abs(qr[d]) + std::sqrt(2.0) * std::abs(kr[d]);
                    }
                    ds = std::max(ds, scale * (rel * prod + std::ldexp(sum, -24)));
                }
    return std::expm1(2 * ds) * vmax + rel * vmax + std::ldexp(1.0, -24) + c.Sk * std::ldexp(vmax, -36);
}
}  // namespace

TEST_CASE("the cooperative-matrix flash kernels at KILN_PRECISION=fast: one f16 per operand, within their bound",
          "[op:attention][coopmat][precision]") {
    vk::Context& ctx = test::op_ctx();
    const std::string kernel = GENERATE("coopmat", "coopmat4");
    if (!coopmat_unavailable(ctx, kernel).empty()) {
        WARN("attention_" << kernel << " not run on '" << ctx.info().name << "'");
        return;
    }
    OptCase c = GENERATE(OptCase{2, 269, 269, 2, 2, 72, 1, false, 0.f}, OptCase{1, 127, 127, 4, 1, 128, 2, false, 50.f},
                         OptCase{2, 37, 45, 2, 1, 256, 2, true, 5.f}, OptCase{1, 40, 5, 2, 2, 64, 0, true, 0.f});
    const bool f16 = GENERATE(false, true);
    CAPTURE(kernel, c.B, c.Sq, c.Sk, c.H, c.Hkv, c.D, c.mask, c.causal, c.softcap, f16);
    OptProblem a(c, 91, f16);
    test::ScopedEnv env("KILN_ATTENTION", kernel.c_str()), prec("KILN_PRECISION", "fast");
    const ir::Node& n = a.g.nodes().back();
    vk::Dispatch d = vk::lower(a.g, n);
    REQUIRE(exec::choose_attention_flash(ctx, a.g, n, d));  // test contexts read the environment live
    REQUIRE(d.shader.kernel == kernel);
    REQUIRE((d.spec.at(3) & 8u) != 0u);
    auto r = run_kernel(a, kernel);
    const double bound = opt_tolerance(c) + coopmat_fast_extra(a, c);
    CAPTURE(bound, test::max_err(r.gpu, r.cpu));
    CHECK(test::max_err(r.gpu, r.cpu) <= bound);
    // The bound is a worst case (about 100x the errors seen); that the shader took one f16 per operand shows in its
    // result differing from the exact variant's.
    test::ScopedEnv exact("KILN_PRECISION", "exact");
    CHECK(test::run_op(a.g, a.in).gpu != r.gpu);
}

TEST_CASE("the rows-per-subgroup cooperative-matrix kernel's other tiles and lane splits match the CPU reference",
          "[op:attention][coopmat]") {
    // KILN_TEST_MAX_SHARED_MEMORY: fewer or smaller subgroups per workgroup than the device's shared memory gives
    // (lavapipe 26, head_dim 64: 4 x 8 rows at 20000 bytes, 2 x 8 at 12000). KILN_TEST_ATTENTION_LANES: lanes per row
    // in the softmax, the partial max and sum combined across them (lavapipe's subgroups of 8 take one lane per row;
    // NVIDIA's 32 with 16 rows two): 2 (4 x 16 rows, 4 rows per lane), 8 (4 x 8 rows, 1 key per lane and row).
    // Bounds as the test above.
    vk::Context& ctx = test::op_ctx();
    if (const std::string why = vk::attention_coopmat4_unavailable(ctx.info()); !why.empty()) {
        WARN("attention_coopmat4 not run on '" << ctx.info().name << "': " << why);
        return;
    }
    struct Split {
        uint32_t limit, lanes;
    };
    const Split t = GENERATE(Split{20000, 0}, Split{12000, 0}, Split{0, 2}, Split{0, 8}, Split{12000, 2});
    const OptCase c{2, 37, 45, 4, 2, 64, 1, true, 30.f};
    CAPTURE(t.limit, t.lanes);
    OptProblem a(c, 92);
    test::ScopedEnv env("KILN_ATTENTION", "coopmat4"), smem("KILN_TEST_MAX_SHARED_MEMORY", std::to_string(t.limit)),
        lanes("KILN_TEST_ATTENTION_LANES", std::to_string(t.lanes));
    const ir::Node& n = a.g.nodes().back();
    vk::Dispatch d = vk::lower(a.g, n);
    REQUIRE(exec::choose_attention_flash(ctx, a.g, n, d));
    REQUIRE(d.shader.kernel == "coopmat4");
    const uint32_t smem_all = ctx.info().max_shared_memory, smem_t = t.limit ? std::min(t.limit, smem_all) : smem_all;
    const vk::Coopmat4Tile tile = vk::flash_coopmat4_tile(c.D, ctx.info(), smem_t, t.lanes);
    CAPTURE(tile.nsg, tile.rs, tile.bc);
    if (t.limit) CHECK(tile.br() < vk::flash_coopmat4_tile(c.D, ctx.info(), smem_all).br());
    CHECK((d.spec[1] == tile.br() && d.spec[2] == tile.bc && d.spec[11] == tile.rs));
    if (t.lanes) CHECK(d.spec[12] == t.lanes);
    auto r = run_kernel(a, "coopmat4");
    CHECK(test::max_err(r.gpu, r.cpu) <= opt_tolerance(c) + coopmat_extra(a, c));
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}
