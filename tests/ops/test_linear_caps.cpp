// The linear kernels' declarations against their lowerings and their shaders (runtime/vulkan/linear_kernels.h).
// 1. On every device profile Kiln knows (lavapipe 22.3, lavapipe 26 with cooperative matrices, the H200 of the
//    first GPU run (with VK_NV_cooperative_matrix2), a device with neither cooperative matrices nor texel buffers,
//    the H200 with 16 KiB of shared memory, and the present device), for every
//    linear node kind, weight dtype, K, activation storage and epilogue: a kernel's declaration admits the node
//    exactly where its lowering succeeds. The selector ranks only admitted kernels, so it can never pick one that
//    throws (the H200's "linear_coopmat: fused activation not implemented").
// 2. On the present device, every kernel it admits runs every epilogue against the CPU reference.
#include <algorithm>
#include <tuple>

#include "runtime/exec/linear_select.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/pipeline.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
// Profiles, from `kiln devices` / vulkaninfo on each (docs/gpu-runs/, ../shared/gpu-runs/2026-11-27-h200).
std::vector<vk::DeviceInfo> profiles() {
    vk::DeviceInfo lvp22;
    lvp22.name = "llvmpipe (Mesa 22.3.6, 256 bits)";
    lvp22.subgroup_size = 8, lvp22.texel_formats = true, lvp22.max_shared_memory = 32768, lvp22.fp16_arith = true;
    lvp22.coopmat_why = "no VK_KHR_cooperative_matrix";
    vk::DeviceInfo lvp26 = lvp22;
    lvp26.name = "llvmpipe (Mesa 26.1.6, 256 bits)";
    auto s8 = vk::choose_coopmat_shape({{8, 8, 8}}, 8);  // lavapipe 26 lists 8 x 8 x 8 (f16, f32 accumulators)
    REQUIRE(s8.has_value());
    lvp26.coopmat_m = s8->m, lvp26.coopmat_n = s8->n, lvp26.coopmat_k = s8->k, lvp26.coopmat_why.clear();
    vk::DeviceInfo h200;
    h200.name = "NVIDIA H200";
    h200.subgroup_size = 32, h200.texel_formats = true, h200.max_shared_memory = 49152, h200.fp16_arith = true;
    // NVIDIA 580 lists f16 x f16 + f32 at 16x16x16, 16x8x16 and 16x8x8 (among others for other types).
    auto s16 = vk::choose_coopmat_shape({{16, 8, 16}, {16, 8, 8}, {16, 16, 16}}, 32);
    REQUIRE(s16.has_value());
    h200.coopmat_m = s16->m, h200.coopmat_n = s16->n, h200.coopmat_k = s16->k;
    // VK_NV_cooperative_matrix2: lavapipe 26.1 lists the extension with subgroup-scope flexible dimensions only (no
    // workgroup scope, no tensor addressing), so it has no coopmat2. The H200's vulkaninfo (1.4.309) printed the
    // extension but none of its features or flexible dimensions: this profile assumes all features and
    // 16-granular workgroup-scope f16 entries of 256 invocations (test_linear_cm2.cpp's).
    lvp26.cm2_why =
        "VK_NV_cooperative_matrix2 without cooperativeMatrixWorkgroupScope, cooperativeMatrixTensorAddressing";
    auto t2 = vk::choose_cm2_tile({{16, 16, 16, 256}}, 65535, 1024);
    REQUIRE(t2.has_value());
    h200.cm2_bm = t2->bm, h200.cm2_bn = t2->bn, h200.cm2_bk = t2->bk, h200.cm2_invocations = t2->invocations;
    vk::DeviceInfo bare;  // no cooperative matrices, no texel formats, 64-wide subgroups
    bare.name = "bare";
    bare.subgroup_size = 64, bare.max_shared_memory = 32768, bare.coopmat_why = "no VK_KHR_cooperative_matrix";
    vk::DeviceInfo small = h200;  // the H200's features with 16 KiB of shared memory: the 128 tiles do not fit
    small.name = "H200 at 16 KiB", small.max_shared_memory = 16384;
    return {lvp22, lvp26, h200, bare, small, test::op_ctx().info()};
}

