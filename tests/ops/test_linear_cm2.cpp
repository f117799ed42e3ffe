// The "coopmat2" linear (shaders/linear_cm2.comp, VK_NV_cooperative_matrix2): its tile choice, declaration and
// lowering on device profiles; on the present device, forced against the CPU where the device has its features, and
// refused with the reason where it has not (lavapipe 22.3: no extension; lavapipe 26.1: the extension without
// workgroup scope and tensor addressing). W f16, x stored f16: the f16 x f16 products are exact in f32 and summed in
// f32, so the bound is test_linear.cpp's f32 one (no split term): max-abs 2 K^2 2^-24 / 4 (|x|, |W| <= 1, E|x W| =
// 1/4, x2 margin), relative L2 1e-5; x1.13 through an activation's slope; + 1e-5 for the gated residual's two f32
// roundings of values below 32; f16 y: + 2^-11 (|y| + bound) (one rounding of the device's f32 value, then a relu,
// 1-Lipschitz), relative L2 1e-3 (2^-11 = 4.9e-4 per element at most).
#include <tuple>

#include "runtime/exec/linear_select.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/pipeline.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
const vk::LinearKernel& cm2() { return *vk::find_linear_kernel("coopmat2"); }

// The H200 as a coopmat2 device: NVIDIA's flexible dimensions are not in the run's vulkaninfo (1.4.309 prints none
// of VK_NV_cooperative_matrix2's structures), so this profile takes 16-granular workgroup-scope entries of 128 and
// 256 invocations (what NVIDIA's driver is reported to list; the next device run's `kiln devices` shows the truth).
vk::DeviceInfo h200_cm2() {
    vk::DeviceInfo d;
    d.name = "NVIDIA H200 (assumed cm2 properties)";
    d.subgroup_size = 32, d.max_shared_memory = 49152, d.fp16_arith = true;
    d.coopmat_m = d.coopmat_n = d.coopmat_k = 16;
    const auto t = vk::choose_cm2_tile({{16, 16, 16, 128}, {16, 16, 16, 256}}, 65535, 1024);
    REQUIRE(t.has_value());
    d.cm2_bm = t->bm, d.cm2_bn = t->bn, d.cm2_bk = t->bk, d.cm2_invocations = t->invocations;
    return d;
}

// y = act(x W^T + b) (or gated: res + gate * act(...), fused), x [M, K] stored f16 from the graph input on, W f16.
// y16: that y stored f16 (as ir::store_f16 stores a value only linears read) and read by a second linear, y2 = y
// W2^T (W2 [70, N] f16, no bias), the graph's output.
ir::Graph cm2_graph(int64_t M, int64_t N, int64_t K, ir::Act act, bool bias, bool gated, bool y16) {
    ir::Graph g;
    auto x = g.input("x", {M, K});
    g.set_storage(x, DType::f16);
    auto y = g.linear(x, g.weight("w", {N, K}, DType::f16), bias ? g.weight("b", {N}) : ir::Val{}, act);
    if (gated) y = g.add(g.mul(g.input("gate", {N}), y), g.input("res", {M, N}));
    g.output(y16 ? g.linear(y, g.weight("w2", {70, N}, DType::f16), {}) : y, "y");
    if (gated) {
        ir::FuseStats st;
        g = ir::fuse(g, &st);
        REQUIRE(st.linear_gated == 1);
    }
    if (y16) g.set_storage(y, DType::f16);
    return g;
}

const ir::Node& the_linear(const ir::Graph& g) {
    for (const ir::Node& n : g.nodes())
        if (n.op == ir::Op::linear) return n;
    FAIL("no linear");
    return g.nodes().front();
}

// Values exact in f16 (multiples of 2^-10 in [-1, 1]): the CPU and the device read the same x.
Tensor f16_exact(const Shape& s, unsigned seed) {
    return test::random_tensor(s, seed).astype(DType::f16).astype(DType::f32);
}
}  // namespace

