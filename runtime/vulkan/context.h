#pragma once
// Vulkan instance + device: device choice (discrete > integrated > virtual > CPU, or ContextOptions::device), the
// features Kiln uses, and a compute queue. Validation layers when ContextOptions::validation: every validation error
// is counted and reported (tests fail on any). A Context is made from a Settings (runtime/core/settings.h) and
// carries it for the executors made on it; nothing here reads the environment.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/settings.h"
#include "runtime/vulkan/loader.h"

namespace kiln::vk {

// Throws kiln::Error naming the VkResult, the expression and file:line.
#define VK_CHECK(expr) ::kiln::vk::check_vk((expr), #expr, __FILE__, __LINE__)
void check_vk(VkResult r, const char* expr, const char* file, int line);
const char* vk_result_name(VkResult r);

struct PipelinePool;  // pipeline.h

struct DeviceInfo {
    int index = 0;
    std::string name, type, driver, api_version;
    VkPhysicalDeviceType vk_type{};
    uint64_t device_local_bytes = 0;  // the largest DEVICE_LOCAL heap (memory_type.h)
    bool unified_memory = false;      // device blocks are host-visible device memory (vk::unified_memory)
    bool fp16_storage = false, fp16_arith = false, int8_arith = false, int64 = false, fp64 = false;
    bool buffer_device_address = false, cooperative_matrix = false, timestamps = false;
    // VK_KHR_cooperative_matrix as shaders/linear_coopmat.comp uses it: the f16 x f16 + f32 -> f32 subgroup-scope
    // shape it runs (M x N x K, one the device lists; 0 x 0 x 0 when none fits), with the cooperativeMatrix,
    // vulkanMemoryModel and vulkanMemoryModelDeviceScope features and f16 arithmetic (all enabled on the device
    // when the shape is set). coopmat_why says why not where it is 0.
    uint32_t coopmat_m = 0, coopmat_n = 0, coopmat_k = 0;
    std::string coopmat_why;
    // VK_NV_cooperative_matrix2 as shaders/linear_cm2.comp uses it (the "coopmat2" linear): the block tile it runs
    // (cm2_bm x cm2_bn, K slices of cm2_bk; vk::choose_cm2_tile from the device's workgroup-scope f16 x f16 + f32
    // flexible dimensions) and its workgroup size, 0 with cm2_why where not. Needs coopmat_m's features, the
    // cooperativeMatrixWorkgroupScope, FlexibleDimensions, PerElementOperations and TensorAddressing features,
    // maintenance4 (the SPIR-V 1.6 shader's LocalSizeId) and Vulkan 1.3 (instance and device); all enabled when set.
    uint32_t cm2_bm = 0, cm2_bn = 0, cm2_bk = 0, cm2_invocations = 0;
    std::string cm2_why;
    bool memory_model_device_scope = false;  // vulkanMemoryModelDeviceScope (enabled with vulkanMemoryModel)
    bool host_import = false;                // VK_EXT_external_memory_host: host pages (an mmapped file) read in place
    uint64_t host_import_align = 0;          // minImportedHostPointerAlignment
    bool memory_budget = false;              // VK_EXT_memory_budget: the driver reports each heap's usage
    bool portability_subset = false;         // VK_KHR_portability_subset (MoltenVK): must be enabled where offered
    bool timeline_semaphore = false;         // Vulkan 1.2 timelineSemaphore (streamed copies in their own batches)
    int transfer_family = -1;                // a queue family for transfers only (a DMA engine), or -1
    uint32_t subgroup_size = 0;
    // Subgroup size control (Vulkan 1.3, or VK_EXT_subgroup_size_control on 1.2): the sizes a compute pipeline may
    // require (minSubgroupSize .. maxSubgroupSize, powers of two), maxComputeWorkgroupSubgroups, and whether
    // subgroupSizeControl and computeFullSubgroups are there with compute in requiredSubgroupSizeStages (both then
    // enabled on the device; subgroup_control_ext: through the extension). Shaders with subgroup-scope cooperative
    // matrices are created with their layout's subgroup size required and full subgroups (vk::subgroup_request).
    uint32_t subgroup_min = 0, subgroup_max = 0, max_workgroup_subgroups = 0;
    bool subgroup_control = false, subgroup_control_ext = false;
    // Compute units (NVIDIA SMs: VK_NV_shader_sm_builtins' shaderSMCount; AMD CUs: VK_AMD_shader_core_properties'
    // engines x arrays x CUs per array); 0 where the device reports none (the split-K linear then assumes a default).
    uint32_t compute_units = 0;
    bool subgroup_arithmetic = false;  // in compute shaders (the reductions of softmax / norms use it)
    uint64_t max_storage_buffer_range = 0, max_allocation = 0, min_storage_offset_align = 0;
    uint64_t min_uniform_offset_align = 0;
    uint32_t max_push_constants = 0, max_shared_memory = 0;
    uint32_t max_storage_buffers_per_stage = 0, max_uniform_buffers_per_stage = 0;  // maxPerStageDescriptor*
    // Uniform texel buffers (texel_shader in linear_select.h): minTexelBufferOffsetAlignment,
    // maxTexelBufferElements, maxPerStageDescriptorSampledImages, and whether RGBA32F, RGBA16F, RGBA16_UINT, R32F, R16F
    // and R16_UINT views can be uniform texel buffers.
    uint64_t min_texel_offset_align = 0;
    uint32_t max_texel_elements = 0, max_sampled_images_per_stage = 0;
    bool texel_formats = false;
    float timestamp_period_ns = 0;
};

// The devices of the loader `o.vulkan_loader` names (see loader.h). Throws vk::Unavailable when there is no loader or
// no device.
std::vector<DeviceInfo> list_devices(const ContextOptions& o = {});

// Where streamed block weights are copied into their ring slots (ContextOptions::transfer_queue, KILN_TRANSFER_QUEUE):
//  in_step ("0", the default): inside the step's one compute submission, each copy right after the barrier that
//    frees its slot;
//  split ("split"): on the compute queue, but each copy in its own batch, ordered by timeline semaphores exactly as
//    on a transfer queue (the transfer path's synchronisation, testable on any device);
//  transfer ("1"): on a queue of the device's transfer-only family, so copies run on its DMA engine alongside
//    compute. Devices without one (lavapipe, most integrated GPUs) stay in_step.
// split and transfer need timelineSemaphore; without it, in_step.
enum class CopyQueue { in_step, split, transfer };
const char* copy_queue_name(CopyQueue q);

class Context {
public:
    // settings.context chooses the device, validation, the copy queue and the pipeline cache; settings.test's device
    // limits and faults apply to this context. The rest is kept for what is made on it (settings()).
    explicit Context(const Settings& settings);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    // The settings this context was made with (or, where a test set TestHooks::live, the live ones): executors,
    // pipelines and the device loop read their options here.
    const Settings& settings() const;
    // New settings for what is made from now on (kiln bench: fusion per row); what construction made stays.
    void set_settings(const Settings& s) { settings_ = s; }