struct NodeCase {
    DType w;
    int64_t K;
    ir::Act act;
    bool x16, y16;
    bool gated = false;
};

// One linear of case c: x [M, K] (stored f16 where x16: as the output of a relu, planned activation storage), y
// stored f16 where y16; gated: with a gated residual (res + gate * h, fused into it by ir::fuse).
ir::Graph linear_graph(const NodeCase& c, int64_t M = 70, int64_t N = 130) {
    ir::Graph g;
    auto x = g.relu(g.input("x", {M, c.K}));
    auto y = g.linear(x, g.weight("w", {N, c.K}, c.w), g.weight("b", {N}), c.act);
    if (c.gated) y = g.add(g.mul(g.input("gate", {N}), y), g.input("res", {M, N}));
    g.output(g.relu(y), "y");
    if (c.x16) g.set_storage(x, DType::f16);  // after the graph is built: ops other than linear read f32
    if (c.gated) {
        ir::FuseStats st;
        g = ir::fuse(g, &st);
        REQUIRE(st.linear_gated == 1);
    }
    if (c.y16) g.set_storage(y, DType::f16);
    return g;
}

const ir::Node& linear_node(const ir::Graph& g) {
    for (const ir::Node& n : g.nodes())
        if (n.op == ir::Op::linear) return n;
    FAIL("no linear");
    return g.nodes().front();
}
}  // namespace

TEST_CASE("every linear kernel's declaration agrees with its lowering on every device profile", "[op:linear][caps]") {
    int admitted = 0, refused = 0, cm2_admitted = 0;
    for (const vk::DeviceInfo& dev : profiles())
        for (DType w : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_k})
            for (int64_t K : {dtype_is_quant(w) ? 3 * dtype_block(w) : 68, int64_t{30}, int64_t{72}}) {
                if (dtype_is_quant(w) && K % dtype_block(w) != 0) continue;  // not a quantized weight
                for (ir::Act act : {ir::Act::none, ir::Act::gelu, ir::Act::gelu_tanh, ir::Act::silu})
                    for (bool x16 : {false, true})
                        for (int y16_gated = 0; y16_gated < 4; ++y16_gated) {
                            const bool y16 = y16_gated & 1, gated = y16_gated & 2;
                            const ir::Graph g = linear_graph({w, K, act, x16, y16, gated});
                            const ir::Node& n = linear_node(g);
                            REQUIRE(ir::linear_gated(n) == gated);
                            for (const vk::LinearKernel& k : vk::linear_kernels()) {
                                CAPTURE(dev.name, k.name, dtype_name(w), K, (int)act, x16, y16, gated);
                                const std::string why = vk::linear_kernel_unsupported(k, dev, g, n);
                                std::string lowered;
                                try {
                                    vk::Dispatch d = k.lower(dev, g, n);
                                    CHECK(vk::has_shader(d.shader.name()));
                                    CHECK(d.shader.gated == gated);
                                } catch (const Error& e) {
                                    lowered = e.what();
                                }
                                INFO("declared: '" << why << "', lowering: '" << lowered << "'");
                                CHECK(why.empty() == lowered.empty());
                                (why.empty() ? admitted : refused)++;
                                cm2_admitted += k.name == "coopmat2" && why.empty();
                                if (k.name == "reg") CHECK(why.empty());  // the fallback runs everything
                            }
                        }
            }
    CHECK(admitted > 0);
    CHECK(refused > 0);
    // The H200 profile admits coopmat2 (f16 W, x stored f16, K 72) wherever this build has its shader.
    CHECK((cm2_admitted > 0) == vk::has_shader("linear_cm2_f16"));
}

TEST_CASE("cooperative-matrix shapes: 16x16x16 where listed, else one the shader's staging fits", "[op:linear][caps]") {
    auto s = vk::choose_coopmat_shape({{16, 8, 16}, {16, 16, 16}}, 32);
    REQUIRE(s.has_value());
    CHECK((s->m == 16 && s->n == 16 && s->k == 16));
    s = vk::choose_coopmat_shape({{8, 8, 8}}, 8);
    REQUIRE(s.has_value());
    CHECK((s->m == 8 && s->k == 8));
    CHECK(!vk::choose_coopmat_shape({{8, 8, 8}}, 128).has_value());    // 8 x 8 rows cannot feed 512 lanes evenly
    CHECK(!vk::choose_coopmat_shape({{32, 32, 16}}, 32).has_value());  // M, N in {8, 16} (shared memory)
    CHECK(!vk::choose_coopmat_shape({{16, 16, 12}}, 32).has_value());  // K must divide the 32-value slice
    CHECK(!vk::choose_coopmat_shape({}, 32).has_value());
}

