// fp8 checkpoints (safetensors F8_E4M3 / F8_E5M2) through the Builder: a matrix stored fp8 is declared f16
// (both formats are subsets of f16, so the upcast is exact) and the weight callback converts the stored bytes;
// Vulkan then matches the CPU reference as any f16 linear does. gather_rows decodes fp8 rows exactly.
#include <catch2/catch.hpp>
#include <filesystem>

#include "models/core/weights.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
// Random fp8 bytes with the top exponent bit clear: |w| < 2 in both formats, no NaN or inf.
Tensor random_fp8(DType t, const Shape& s, uint32_t seed) {
    Tensor f(t, s);
    for (auto& b : f.bytes) seed = seed * 1664525u + 1013904223u, b = (uint8_t)(seed >> 24) & 0xbf;
    return f;
}
}  // namespace

TEST_CASE("fp8 safetensors weights are upcast to f16 at load and run on the device", "[models][fp8]") {
    const int64_t M = 5, N = 13, K = 64, V = 10;
    auto dir = std::filesystem::temp_directory_path() / ("kiln_fp8_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const Tensor w8 = random_fp8(DType::f8_e4m3, {N, K}, 1), w5 = random_fp8(DType::f8_e5m2, {N, K}, 2);
    const Tensor table = random_fp8(DType::f8_e4m3, {V, K}, 3);
    write_safetensors((dir / "diffusion_pytorch_model.safetensors").string(),
                      {{"w8", w8}, {"w5", w5}, {"b", test::random_tensor({N}, 4)}, {"table", table}});
    auto ws = models::open_diffusers_component(dir.string());
    REQUIRE(ws->find("w8")->dtype == DType::f8_e4m3);
    REQUIRE(ws->find("w5")->dtype == DType::f8_e5m2);
    CHECK(ws->read("w5").bytes == w5.bytes);  // read back as stored

    for (int64_t rows : {M, K}) {  // random x; then identity rows (x = I), whose output is W^T itself
        CAPTURE(rows);
        ir::Graph g;
        models::Builder b(g, *ws);
        auto x = g.input("x", {rows, K});
        auto m8 = b.matrix("w8", {N, K}), m5 = b.matrix("w5", {N, K});
        CHECK(g.value(m8).dtype == DType::f16);
        CHECK(g.value(m5).dtype == DType::f16);
        const bool eye = rows == K;
        g.output(g.linear(x, m8, eye ? ir::Val{} : b.vec("b", {N})), "y8");
        g.output(g.linear(x, m5, {}), "y5");
        Tensor xt = test::random_tensor({rows, K}, 5);
        if (eye) {
            xt = Tensor(DType::f32, {K, K});
            for (int64_t i = 0; i < K; ++i) xt.data<float>()[i * K + i] = 1.f;
        }
        const std::map<std::string, Tensor> in{{"x", xt}};
        auto cpu = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
        auto gpu = exec::run_graph(test::context(), g, b.weight_fn(), in, exec::Mode::full);
        for (const char* y : {"y8", "y5"}) {
            CAPTURE(y);
            const std::vector<float> a = gpu.at(y).to_f32(), c = cpu.at(y).to_f32();
            if (eye) {  // one product 1 * w per output, the rest + 0: exactly the fp8 value
                const Tensor& w = y[1] == '8' ? w8 : w5;
                const std::vector<float> wf = w.to_f32();
                size_t bad = 0;
                for (int64_t k = 0; k < K; ++k)
                    for (int64_t n = 0; n < N; ++n)
                        bad += !(a[(size_t)(k * N + n)] == wf[(size_t)(n * K + k)] ||
                                 (wf[(size_t)(n * K + k)] == 0.f && a[(size_t)(k * N + n)] == 0.f));
                CHECK(bad == 0);
            }
            // f32 accumulation of K products |x w| < 2 against the reference: as test_linear's bound, doubled
            // for |w| < 2: 2 (2 K^2 / 4) 2^-24, floor 1e-6.
            double err = 0;
            for (size_t i = 0; i < a.size(); ++i) err = std::max(err, (double)std::fabs(a[i] - c[i]));
            CHECK(err <= std::max(1e-6, 2.0 * 2.0 * K * K / 4 * std::ldexp(1.0, -24)));
        }
    }
    CHECK(vk::Context::validation_errors() == 0);

    ir::Graph g;
    models::Builder b(g, *ws);
    Tensor ids(DType::i32, {3});
    ids.data<int32_t>()[0] = 7, ids.data<int32_t>()[1] = 0, ids.data<int32_t>()[2] = 7;
    const Tensor rows = b.gather_rows("table", {V, K}, ids);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t k = 0; k < K; ++k)
            CHECK(rows.data<float>()[i * K + k] ==
                  f8_e4m3_to_f32(table.bytes[(size_t)(ids.data<int32_t>()[i] * K + k)]));
    std::filesystem::remove_all(dir);
}