    const DeviceInfo& info() const { return info_; }
    VkDevice device() const { return device_; }
    VkPhysicalDevice physical() const { return phys_; }
    VkQueue queue() const { return queue_; }
    uint32_t queue_family() const { return family_; }
    VkCommandPool pool() const { return pool_; }
    // The cache pipelines are created through: the persistent one, or an empty one during a cold start.
    VkPipelineCache pipeline_cache() const { return cold_cache_ ? cold_cache_ : cache_; }
    // Benchmarks: while on, pipelines are created through a fresh, empty cache (as on a first run);
    // turning it off merges what was created into the persistent cache.
    void set_cold_pipeline_cache(bool cold);
    struct PipelineCacheInfo {
        std::string path;    // "" when disabled
        std::string status;  // "disabled", "loaded", "missing", "stale", "corrupt: ...", "foreign: ..."
        size_t loaded_bytes = 0;
    };
    const PipelineCacheInfo& pipeline_cache_info() const { return cache_info_; }
    // The pipelines shared by this context's executors (see pipeline.h); null while reuse is off or during a
    // cold start, when each executor creates and destroys its own (benchmarks of pipeline creation).
    PipelinePool* pipeline_pool();
    void set_pipeline_reuse(bool on) { reuse_pipelines_ = on; }
    const VkPhysicalDeviceMemoryProperties& memory_properties() const { return mem_props_; }

    // Device memory each executor may plan for (`--vram-budget`); by default the device-local heap size.
    uint64_t vram_budget() const { return budget_ ? budget_ : info_.device_local_bytes; }
    void set_vram_budget(uint64_t bytes) { budget_ = bytes; }
    // Device-local heap usage of this process as the driver reports it (VK_EXT_memory_budget; 0 without it),
    // and the most seen by sample_heap_usage() (called after every allocation) since reset_peak_heap_usage().
    uint64_t heap_usage_bytes() const;
    uint64_t peak_heap_usage_bytes() const { return peak_heap_usage_; }
    void sample_heap_usage();
    void reset_peak_heap_usage();