// The tiled GEMM's configuration (linear_kernels.h, gemm_config) and its shared memory on the profiles, by hand:
// nbuf (2 BM + parts BN) (BK + 8) 2 bytes of f16 slices (x hi, x lo, W; W lo too for ggml blocks: parts 2), one f32
// M x N accumulator per subgroup (the cooperative form's stage), 4 bytes per slice maximum (3 slots; 6 where W is
// scaled: not f16).
TEST_CASE("the tiled GEMM's tiles, slices and shared memory on each profile", "[op:linear][caps]") {
    const std::vector<vk::DeviceInfo> p = profiles();  // lvp22, lvp26, h200, bare, small, present
    struct Want {
        size_t profile;
        const char* kernel;
        DType w;
        uint32_t m, bk, nbuf, tile, invocations, bytes;
    };
    const Want wants[] = {
        // H200, 48 KiB, 16 x 16 x 16, subgroups of 32. 64 tile: 2 (128 + 64) 40 2 + 4 1024 + 12.
        {2, "coopmat", DType::f16, 16, 32, 2, 64, 128, 34828},
        {2, "coopmat", DType::q4_k, 16, 32, 2, 64, 128, 45080},  // 2 (128 + 128) 80 + 4096 + 24
        // 128 tile: BK 32 double-buffered would be 2 (256 + 128) 80 + 8 1024 + 12 = 69644; BK 16: 2 (384) 48 + ...
        {2, "coopmat128", DType::f16, 16, 16, 2, 128, 256, 45068},
        {2, "coopmat128", DType::bf16, 16, 16, 2, 128, 256, 45080},
        // ggml: BK 16 double 57368, BK 32 single 512 80 + 8192 + 24 = 49176 (24 bytes over), BK 16 single:
        {2, "coopmat128", DType::q4_k, 16, 16, 1, 128, 256, 32792},
        // lavapipe 22.3, 32 KiB, scalar (no stage: each invocation stores its own elements), 16 x 16 x 16 ("subgroups"
        // of 32). 64 tile: 2 (128 + 64) 80 + 12.
        {0, "gemm", DType::f16, 16, 32, 2, 64, 128, 30732},
        {0, "gemm", DType::q4_k, 16, 16, 2, 64, 128, 24600},  // BK 32: 2 (256) 80 + 24 = 40984; BK 16: 2 (256) 48 + 24
        // 128 tile: BK 32 double 2 (384) 80 + 12 = 61452, BK 16 double 36876, BK 32 single:
        {0, "gemm128", DType::f16, 16, 32, 1, 128, 256, 30732},
        {0, "gemm128", DType::q4_k, 16, 16, 1, 128, 256, 24600},  // 512 48 + 24 (BK 32 single: 40984)
        // lavapipe 26: 8 x 8 x 8 cooperative matrices, subgroups of 8: as the scalar form.
        {1, "coopmat", DType::f16, 8, 32, 2, 32, 32, 16396},
        {1, "coopmat128", DType::f16, 8, 16, 2, 64, 64, 20492},
        // 16 KiB: the 64 tile in 16-value slices, one buffer: 192 48 + 4096 + 12 (BK 16 double-buffered, 22540, and
        // BK 32 single, 19468, do not fit).
        {4, "coopmat", DType::f16, 16, 16, 1, 64, 128, 13324},
    };
    for (const Want& w : wants) {
        CAPTURE(p[w.profile].name, w.kernel, dtype_name(w.w));
        const vk::LinearKernel& k = *vk::find_linear_kernel(w.kernel);
        const auto c = vk::gemm_config(k, p[w.profile], w.w);
        REQUIRE(c.has_value());
        CHECK((c->shape.m == w.m && c->bk == w.bk && c->nbuf == w.nbuf));
        CHECK((c->bm() == w.tile && c->bn() == w.tile && c->invocations == w.invocations));
        CHECK(vk::gemm_shared_bytes(*c, w.w) == w.bytes);
    }
    // Where no configuration fits, the kernel is not admitted: the 128 tile needs 26636 bytes at its smallest
    // (16 x 16, BK 16, one buffer) on the H200 at 16 KiB; no cooperative matrices, no coopmat.
    CHECK(!vk::gemm_config(*vk::find_linear_kernel("coopmat128"), p[4], DType::f16));
    CHECK(!vk::linear_kernel_unavailable(*vk::find_linear_kernel("coopmat128"), p[4], DType::f16).empty());
    CHECK(!vk::gemm_config(*vk::find_linear_kernel("coopmat128"), p[3], DType::f16));
    for (const vk::DeviceInfo& d : p)
        for (const vk::LinearKernel& k : vk::linear_kernels())
            for (DType w : {DType::f16, DType::bf16, DType::q8_0, DType::q4_k})
                if (k.caps.wm) {  // a tiled GEMM (its shader is in this build: the coopmat one may not be)
                    const auto c = vk::gemm_config(k, d, w);
                    if (c) CHECK(vk::gemm_shared_bytes(*c, w) <= d.max_shared_memory);
                    if (k.caps.needs == vk::LinearCaps::Needs::gemm_tile || vk::has_shader("linear_coopmat_f16"))
                        CHECK(c.has_value() == vk::linear_kernel_unavailable(k, d, w).empty());
                }
}

