// linear with x and W read through uniform texel buffers (linear_tex.comp, the "tex" variant of linear_select.h),
// forced, against the register path it shares its tile and K loop with: bitwise equal (f16 and bf16 texels convert
// to f32 exactly, as the storage-buffer loads do; ggml blocks are read as the same 16-bit words), for f32/f16/bf16
// and every quantized format, partial tiles, bias, a fused activation, f16 activation storage and row chunks. Plus the
// CPU reference at the bound of test_linear_smem.cpp.
#include <cstring>
#include <tuple>

#include "runtime/exec/linear_select.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {

test::VkRun run_as(const std::string& variant, const ir::Graph& g, const std::map<std::string, Tensor>& in,
                   const std::map<std::string, Tensor>& w, exec::Mode mode = exec::Mode::full) {
    test::ForceLinear force(variant);
    return test::run_vk(g, in, w, mode, "1");
}
}  // namespace

TEST_CASE("linear through texel buffers equals the register path bitwise", "[op:linear][tex]") {
    if (!test::op_ctx().info().texel_formats) {
        WARN("skipped: no RGBA32F/RGBA16F/RGBA16_UINT uniform texel buffers on this device");
        return;
    }
    auto [M, N, K] = GENERATE(std::make_tuple(1, 1, 4), std::make_tuple(3, 13, 12), std::make_tuple(77, 130, 68),
                              std::make_tuple(65, 129, 128), std::make_tuple(200, 257, 36));
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    bool bias = GENERATE(false, true);
    bool gelu = GENERATE(false, true);  // fused into the linear's store (ir::fuse)
    CAPTURE(M, N, K, dtype_name(wt), bias, gelu);
    ir::Graph g;
    auto x = g.input("x", {M, K});
    ir::Val y = g.linear(x, g.weight("w", {N, K}, wt), bias ? g.weight("b", {N}) : ir::Val{});
    g.output(gelu ? g.gelu(y, true) : y, "y");
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, K}, 50)}};
    std::map<std::string, Tensor> w{{"w", test::random_weight({N, K}, wt, 51)}};
    if (bias) w["b"] = test::random_tensor({N}, 52);
    const auto reg = run_as("reg", g, in, w), tex = run_as("tex", g, in, w);
    CHECK(reg.c.texel_dispatches == 0);
    CHECK(tex.c.texel_dispatches == 1);
    CHECK(tex.out.at("y").bytes == reg.out.at("y").bytes);
    if (!gelu) {
        auto wcpu = [&](const ir::Value& v) { return w.at(v.name); };
        const auto cpu = cpu::run(g, in, wcpu).at("y").to_f32(), gpu = tex.out.at("y").to_f32();
        CHECK(test::max_err(gpu, cpu) <= std::max(1e-6, 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
        CHECK(rel_l2(gpu, cpu) <= 1e-5);
    }
}

TEST_CASE("linear through texel buffers reads and writes f16 activations as the register path", "[op:linear][tex]") {
    if (!test::op_ctx().info().texel_formats) {
        WARN("skipped: no RGBA32F/RGBA16F/RGBA16_UINT uniform texel buffers on this device");
        return;
    }
    const DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    CAPTURE(dtype_name(wt));
    const int64_t M = 37, D = 48, H = 192;
    ir::Graph g;
    auto x = g.input("x", {M, D});
    auto h = g.linear(x, g.weight("w1", {H, D}, wt), g.weight("b1", {H}));
    g.output(g.linear(h, g.weight("w2", {D, H}, wt), g.weight("b2", {D})), "y");
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, D}, 60, -2.f, 2.f)}};
    std::map<std::string, Tensor> w{{"w1", test::random_weight({H, D}, wt, 61)},
                                    {"b1", test::random_tensor({H}, 62)},
                                    {"w2", test::random_weight({D, H}, wt, 63)},
                                    {"b2", test::random_tensor({D}, 64)}};
    ::setenv("KILN_ACT_F16", "1", 1);  // the hidden is stored as f16: written by the first, read by the second
    const auto reg = run_as("reg", g, in, w), tex = run_as("tex", g, in, w);
    // Over the binding limit the f16 hidden is split into row chunks: each chunk gets a texel view of its own.
    ::setenv("KILN_MAX_BINDING_RANGE", "4096", 1);
    const auto reg_split = run_as("reg", g, in, w), tex_split = run_as("tex", g, in, w);
    ::unsetenv("KILN_MAX_BINDING_RANGE");
    ::unsetenv("KILN_ACT_F16");
    CHECK(reg.c.f16_activations == 1);
    CHECK(tex.c.f16_activations == 1);
    CHECK(tex.c.texel_dispatches == 2);
    CHECK(tex.out.at("y").bytes == reg.out.at("y").bytes);
    CHECK(tex_split.c.split_ops > 0);
    CHECK(tex_split.c.texel_dispatches > 2);
    CHECK(tex_split.out.at("y").bytes == reg_split.out.at("y").bytes);
    CHECK(tex_split.out.at("y").bytes == tex.out.at("y").bytes);
}