    // See CopyQueue. copy_queue_handle()/copy_pool(): where copy batches go (the compute queue unless transfer).
    CopyQueue copy_queue() const { return copy_queue_; }
    void set_copy_queue(CopyQueue q);  // transfer only where this context made the transfer queue
    VkQueue copy_queue_handle() const { return copy_queue_ == CopyQueue::transfer ? transfer_queue_ : queue_; }
    VkCommandPool copy_pool() const { return copy_queue_ == CopyQueue::transfer ? transfer_pool_ : pool_; }
    // Buffers are shared by the compute and transfer families (VK_SHARING_MODE_CONCURRENT) once a transfer queue
    // exists, so no ownership transfers are needed; every buffer creation goes through this.
    void set_sharing(VkBufferCreateInfo& bi) const;

    // One-off command buffer, submitted and waited for.
    VkCommandBuffer begin_one_shot();
    void submit_wait(VkCommandBuffer cb, bool free = true);
    // Every submission goes through these two. A lost device (VK_ERROR_DEVICE_LOST, real or injected) throws
    // kiln::Error (ErrorKind::device_lost) and marks the context lost(): every later submit fails at once.
    void submit(const VkCommandBuffer* cbs, uint32_t count, VkFence fence);
    void submit(VkCommandBuffer cb, VkFence fence) { submit(&cb, 1, fence); }
    void submit(VkQueue queue, const VkSubmitInfo* batches, uint32_t count, VkFence fence);
    void wait(VkFence fence);  // waits for the fence, then resets it
    bool lost() const { return lost_; }

    // Test hooks (fault injection), from Settings::test at construction and settable later.
    // memory_limit: bytes of device memory this context's Allocators may hold (0: no limit); an allocation past it
    // fails as VK_ERROR_OUT_OF_DEVICE_MEMORY would (TestHooks::device_memory_limit). lose_device_after: submissions
    // that succeed before the device is reported lost (-1: never; TestHooks::device_lost_after).
    struct Faults {
        std::atomic<uint64_t> memory_limit{0};
        std::atomic<int64_t> lose_device_after{-1};
    };
    Faults& faults() { return faults_; }
    // The test hook KILN_TEST_DISCRETE is on: info() says discrete GPU, and Allocators map no device-use block (as a
    // GPU's device-local memory is not host-visible), so uploads and downloads go through staging.
    bool presented_discrete() const { return settings_.test.discrete; }
    // Device memory held by this context's Allocators: reserve() before vkAllocateMemory (false: the test limit
    // is passed, treat as out of device memory), release() after vkFreeMemory.
    bool reserve_memory(uint64_t bytes);
    void release_memory(uint64_t bytes) { memory_bytes_ -= bytes; }
    uint64_t memory_bytes() const { return memory_bytes_.load(); }

    // With validation on: names a Vulkan object (a pipeline by its shader) so that messages say which one.
    void name_object(VkObjectType type, uint64_t handle, const std::string& name) const;

    // Validation messages seen so far (errors and warnings), when validation is on.
    static int validation_errors();
    static std::string last_validation_message();

private:
    void init(const Settings& settings);
    void destroy() noexcept;  // what the handles hold, in reverse order; null handles skipped
    void save_pipeline_cache();
    void choose_copy_queue(const std::string& transfer_queue);
    Settings settings_;
    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    VkPhysicalDevice phys_ = VK_NULL_HANDLE;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE, transfer_queue_ = VK_NULL_HANDLE;
    uint32_t family_ = 0, families_[2] = {0, 0};
    VkCommandPool pool_ = VK_NULL_HANDLE, transfer_pool_ = VK_NULL_HANDLE;
    CopyQueue copy_queue_ = CopyQueue::in_step;
    VkPipelineCache cache_ = VK_NULL_HANDLE, cold_cache_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    uint64_t budget_ = 0;
    PipelineCacheInfo cache_info_;
    std::vector<char> cache_loaded_;
    uint64_t peak_heap_usage_ = 0;
    std::unique_ptr<PipelinePool> pipelines_;
    bool reuse_pipelines_ = true;  // the driver data read at start (not rewritten when unchanged)
    DeviceInfo info_;
    VkPhysicalDeviceMemoryProperties mem_props_{};
    std::atomic<bool> lost_{false};
    std::atomic<uint64_t> memory_bytes_{0};
    Faults faults_;
};

}  // namespace kiln::vk