// Every kernel the present device admits, every epilogue, against the CPU. Tolerance (test_linear.cpp's): f32
// accumulation in another order than the f64 reference, |err| <= K 2^-24 sum|x w| with E|x w| = 1/4 -> max-abs
// 2 K^2 2^-24 / 4 (x2 margin), relative L2 1e-5; the tiled GEMM (coopmat, gemm, their 128 tiles): + splits 2 K / 4
// 2^-22 (x, and ggml W, split into two f16 parts; splits 3 for ggml W; test_linear_smem.cpp's check_gemm). The
// activations are 1-Lipschitz up to 1.13 (GELU's slope), so the bound carries through them with that factor.
TEST_CASE("every admitted linear kernel runs every epilogue on this device", "[op:linear][caps][every-kernel]") {
    vk::Context& ctx = test::op_ctx();
    const std::string kernel = GENERATE(from_range(exec::linear_variants()));
    const DType w = GENERATE(DType::f32, DType::f16, DType::bf16, DType::q4_k);
    const ir::Act act = GENERATE(ir::Act::none, ir::Act::gelu, ir::Act::gelu_tanh, ir::Act::silu);
    const vk::LinearKernel& kk = *vk::find_linear_kernel(kernel);
    // coopmat2 takes K % 8 == 0 and x stored f16 only: K 72, x f16 (values exact in f16, so the CPU reads them too).
    const int64_t K = dtype_is_quant(w) ? 3 * dtype_block(w) : 68 % kk.caps.k_multiple ? 72 : 68, M = 77, N = 130;
    CAPTURE(kernel, dtype_name(w), (int)act);
    // The 128 tiles run the 64 tiles' epilogue text (linear_io.glsl): two activations per weight dtype, all four
    // over f16, bf16 and q4_k (f32 W is not theirs), as each pipeline costs lavapipe up to a minute to compile.
    if (kernel.find("128") != std::string::npos) {
        const DType ws[] = {DType::f32, DType::f16, DType::bf16, DType::q4_k};
        const ir::Act as[] = {ir::Act::none, ir::Act::gelu, ir::Act::gelu_tanh, ir::Act::silu};
        const size_t i = (size_t)(std::find(std::begin(ws), std::end(ws), w) - std::begin(ws));
        const size_t a = (size_t)(std::find(std::begin(as), std::end(as), act) - std::begin(as));
        if ((i + a) % 2 == 0) return;
        // The scalar twin's 128 tile compiles slowest of all on lavapipe (up to 100 s a pipeline): f16 only.
        if (kernel == "gemm128" && w != DType::f16) return;
    }
    // The split-K kernels: their partial pass is the tiled GEMM's (its weight loads tested above through gemm and
    // coopmat), their reduce applies the epilogue whatever W was: f16 W, every activation (two pipelines each).
    if (kernel.find("_sk") != std::string::npos && w != DType::f16) return;
    if (!exec::linear_variant_available(ctx, kernel, w)) {
        SUCCEED(
            "not on this device: " << vk::linear_kernel_unavailable(*vk::find_linear_kernel(kernel), ctx.info(), w));
        return;
    }
    ir::Graph g;
    auto xin = g.input("x", {M, K});
    if (!kk.caps.f32_x) g.set_storage(xin, DType::f16);
    g.output(g.linear(xin, g.weight("w", {N, K}, w), g.weight("b", {N}), act), "y");
    REQUIRE(exec::linear_unsupported(ctx, kernel, g, linear_node(g)).empty());
    exec::set_linear_override(kernel);
    struct Clear {
        ~Clear() { exec::set_linear_override(""); }
    } clear;
    Tensor x = test::random_tensor({M, K}, 70);
    if (!kk.caps.f32_x) x = x.astype(DType::f16).astype(DType::f32);
    auto r =
        test::run_op(g, {{"x", x}}, {{"w", test::random_weight({N, K}, w, 71)}, {"b", test::random_tensor({N}, 72)}});
    double bound = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    bound += vk::linear_splits(*vk::find_linear_kernel(kernel), w) * 2.0 * K / 4 * std::ldexp(1.0, -22);
    CHECK(test::max_err(r.gpu, r.cpu) <= 1.13 * bound);
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}

