#include "runtime/vulkan/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/vulkan/shader_table.h"

namespace kiln::vk {

namespace {
const ShaderBlob* find_blob(const std::string& name) {
    for (size_t i = 0; i < kShaderCount; ++i)
        if (name == kShaderTable[i].name) return &kShaderTable[i];
    return nullptr;
}
}  // namespace

bool has_shader(const std::string& name) { return find_blob(name) != nullptr; }

Reflection reflect_spirv(const uint32_t* code, size_t words) {
    KILN_CHECK(words > 5 && code[0] == 0x07230203u, "invalid SPIR-V module");
    constexpr uint32_t OpName = 5, OpTypePointer = 32, OpDecorate = 71, OpVariable = 59, DecBinding = 33, DecSet = 34;
    constexpr uint32_t SCStorageBuffer = 12, SCUniform = 2, SCPushConstant = 9, SCUniformConstant = 0;
    constexpr uint32_t OpTypeImage = 25, OpTypeSampledImage = 27, DimBuffer = 5;
    constexpr uint32_t OpCapability = 17, CapCoopMatKHR = 6022, CapCoopMatNV = 5357;
    constexpr uint32_t OpExecutionMode = 16, OpExecutionModeId = 331, ModeLocalSize = 17, ModeLocalSizeId = 38;
    constexpr uint32_t DecBuiltIn = 11, DecSpecId = 1, BuiltInWorkgroupSize = 25;
    constexpr uint32_t OpConstant = 43, OpSpecConstant = 50, OpConstantComposite = 44, OpSpecConstantComposite = 51;
    std::map<uint32_t, uint32_t> binding, set, pointee, sampled_image, image_dim, image_sampled;
    std::map<uint32_t, uint32_t> spec_id, scalar, composite_x;  // id -> SpecId / constant value / first constituent
    uint32_t workgroup_size_id = 0, local_x_id = 0, local_x = 1;
    bool matrices = false;
    std::map<uint32_t, std::string> names;
    struct Var {
        uint32_t id, type, sc;
    };
    std::vector<Var> vars;
    for (size_t i = 5; i < words;) {
        uint32_t op = code[i] & 0xffffu, len = code[i] >> 16;
        KILN_CHECK(len > 0 && i + len <= words, "truncated SPIR-V instruction");
        if (op == OpDecorate && len >= 4) {
            if (code[i + 2] == DecBinding) binding[code[i + 1]] = code[i + 3];
            if (code[i + 2] == DecSet) set[code[i + 1]] = code[i + 3];
            if (code[i + 2] == DecSpecId) spec_id[code[i + 1]] = code[i + 3];
            if (code[i + 2] == DecBuiltIn && code[i + 3] == BuiltInWorkgroupSize) workgroup_size_id = code[i + 1];
        } else if (op == OpCapability && len >= 2) {
            matrices |= code[i + 1] == CapCoopMatKHR || code[i + 1] == CapCoopMatNV;
        } else if (op == OpExecutionMode && len >= 4 && code[i + 2] == ModeLocalSize) {
            local_x = code[i + 3];
        } else if (op == OpExecutionModeId && len >= 4 && code[i + 2] == ModeLocalSizeId) {
            local_x_id = code[i + 3];
        } else if ((op == OpConstant || op == OpSpecConstant) && len >= 4) {
            scalar[code[i + 2]] = code[i + 3];
        } else if ((op == OpConstantComposite || op == OpSpecConstantComposite) && len >= 4) {
            composite_x[code[i + 2]] = code[i + 3];
        } else if (op == OpVariable && len >= 4) {
            vars.push_back({code[i + 2], code[i + 1], code[i + 3]});
        } else if (op == OpTypePointer && len >= 4) {
            pointee[code[i + 1]] = code[i + 3];
        } else if (op == OpTypeSampledImage && len >= 3) {
            sampled_image[code[i + 1]] = code[i + 2];
        } else if (op == OpTypeImage && len >= 8) {
            image_dim[code[i + 1]] = code[i + 3];
            image_sampled[code[i + 1]] = code[i + 7];  // 1: read with a sampler or texelFetch, 2: storage image
        } else if (op == OpName && len >= 3) {
            const char* s = reinterpret_cast<const char*>(code + i + 2);
            names[code[i + 1]] = std::string(s, strnlen(s, (len - 2) * 4));
        }
        i += len;
    }
    Reflection r;
    r.subgroup_matrices = matrices;
    // The x size: a WorkgroupSize built-in (glslang's local_size_x_id before SPIR-V 1.6) overrides LocalSize;
    // LocalSizeId names its constants directly. Either way a constant with a SpecId is specialized.
    r.local_x = local_x;
    uint32_t xid = local_x_id;
    if (workgroup_size_id && composite_x.count(workgroup_size_id)) xid = composite_x[workgroup_size_id];
    if (xid) {
        KILN_CHECK(scalar.count(xid), "SPIR-V workgroup size without a constant x");
        r.local_x = scalar[xid];
        if (spec_id.count(xid)) r.local_x_spec = (int)spec_id[xid];
    }
    for (auto [id, type, sc] : vars) {
        if (sc == SCPushConstant) r.push_constants = true;
        if (sc == SCUniformConstant && binding.count(id)) {  // textureBuffer / utextureBuffer: a uniform texel buffer
            // Declared as an image, not a sampled image (samplerBuffer): SPIR-V 1.6 forbids OpTypeSampledImage of a
            // Dim Buffer image, and Mesa's SPIR-V front end warns about it in earlier versions.
            const uint32_t img = pointee[type];
            KILN_CHECK(!sampled_image.count(img), "shader resource at binding ", binding[id],
                       ": a sampled image (samplerBuffer); declare texel buffers as textureBuffer");
            KILN_CHECK(image_dim.count(img) && image_dim[img] == DimBuffer && image_sampled[img] == 1 && set[id] == 0,
                       "shader resource at binding ", binding[id], ": only buffers and uniform texel buffers (set 0)");
            r.bindings.push_back(binding[id]);
            r.texel_bindings |= 1u << binding[id];
        }
        if (sc == SCStorageBuffer || sc == SCUniform) {
            KILN_CHECK(binding.count(id) && set[id] == 0, "shader resource without binding in descriptor set 0");
            r.bindings.push_back(binding[id]);
            if (sc == SCUniform) r.uniform_bindings |= 1u << binding[id];  // (SPIR-V >= 1.3: SSBOs are StorageBuffer)
            const std::string& block = names[pointee[type]];
            if (block.size() > 5 && block.compare(block.size() - 5, 5, "_ptrs") == 0)
                r.ptr_bindings |= 1u << binding[id];
        }
    }
    // A binding may be declared twice (linear.glsl reads an f32 or an f16 view of x): one descriptor.
    std::sort(r.bindings.begin(), r.bindings.end());
    r.bindings.erase(std::unique(r.bindings.begin(), r.bindings.end()), r.bindings.end());
    for (size_t i = 0; i < r.bindings.size(); ++i)
        KILN_CHECK(r.bindings[i] == i, "shader bindings must be 0..n-1 without gaps");
    return r;
}

uint32_t local_size_x(uint32_t local_x, int local_x_spec, const std::vector<uint32_t>& spec) {
    return local_x_spec >= 0 && (size_t)local_x_spec < spec.size() ? spec[local_x_spec] : local_x;
}

SubgroupRequest subgroup_request(const DeviceInfo& d, const std::string& shader, bool subgroup_matrices,
                                 uint32_t local_x) {
    const uint32_t s = d.subgroup_size;
    if (!subgroup_matrices || !d.subgroup_control || s < d.subgroup_min || s > d.subgroup_max) return {};
    KILN_CHECK(local_x % s == 0, "internal: shader '", shader, "' has a workgroup of ", local_x,
               " invocations, not whole subgroups of ", s, " (its cooperative matrices need full subgroups)");
    KILN_CHECK(local_x / s <= d.max_workgroup_subgroups, "shader '", shader, "' needs ", local_x / s, " subgroups of ",
               s, " per workgroup; device '", d.name, "' allows ", d.max_workgroup_subgroups,
               " (maxComputeWorkgroupSubgroups)");
    return {s, true};
}

namespace {
void destroy(VkDevice d, const Kernel& k) {
    vkDestroyPipeline(d, k.pipeline, nullptr);
    vkDestroyPipelineLayout(d, k.layout, nullptr);
    vkDestroyDescriptorSetLayout(d, k.set_layout, nullptr);
}
}  // namespace

PipelinePool::~PipelinePool() {
    for (auto& [key, k] : kernels) destroy(device, k);
}

Kernels::~Kernels() {
    PipelinePool* pool = ctx_.pipeline_pool();
    if (pool)
        for (auto& [key, k] : pending_) {  // never compiled: no other executor may find it
            destroy(ctx_.device(), *k);
            pool->kernels.erase(key);
        }
    for (auto& [key, k] : owned_) destroy(ctx_.device(), k);
}

const Kernel& Kernels::get(const std::string& name, const std::vector<uint32_t>& spec) {
    auto key = std::make_pair(name, spec);
    if (auto it = kernels_.find(key); it != kernels_.end()) return *it->second;
    PipelinePool* pool = ctx_.pipeline_pool();
    if (pool)
        if (auto it = pool->kernels.find(key); it != pool->kernels.end()) return *(kernels_[key] = &it->second);
    auto t0 = std::chrono::steady_clock::now();
    Kernel k = create_layouts(name);
    if (k.subgroup_matrices) {
        SubgroupRequest req;
        try {
            req = subgroup_request(ctx_.info(), name, true, local_size_x(k.local_x, k.local_x_spec, spec));
        } catch (...) {
            destroy(ctx_.device(), k);
            throw;
        }
        k.required_subgroup_size = req.size;
        k.full_subgroups = req.full;
    }
    if (!defer_) {
        if (VkResult r = create_pipeline(k, spec); r != VK_SUCCESS) {
            destroy(ctx_.device(), k);
            VK_CHECK(r);
        }
        ctx_.name_object(VK_OBJECT_TYPE_PIPELINE, (uint64_t)k.pipeline, name);
    }
    created_++;
    create_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto& where = pool ? pool->kernels : owned_;
    Kernel* placed = &where.emplace(key, k).first->second;
    if (defer_) pending_.emplace_back(key, placed);
    return *(kernels_[key] = placed);
}

void Kernels::create_pending() {
    if (pending_.empty()) return;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<VkResult> results(pending_.size(), VK_SUCCESS);
    // ContextOptions::pipeline_threads (KILN_PIPELINE_THREADS): how many threads compile (0: one per core).
    // vkCreateComputePipelines may be called from several threads at once; the pipeline cache synchronizes itself
    // (it is not created with VK_PIPELINE_CACHE_CREATE_EXTERNALLY_SYNCHRONIZED_BIT).
    size_t threads = std::max(1u, std::thread::hardware_concurrency());
    if (const int n = ctx_.settings().context.pipeline_threads; n != 0) {
        KILN_CHECK(n >= 1 && n <= 256, "KILN_PIPELINE_THREADS='", n, "' (a thread count, 1 to 256)");
        threads = (size_t)n;
    }
    threads = std::min(threads, pending_.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
        for (size_t i; (i = next++) < pending_.size();)
            results[i] = create_pipeline(*pending_[i].second, pending_[i].first.second);
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    std::vector<std::pair<KernelKey, Kernel*>> done;
    done.swap(pending_);
    create_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // Failed pipelines leave the pool (no later executor may find them half-made); the first is named.
    PipelinePool* shared = ctx_.pipeline_pool();
    std::string failed;
    VkResult first_error = VK_SUCCESS;
    for (size_t i = 0; i < done.size(); ++i) {
        const auto& [key, k] = done[i];
        if (results[i] == VK_SUCCESS) {
            ctx_.name_object(VK_OBJECT_TYPE_PIPELINE, (uint64_t)k->pipeline, key.first);
            continue;
        }
        if (failed.empty()) failed = key.first, first_error = results[i];
        destroy(ctx_.device(), *k);
        kernels_.erase(key);
        if (shared)
            shared->kernels.erase(key);
        else
            owned_.erase(key);
    }
    KILN_CHECK(failed.empty(), "creating the pipeline of shader '", failed, "' failed (VkResult ", (int)first_error,
               ")");
}

Kernel Kernels::create_layouts(const std::string& name) {
    const ShaderBlob* blob = find_blob(name);
    KILN_CHECK(blob, "no shader named '", name, "' is built into this binary");
    Reflection refl = reflect_spirv(blob->code, blob->words);
    VkDevice d = ctx_.device();
    Kernel k;
    k.name = name;
    k.bindings = (uint32_t)refl.bindings.size();
    k.ptr_bindings = refl.ptr_bindings;
    k.uniform_bindings = refl.uniform_bindings;
    k.texel_bindings = refl.texel_bindings;
    k.subgroup_matrices = refl.subgroup_matrices;
    k.local_x = refl.local_x;
    k.local_x_spec = refl.local_x_spec;

    // A device below Vulkan's usual limits (the spec guarantees only 4 storage buffers per stage; Kiln's widest
    // shader, linear_multi, binds 13) gets a clear error rather than undefined behaviour.
    const uint32_t n_uniform = (uint32_t)__builtin_popcount(k.uniform_bindings),
                   n_texel = (uint32_t)__builtin_popcount(k.texel_bindings),
                   n_storage = k.bindings - n_uniform - n_texel;
    const auto& info = ctx_.info();
    KILN_CHECK(n_texel <= info.max_sampled_images_per_stage, "shader '", name, "' binds ", n_texel,
               " uniform texel buffers; device '", info.name, "' allows ", info.max_sampled_images_per_stage,
               " per stage (maxPerStageDescriptorSampledImages)");
    KILN_CHECK(n_storage <= info.max_storage_buffers_per_stage && n_uniform <= info.max_uniform_buffers_per_stage,
               "shader '", name, "' binds ", n_storage, " storage and ", n_uniform, " uniform buffers; device '",
               info.name, "' allows ", info.max_storage_buffers_per_stage, " and ", info.max_uniform_buffers_per_stage,
               " per stage (maxPerStageDescriptorStorageBuffers / UniformBuffers). KILN_FUSE=0 avoids the widest "
               "fused shaders");
    std::vector<VkDescriptorSetLayoutBinding> lb(k.bindings);
    for (uint32_t i = 0; i < k.bindings; ++i) {
        lb[i].binding = i;
        lb[i].descriptorType = k.descriptor_type(i);
        lb[i].descriptorCount = 1;
        lb[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo dli{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dli.bindingCount = k.bindings;
    dli.pBindings = lb.data();
    VK_CHECK(vkCreateDescriptorSetLayout(d, &dli, nullptr, &k.set_layout));

    VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
    VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &k.set_layout;
    pli.pushConstantRangeCount = refl.push_constants ? 1 : 0;
    pli.pPushConstantRanges = &pr;
    VK_CHECK(vkCreatePipelineLayout(d, &pli, nullptr, &k.layout));
    return k;
}

VkResult Kernels::create_pipeline(Kernel& k, const std::vector<uint32_t>& spec) const {
    const ShaderBlob* blob = find_blob(k.name);
    VkDevice d = ctx_.device();
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = blob->words * 4;
    mi.pCode = blob->code;
    VkShaderModule mod;
    if (VkResult r = vkCreateShaderModule(d, &mi, nullptr, &mod); r != VK_SUCCESS) return r;

    std::vector<VkSpecializationMapEntry> entries(spec.size());
    for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
    VkSpecializationInfo si{(uint32_t)entries.size(), entries.data(), spec.size() * 4, spec.data()};
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = mod;
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rs{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
    if (k.required_subgroup_size) {  // see subgroup_request
        rs.requiredSubgroupSize = k.required_subgroup_size;
        ci.stage.pNext = &rs;
    }
    if (k.full_subgroups) ci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    ci.layout = k.layout;
    VkResult r = vkCreateComputePipelines(d, ctx_.pipeline_cache(), 1, &ci, nullptr, &k.pipeline);
    vkDestroyShaderModule(d, mod, nullptr);
    return r;
}

}  // namespace kiln::vk
