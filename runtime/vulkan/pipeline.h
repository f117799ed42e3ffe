#pragma once
// Compute pipelines from the embedded SPIR-V. Descriptor set layouts come from SPIR-V reflection
// (storage buffers of set 0, in binding order); parameters arrive as push constants (<= 128 bytes),
// fixed per-pipeline values as specialization constants (ids 0..n-1).
#include <map>
#include <string>
#include <vector>

#include "runtime/vulkan/context.h"

namespace kiln::vk {

struct Kernel {
    std::string name;
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
    uint32_t bindings = 0;          // storage buffers at bindings 0..bindings-1
    uint32_t ptr_bindings = 0;      // bit b: binding b holds device addresses of the inputs ("_ptr" variants)
    uint32_t uniform_bindings = 0;  // bit b: binding b is a uniform buffer (the others are storage buffers)
    uint32_t texel_bindings = 0;    // bit b: binding b is a uniform texel buffer (a VkBufferView)
    // Subgroup-scope cooperative matrices (Reflection::subgroup_matrices): what pipeline creation asks of the
    // device's subgroups (vk::subgroup_request; 0: nothing).
    bool subgroup_matrices = false;
    uint32_t local_x = 1;  // Reflection::local_x, local_x_spec
    int local_x_spec = -1;
    uint32_t required_subgroup_size = 0;
    bool full_subgroups = false;
    VkDescriptorType descriptor_type(uint32_t b) const {
        return (texel_bindings >> b & 1)     ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
               : (uniform_bindings >> b & 1) ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER
                                             : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    }
};

// Reflection of one SPIR-V module: the storage-buffer bindings of descriptor set 0.
struct Reflection {
    std::vector<uint32_t> bindings;  // sorted
    uint32_t ptr_bindings = 0;       // bit b: the block at binding b is named "*_ptrs" (WEIGHT_BUF in common.glsl)
    uint32_t uniform_bindings = 0;   // bit b: binding b is a uniform buffer
    uint32_t texel_bindings = 0;     // bit b: binding b is a textureBuffer / utextureBuffer (uniform texel buffer)
    bool push_constants = false;
    // The module declares cooperative matrices (CooperativeMatrixKHR or CooperativeMatrixNV): their layout over a
    // subgroup's invocations is what the lowering sized the workgroup for.
    bool subgroup_matrices = false;
    // The workgroup's x size: local_x, or the specialization constant local_x_spec (-1: none) when one is given.
    uint32_t local_x = 1;
    int local_x_spec = -1;
};
Reflection reflect_spirv(const uint32_t* code, size_t words);
// The workgroup's x size (Reflection::local_x, local_x_spec) with specialization constants spec (ids 0..n-1).
uint32_t local_size_x(uint32_t local_x, int local_x_spec, const std::vector<uint32_t>& spec);

// What a compute pipeline asks of the device's subgroups. A shader with subgroup-scope cooperative matrices assumes
// the subgroup size its lowering laid the matrices out for (DeviceInfo::subgroup_size: the workgroup is a whole number
// of such subgroups) and that every invocation of each subgroup is active. SPIR-V 1.5 modules (Kiln's, but
// linear_cm2's) get the device's default size, yet a driver may still launch a smaller subgroup as a larger one with
// some invocations inactive, or pick another size for such a shader; so where the device has subgroup size control,
// these pipelines require that size (VkPipelineShaderStageRequiredSubgroupSizeCreateInfo) and full subgroups. A
// driver that cannot honour it fails pipeline creation, which the kernel table's probe takes as "not this variant".
// Every other shader is correct at any subgroup size (its reductions loop over gl_NumSubgroups): nothing asked.
// Throws kiln::Error where the workgroup cannot be whole subgroups of that size (an internal error of a lowering) or
// has more of them than maxComputeWorkgroupSubgroups.
struct SubgroupRequest {
    uint32_t size = 0;  // requiredSubgroupSize; 0: none
    bool full = false;  // VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
};
SubgroupRequest subgroup_request(const DeviceInfo& d, const std::string& shader, bool subgroup_matrices,
                                 uint32_t local_x);

bool has_shader(const std::string& name);

using KernelKey = std::pair<std::string, std::vector<uint32_t>>;  // shader name, specialization constants

// The pipelines of one Context, shared by all its executors: each (shader, spec) is created once and destroyed
// with the context, so the next executor on it (the next generation, the next prompt) creates none.
struct PipelinePool {
    VkDevice device = VK_NULL_HANDLE;
    std::map<KernelKey, Kernel> kernels;
    ~PipelinePool();
};

class Kernels {
public:
    explicit Kernels(Context& ctx) : ctx_(ctx) {}
    ~Kernels();
    // The pipeline for shader `name` with specialization constants `spec`: from the context's pool, else created
    // (into the pool; owned by this Kernels when the context does not reuse pipelines).
    const Kernel& get(const std::string& name, const std::vector<uint32_t>& spec = {});
    // Deferred creation: while on, get() returns kernels with their layouts made and their pipeline still null;
    // create_pending() then compiles every such pipeline on several threads (compilation is a driver's slowest
    // call: LLVM per shader on lavapipe). Nothing may record or run a kernel handed out in between. Pipelines left
    // pending when this Kernels dies (an error in between) are taken back out of the pool.
    void defer(bool on) { defer_ = on; }
    void create_pending();
    int used() const { return (int)kernels_.size(); }  // distinct pipelines handed out
    int created() const { return created_; }           // of those, created here rather than found in the pool
    double create_ms() const { return create_ms_; }    // wall time spent creating them

private:
    Kernel create_layouts(const std::string& name);
    VkResult create_pipeline(Kernel& k, const std::vector<uint32_t>& spec) const;  // touches only k: any thread
    Context& ctx_;
    std::map<KernelKey, const Kernel*> kernels_;
    std::map<KernelKey, Kernel> owned_;
    bool defer_ = false;
    std::vector<std::pair<KernelKey, Kernel*>> pending_;
    int created_ = 0;
    double create_ms_ = 0;
};

}  // namespace kiln::vk