// The grouped workgroup order (tile_xy, shaders/common.glsl): each kernel's grid is walked in bands of
// tile_group row tiles (8 here: small panels), the last band partial; every output tile must be computed once. M = 1413
// rows give every kernel more than one band (16-row tiles: 89 row tiles, 11 bands and one of 1 row; 64: 23, the last
// band 7; 128: 12, the last band 4) and N = 130 columns 2 to 9 column tiles, so a tile taken twice or skipped leaves a
// band of wrong or unwritten rows. f16 W and no activation: the pipelines of the epilogue case above. Tolerance: that
// case's.
TEST_CASE("every admitted linear kernel computes every tile of a grid of several bands", "[op:linear][caps]") {
    vk::Context& ctx = test::op_ctx();
    const std::string kernel = GENERATE(from_range(exec::linear_variants()));
    const vk::LinearKernel& kk = *vk::find_linear_kernel(kernel);
    const int64_t K = 68 % kk.caps.k_multiple ? 72 : 68, M = 1413, N = 130;
    CAPTURE(kernel);
    if (!exec::linear_variant_available(ctx, kernel, DType::f16)) {
        SUCCEED("not on this device: " << vk::linear_kernel_unavailable(kk, ctx.info(), DType::f16));
        return;
    }
    ir::Graph g;
    auto xin = g.input("x", {M, K});
    if (!kk.caps.f32_x) g.set_storage(xin, DType::f16);
    g.output(g.linear(xin, g.weight("w", {N, K}, DType::f16), g.weight("b", {N})), "y");
    const std::string why = exec::linear_unsupported(ctx, kernel, g, linear_node(g));
    if (!why.empty()) {  // gemv: a few rows only
        SUCCEED(kernel << " does not take " << M << " rows: " << why);
        return;
    }
    const vk::Dispatch d = kk.lower(ctx.info(), g, linear_node(g));
    REQUIRE(d.tile_group == vk::kTileGroupMax);
    CHECK(d.groups[1] > d.tile_group);
    CHECK(d.groups[1] % d.tile_group != 0);
    test::ForceLinear force(kernel);
    Tensor x = test::random_tensor({M, K}, 73);
    if (!kk.caps.f32_x) x = x.astype(DType::f16).astype(DType::f32);
    auto r = test::run_op(g, {{"x", x}},
                          {{"w", test::random_weight({N, K}, DType::f16, 74)}, {"b", test::random_tensor({N}, 75)}});
    double bound = std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24));
    bound += vk::linear_splits(kk, DType::f16) * 2.0 * K / 4 * std::ldexp(1.0, -22);
    CHECK(test::max_err(r.gpu, r.cpu) <= bound);
    CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);
}