TEST_CASE("linear through texel buffers leaves what it cannot read to the register path", "[op:linear][tex]") {
    ir::Graph g;
    auto x = g.input("x", {70, 13});
    g.output(g.linear(x, g.weight("w", {9, 13}), {}), "y");
    const ir::Node& n = g.nodes()[(size_t)g.value(g.outputs().begin()->second).producer];
    CHECK(exec::linear_unsupported(test::op_ctx(), "tex", g, n) == "K % 4 != 0");
    std::map<std::string, Tensor> w{{"w", test::random_weight({9, 13}, DType::f32, 71)}};
    const auto tex = run_as("tex", g, {{"x", test::random_tensor({70, 13}, 70)}}, w);
    CHECK(tex.c.texel_dispatches == 0);
}

TEST_CASE("linear through texel buffers dequantizes ggml blocks as the register path", "[op:linear][tex][quant]") {
    if (!test::op_ctx().info().texel_formats) {
        WARN("skipped: no uniform texel buffers of the needed formats on this device");
        return;
    }
    DType wt = GENERATE(DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k,
                        DType::q4_k, DType::q5_k, DType::q6_k);
    const int64_t B = dtype_block(wt);
    auto [M, N, K] =
        GENERATE_COPY(std::make_tuple(5, 13, 2 * B), std::make_tuple(70, 127, 3 * B), std::make_tuple(130, 65, B));
    CAPTURE(M, N, K, dtype_name(wt));
    ir::Graph g;
    g.output(g.linear(g.input("x", {M, K}), g.weight("w", {N, K}, wt), g.weight("b", {N})), "y");
    std::map<std::string, Tensor> in{{"x", test::random_tensor({M, K}, 90)}};
    std::map<std::string, Tensor> w{{"w", test::random_weight({N, K}, wt, 91)}, {"b", test::random_tensor({N}, 92)}};
    const auto reg = run_as("reg", g, in, w), tex = run_as("tex", g, in, w);
    CHECK(tex.c.texel_dispatches == 1);
    CHECK(tex.out.at("y").bytes == reg.out.at("y").bytes);
}

TEST_CASE("a linear whose texel view would exceed the device's limit runs the storage-buffer shader",
          "[op:linear][tex]") {
    if (!test::op_ctx().info().texel_formats) {
        WARN("skipped: no RGBA32F/RGBA16F/RGBA16_UINT uniform texel buffers on this device");
        return;
    }
    // x [40, 64] f32 is 640 RGBA32F texels, W [96, 64] f16 1536 RGBA16F texels: a device that allows 1000 can view
    // x but not W.
    ir::Graph g;
    g.output(g.linear(g.input("x", {40, 64}), g.weight("w", {96, 64}, DType::f16), g.weight("b", {96})), "y");
    std::map<std::string, Tensor> in{{"x", test::random_tensor({40, 64}, 80)}};
    std::map<std::string, Tensor> w{{"w", test::random_weight({96, 64}, DType::f16, 81)},
                                    {"b", test::random_tensor({96}, 82)}};
    auto wbytes = [&](const ir::Value& v, void* dst, size_t n) { std::memcpy(dst, w.at(v.name).bytes.data(), n); };
    auto run = [&](vk::Context& ctx) {
        test::ForceLinear force("tex");
        exec::Executor ex(ctx, g, wbytes, exec::Mode::full);
        ex.set_input("x", in.at("x"));
        ex.run();
        return std::make_pair(ex.output("y"), ex.counters().texel_dispatches);
    };
    auto [wide, wide_tex] = run(test::op_ctx());
    ::setenv("KILN_TEST_MAX_TEXEL_ELEMENTS", "1000", 1);
    vk::Context small{test::settings()};
    ::unsetenv("KILN_TEST_MAX_TEXEL_ELEMENTS");
    REQUIRE(small.info().max_texel_elements == 1000);
    auto [narrow, narrow_tex] = run(small);
    CHECK(wide_tex == 1);
    CHECK(narrow_tex == 0);
    CHECK(narrow.bytes == wide.bytes);
    CHECK(vk::Context::validation_errors() == 0);
}
