// What pipelines ask of a device's subgroups (vk::subgroup_request, runtime/vulkan/pipeline.h). A shader with
// subgroup-scope cooperative matrices is laid out for DeviceInfo::subgroup_size (its workgroup is a whole number of
// such subgroups, each subgroup owns its tiles by gl_SubgroupID) and needs every invocation active. NVIDIA (32 only)
// and lavapipe (8 only) cannot dispatch anything else, so nothing here or on the H200 would show a wrong size: AMD
// (32 or 64) and Intel (8 to 32) may. So the reflection that finds such shaders, the request on device profiles,
// and that the present device's cooperative-matrix pipelines carry it (the validation layer then checks the
// request against the device's limits and enabled features) are tested here.
#include <cstring>

#include "runtime/vulkan/linear_kernels.h"
#include "runtime/vulkan/pipeline.h"
#include "runtime/vulkan/shader_table.h"
#include "tests/ops/op_harness.h"
#include "tests/support/force_linear.h"

using namespace kiln;

namespace {
bool starts_with(const char* s, const char* p) { return std::strncmp(s, p, std::strlen(p)) == 0; }

// Profiles from vulkaninfo: NVIDIA (the H200 of docs/gpu-runs/2026-11-28-h200), RADV on RDNA3 and ANV on Arc
// (VkPhysicalDeviceSubgroupSizeControlProperties as those drivers report them), lavapipe.
vk::DeviceInfo profile(const char* name, uint32_t size, uint32_t lo, uint32_t hi, uint32_t max_subgroups) {
    vk::DeviceInfo d;
    d.name = name;
    d.subgroup_size = size, d.subgroup_min = lo, d.subgroup_max = hi, d.max_workgroup_subgroups = max_subgroups;
    d.subgroup_control = true;
    return d;
}
}  // namespace

TEST_CASE("reflection finds the shaders with cooperative matrices and their workgroup size", "[caps][subgroup]") {
    int matrices = 0;
    for (size_t i = 0; i < vk::kShaderCount; ++i) {
        const vk::ShaderBlob& b = vk::kShaderTable[i];
        CAPTURE(b.name);
        const bool expected = starts_with(b.name, "linear_coopmat") || starts_with(b.name, "attention_coopmat") ||
                              starts_with(b.name, "linear_cm2");
        const vk::Reflection r = vk::reflect_spirv(b.code, b.words);
        CHECK(r.subgroup_matrices == expected);
        matrices += r.subgroup_matrices;
        CHECK(r.local_x >= 1);
    }
    // Built with a glslang that has GL_KHR_cooperative_matrix (CI's, lavapipe26.sh's): the cooperative-matrix GEMM
    // is there, with its workgroup size in specialization constant 6 (NT). glslang gives the WorkgroupSize built-in
    // a constant of its own with that SpecId, whose default is 1 (no local_size_x), not NT's 128: every pipeline
    // of it is given constant 6.
    if (vk::has_shader("linear_coopmat_f16")) {
        CHECK(matrices > 0);
        const vk::ShaderBlob* b = nullptr;
        for (size_t i = 0; i < vk::kShaderCount; ++i)
            if (!std::strcmp(vk::kShaderTable[i].name, "linear_coopmat_f16")) b = &vk::kShaderTable[i];
        REQUIRE(b);
        const vk::Reflection r = vk::reflect_spirv(b->code, b->words);
        CHECK(r.local_x_spec == 6);
        CHECK(r.local_x == 1);
        CHECK(vk::local_size_x(r.local_x, r.local_x_spec, {}) == 1);
        CHECK(vk::local_size_x(r.local_x, r.local_x_spec, {16, 16, 0, 16, 0, 0, 256}) == 256);
    } else {
        WARN("built without GL_KHR_cooperative_matrix: no cooperative-matrix shader to reflect");
    }
    // A fixed workgroup size (LocalSize), no specialization constant.
    for (size_t i = 0; i < vk::kShaderCount; ++i)
        if (!std::strcmp(vk::kShaderTable[i].name, "select_advance")) {
            const vk::Reflection r = vk::reflect_spirv(vk::kShaderTable[i].code, vk::kShaderTable[i].words);
            CHECK(r.local_x == 64);  // select_advance.comp: local_size_x = 64
            CHECK(r.local_x_spec == -1);
        }
}

