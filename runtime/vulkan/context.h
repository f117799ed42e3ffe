#pragma once
// Vulkan instance + device: device choice (discrete > integrated > virtual > CPU, or --device N /
// KILN_DEVICE), the features Kiln uses, and a compute queue. Validation layers when KILN_VALIDATION=1:
// every validation error is counted and reported (tests fail on any).
#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::vk {

// Throws kiln::Error naming the VkResult, the expression and file:line.
#define VK_CHECK(expr) ::kiln::vk::check_vk((expr), #expr, __FILE__, __LINE__)
void check_vk(VkResult r, const char* expr, const char* file, int line);
const char* vk_result_name(VkResult r);

struct DeviceInfo {
    int index = 0;
    std::string name, type, driver, api_version;
    VkPhysicalDeviceType vk_type{};
    uint64_t device_local_bytes = 0;
    bool unified_memory = false;  // a DEVICE_LOCAL | HOST_VISIBLE heap covers device memory
    bool fp16_storage = false, fp16_arith = false, int8_arith = false, int64 = false;
    bool buffer_device_address = false, cooperative_matrix = false, timestamps = false;
    uint32_t subgroup_size = 0;
    bool subgroup_arithmetic = false;  // in compute shaders (the reductions of softmax / norms use it)
    uint64_t max_storage_buffer_range = 0, max_allocation = 0, min_storage_offset_align = 0;
    uint32_t max_push_constants = 0, max_shared_memory = 0;
    float timestamp_period_ns = 0;
};

std::vector<DeviceInfo> list_devices();

class Context {
public:
    // device < 0: KILN_DEVICE if set, else the best device. validation < 0: KILN_VALIDATION decides; else 0/1.
    explicit Context(int device = -1, int validation = -1);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    const DeviceInfo& info() const { return info_; }
    VkDevice device() const { return device_; }
    VkPhysicalDevice physical() const { return phys_; }
    VkQueue queue() const { return queue_; }
    uint32_t queue_family() const { return family_; }
    VkCommandPool pool() const { return pool_; }
    VkPipelineCache pipeline_cache() const { return cache_; }
    const VkPhysicalDeviceMemoryProperties& memory_properties() const { return mem_props_; }

    // One-off command buffer, submitted and waited for.
    VkCommandBuffer begin_one_shot();
    void submit_wait(VkCommandBuffer cb, bool free = true);
    // Every submission goes through these two. A lost device (VK_ERROR_DEVICE_LOST, real or injected) throws
    // kiln::Error (ErrorKind::device_lost) and marks the context lost(): every later submit fails at once.
    void submit(VkCommandBuffer cb, VkFence fence);
    void wait(VkFence fence);  // waits for the fence, then resets it
    bool lost() const { return lost_; }

    // Test hooks (fault injection), read from the environment at construction and settable later.
    // memory_limit: bytes of device memory this context's Allocators may hold (0: no limit); an allocation past it
    // fails as VK_ERROR_OUT_OF_DEVICE_MEMORY would (KILN_TEST_DEVICE_MEMORY_LIMIT). lose_device_after: submissions
    // that succeed before the device is reported lost (-1: never; KILN_TEST_DEVICE_LOST_AFTER).
    struct Faults {
        std::atomic<uint64_t> memory_limit{0};
        std::atomic<int64_t> lose_device_after{-1};
    };
    Faults& faults() { return faults_; }
    // Device memory held by this context's Allocators: reserve() before vkAllocateMemory (false: the test limit
    // is passed, treat as out of device memory), release() after vkFreeMemory.
    bool reserve_memory(uint64_t bytes);
    void release_memory(uint64_t bytes) { memory_bytes_ -= bytes; }

    // Validation messages seen so far (errors and warnings), when validation is on.
    static int validation_errors();
    static std::string last_validation_message();

private:
    void save_pipeline_cache();
    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    VkPhysicalDevice phys_ = VK_NULL_HANDLE;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    uint32_t family_ = 0;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkPipelineCache cache_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    std::string cache_path_;
    DeviceInfo info_;
    VkPhysicalDeviceMemoryProperties mem_props_{};
    std::atomic<bool> lost_{false};
    std::atomic<uint64_t> memory_bytes_{0};
    Faults faults_;
};

}  // namespace kiln::vk