TEST_CASE("coopmat2: its tile from the flexible dimensions, its declaration and lowering", "[op:linear][coopmat2]") {
    // Tile: 128 x 128 x 32 rounded up to the granularities, the entry with the most invocations up to 256.
    auto t = vk::choose_cm2_tile({{16, 16, 16, 128}, {16, 16, 16, 256}, {16, 16, 16, 512}}, 65535, 1024);
    REQUIRE(t.has_value());
    CHECK((t->bm == 128 && t->bn == 128 && t->bk == 32 && t->invocations == 256));
    t = vk::choose_cm2_tile({{48, 8, 24, 128}}, 1024, 0);
    REQUIRE(t.has_value());
    CHECK((t->bm == 144 && t->bn == 128 && t->bk == 48 && t->invocations == 128));
    CHECK(!vk::choose_cm2_tile({}, 1024, 256));                    // lavapipe 26.1: subgroup scope only
    CHECK(!vk::choose_cm2_tile({{16, 16, 16, 256}}, 1024, 128));   // more invocations than the scope allows
    CHECK(!vk::choose_cm2_tile({{256, 16, 16, 128}}, 128, 0));     // past the maximum dimension
    CHECK(!vk::choose_cm2_tile({{16, 16, 16, 512}}, 1024, 1024));  // over 256 invocations (register budget)

    const vk::DeviceInfo h200 = h200_cm2();
    vk::DeviceInfo lvp26 = h200;  // lavapipe 26.1's answer (VkPhysicalDeviceCooperativeMatrix2FeaturesNV)
    lvp26.name = "llvmpipe (Mesa 26.1.6)", lvp26.coopmat_m = lvp26.coopmat_n = lvp26.coopmat_k = 8;
    lvp26.cm2_bm = lvp26.cm2_bn = lvp26.cm2_bk = lvp26.cm2_invocations = 0;
    lvp26.cm2_why =
        "VK_NV_cooperative_matrix2 without cooperativeMatrixWorkgroupScope, cooperativeMatrixTensorAddressing";
    const ir::Graph g = cm2_graph(200, 300, 72, ir::Act::gelu, true, false, true);
    const ir::Node& n = the_linear(g);
    CHECK(vk::linear_kernel_unavailable(cm2(), lvp26, DType::f16).find("without cooperativeMatrixWorkgroupScope") !=
          std::string::npos);
    CHECK_THROWS_WITH(cm2().lower(lvp26, g, n), Catch::Contains("VK_NV_cooperative_matrix2"));
    // Not f16 W, K % 8, x stored f32: refused by the declaration (below, where this build has the shader) and the
    // lowering alike.
    CHECK(vk::linear_kernel_unavailable(cm2(), h200, DType::bf16) == "bf16 weights");
    ir::Graph g32;
    g32.output(g32.linear(g32.input("x", {70, 72}), g32.weight("w", {130, 72}, DType::f16), {}), "y");
    CHECK_THROWS_WITH(cm2().lower(h200, g32, the_linear(g32)), Catch::Contains("x stored f32"));
    const ir::Graph g68 = cm2_graph(70, 130, 68, ir::Act::none, false, false, false);
    CHECK_THROWS_WITH(cm2().lower(h200, g68, the_linear(g68)), Catch::Contains("multiple of 8"));
    if (!vk::has_shader("linear_cm2_f16")) {
        WARN("this build has no linear_cm2 (glslang without GL_NV_cooperative_matrix2)");
        CHECK(vk::linear_kernel_unavailable(cm2(), h200, DType::f16).find("this Kiln build") != std::string::npos);
        return;
    }
    for (const char* s : {"linear_cm2_f16", "linear_cm2_f16_gated", "linear_cm2_f16_ptr", "linear_cm2_f16_off",
                          "linear_cm2_f16_gated_ptr", "linear_cm2_f16_gated_off"})
        CHECK(vk::has_shader(s));
    CHECK(vk::linear_kernel_unsupported(cm2(), h200, g32, the_linear(g32)).find("x stored f32") != std::string::npos);
    CHECK(vk::linear_kernel_unsupported(cm2(), h200, g68, the_linear(g68)) == "K % 8 != 0");
    CHECK(vk::linear_kernel_unsupported(cm2(), h200, g, n).empty());
    const vk::Dispatch d = cm2().lower(h200, g, n);
    CHECK(d.shader.name() == "linear_cm2_f16");
    CHECK((d.groups[0] == 3 && d.groups[1] == 2 && d.groups[2] == 1));  // 300 / 128, 200 / 128 rounded up
    REQUIRE(d.spec.size() == 7);
    CHECK((d.spec[0] == 128 && d.spec[1] == 128 && d.spec[3] == 32 && d.spec[6] == 256));
    CHECK((d.spec[2] == (uint32_t)ir::Act::gelu && d.spec[4] == 1 && d.spec[5] == 1));  // ACT, XF16, YF16
    CHECK(vk::linear_splits(cm2(), DType::f16) == 0);
}