TEST_CASE("subgroup_request: the lowering's subgroup size, full subgroups, only for cooperative matrices",
          "[caps][subgroup]") {
    using vk::subgroup_request;
    const auto nvidia = profile("NVIDIA H200", 32, 32, 32, 32);
    const auto radv = profile("AMD Radeon RX 7900 XTX (RADV NAVI31)", 64, 32, 64, 16);
    const auto anv = profile("Intel(R) Arc(tm) A770 Graphics (DG2)", 32, 8, 32, 64);
    const auto lvp = profile("llvmpipe", 8, 8, 8, 32);
    for (const auto& d : {nvidia, radv, anv, lvp}) {
        CAPTURE(d.name);
        const auto r = subgroup_request(d, "linear_coopmat_f16", true, 4 * d.subgroup_size);
        CHECK(r.size == d.subgroup_size);  // the size the workgroup was laid out for, not the minimum or maximum
        CHECK(r.full);
        const auto none = subgroup_request(d, "layer_norm", false, 256);  // any subgroup size is right there
        CHECK(none.size == 0);
        CHECK_FALSE(none.full);
    }
    // A device without subgroup size control (Vulkan 1.2 without the extension): its default size applies.
    auto old = radv;
    old.subgroup_control = false;
    CHECK(subgroup_request(old, "linear_coopmat_f16", true, 256).size == 0);
    // A workgroup that is not whole subgroups of that size: the lowering's error, named.
    CHECK_THROWS_WITH(subgroup_request(radv, "attention_coopmat", true, 96),
                      Catch::Contains("not whole subgroups of 64"));
    // More subgroups than the device allows in one workgroup (lavapipe: 32 of 8 invocations).
    CHECK_THROWS_WITH(subgroup_request(lvp, "linear_coopmat_f16", true, 512),
                      Catch::Contains("maxComputeWorkgroupSubgroups"));
    CHECK(subgroup_request(lvp, "linear_coopmat_f16", true, 256).size == 8);
}

TEST_CASE("the present device's cooperative-matrix pipelines require the lowering's subgroup size",
          "[caps][subgroup][vulkan]") {
    const vk::DeviceInfo& d = test::op_ctx().info();
    INFO(d.name << ": subgroup " << d.subgroup_size << " (" << d.subgroup_min << ".." << d.subgroup_max << "), control "
                << d.subgroup_control);
    // Vulkan 1.3 lavapipe (22.3 and 26) and NVIDIA's driver have subgroup size control.
    CHECK(d.subgroup_control);
    if (!d.coopmat_m || !vk::has_shader("linear_coopmat_f16")) {
        WARN("no cooperative-matrix linear on '" << d.name << "': " << d.coopmat_why);
        return;
    }
    ir::Graph g;
    auto x = g.input("x", {70, 64});
    g.output(g.linear(x, g.weight("w", {40, 64}, DType::f16), ir::Val{}), "y");
    std::map<std::string, Tensor> ws{{"w", test::random_weight({40, 64}, DType::f16, 7)}};
    {
        test::ForceLinear force("coopmat");
        auto r = test::run_op(g, {{"x", test::random_tensor({70, 64}, 8)}}, ws);
        CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);  // the GEMM's f32-like bound (test_linear_smem.cpp)
    }
    // The cooperative-matrix attention kernels too (64 invocations; coopmat4: up to 4 subgroups of 16 rows).
    for (const char* kernel : {"coopmat", "coopmat4"}) {
        if (!vk::has_shader(std::string("attention_") + kernel)) continue;
        CAPTURE(kernel);
        ir::Graph ga;
        auto q = ga.input("q", {1, 37, 128});
        ga.output(ga.attention(q, q, q, 2), "y");
        test::ScopedEnv env("KILN_ATTENTION", kernel);
        auto r = test::run_op(ga, {{"q", test::random_tensor({1, 37, 128}, 9)}});
        CHECK(rel_l2(r.gpu, r.cpu) <= 1e-5);  // their bound (docs/attention.md), relative L2
    }
    vk::PipelinePool* pool = test::op_ctx().pipeline_pool();
    REQUIRE(pool);
    int coopmat = 0;
    for (const auto& [key, k] : pool->kernels) {
        CAPTURE(key.first);
        if (k.subgroup_matrices) {
            ++coopmat;
            CHECK(k.required_subgroup_size == d.subgroup_size);
            CHECK(k.full_subgroups);
        } else {
            CHECK(k.required_subgroup_size == 0);
            CHECK_FALSE(k.full_subgroups);
        }
    }
    CHECK(coopmat > 0);  // the forced linear ran on cooperative matrices
    for (const char* kernel : {"attention_coopmat", "attention_coopmat4"})
        if (vk::has_shader(kernel)) {
            CAPTURE(kernel);
            bool found = false;
            for (const auto& [key, k] : pool->kernels) found |= key.first == kernel && k.full_subgroups;
            CHECK(found);
        }
    CHECK(vk::Context::validation_errors() == 0);
}