// The forced kernel on this device: partial tiles in M, N and K (K = 72: two 32-value slices and a quarter; 1160:
// 36 slices and a quarter), each epilogue once (bias, each activation, the gated residual) and f16 y (read by a
// second linear, coopmat2 too). Where the device lacks its features (both lavapipes), forcing it is an error that
// says why. Either way the same graph runs on reg (x stored f16 from a graph input, as the table's probe builds it)
// against the CPU. f16 y: the CPU rounds its h to f16 where the device rounds its own; |f16(a) - f16(b)| <= |a - b| +
// 2^-11 (|a| + |b|), so per output j of the second linear |err| <= sum_k |W2_jk| (b1 + 2^-10 (|h_k| + b1)) + its
// f32 sum's 2 N 2^-24 sum_k |W2_jk h_k| (b1: the first linear's bound; h from the CPU).
TEST_CASE("coopmat2 matches the CPU reference where the device has it, else forcing it is refused",
          "[op:linear][coopmat2]") {
    vk::Context& ctx = test::op_ctx();
    const bool here = exec::linear_variant_available(ctx, "coopmat2", DType::f16);
    struct Case {
        int64_t M, N, K;
        ir::Act act;
        bool bias, gated, y16;
    };
    const Case cases[] = {{77, 130, 72, ir::Act::none, true, false, false},
                          {150, 200, 1160, ir::Act::gelu, true, false, true},
                          {1, 300, 72, ir::Act::gelu_tanh, false, false, false},
                          {129, 67, 40, ir::Act::silu, true, true, false}};
    for (const Case& c : cases) {
        CAPTURE(c.M, c.N, c.K, (int)c.act, c.bias, c.gated, c.y16);
        const ir::Graph g = cm2_graph(c.M, c.N, c.K, c.act, c.bias, c.gated, c.y16);
        std::map<std::string, Tensor> in{{"x", f16_exact({c.M, c.K}, 90)}};
        if (c.gated) in["gate"] = test::random_tensor({c.N}, 91), in["res"] = test::random_tensor({c.M, c.N}, 92);
        std::map<std::string, Tensor> ws{{"w", test::random_weight({c.N, c.K}, DType::f16, 93)}};
        if (c.bias) ws["b"] = test::random_tensor({c.N}, 94);
        if (c.y16) ws["w2"] = test::random_weight({70, c.N}, DType::f16, 95);
        double bound = std::max(1e-6, 2.0 * c.K * c.K / 4 * std::ldexp(1.0, -24));
        if (c.act != ir::Act::none) bound *= 1.13;
        if (c.gated) bound += 1e-5;
        const std::string kernel = here ? "coopmat2" : "reg";
        if (!here) {
            const std::string why = vk::linear_kernel_unavailable(cm2(), ctx.info(), DType::f16);
            INFO("why: " << why);
            CHECK(why.find("VK_NV_cooperative_matrix2") != std::string::npos);
            test::ForceLinear force("coopmat2");
            vk::Dispatch d = vk::lower(g, the_linear(g));
            CHECK_THROWS_WITH(exec::choose_linear(ctx, g, the_linear(g), d),
                              Catch::Contains("KILN_LINEAR=coopmat2") && Catch::Contains(why));
        }
        test::ForceLinear force(kernel);
        const uint64_t before = exec::linear_kernel_dispatches("coopmat2");
        auto r = test::run_op(g, in, ws);
        if (here) CHECK(exec::linear_kernel_dispatches("coopmat2") == before + (c.y16 ? 2 : 1));  // the forced kernel
        std::vector<double> bounds(r.gpu.size(), bound);
        if (c.y16) {
            const ir::Graph g1 = cm2_graph(c.M, c.N, c.K, c.act, c.bias, false, false);
            const auto h = cpu::run(g1, in, [&](const ir::Value& v) { return ws.at(v.name); }).at("y").to_f32();
            const auto w2 = ws.at("w2").to_f32();
            for (int64_t m = 0; m < c.M; ++m)
                for (int64_t j = 0; j < 70; ++j) {
                    double e = 0, s = 0;
                    for (int64_t k = 0; k < c.N; ++k) {
                        const double a = std::abs(w2[(size_t)(j * c.N + k)]), hk = std::abs(h[(size_t)(m * c.N + k)]);
                        e += a * (bound + std::ldexp(hk + bound, -10)), s += a * hk;
                    }
                    bounds[(size_t)(m * 70 + j)] = e + 2.0 * c.N * std::ldexp(s, -24);
                }
        }
        int over = 0;
        for (size_t i = 0; i < r.gpu.size(); ++i) over += std::abs((double)r.gpu[i] - r.cpu[i]) > bounds[i];
        CHECK(over == 0);
        CHECK(rel_l2(r.gpu, r.cpu) <= (c.y16 ? 1e-3 : 1e-5));
        if (!here) CHECK(exec::linear_kernel_dispatches("coopmat2") == before);
    }
}
