#pragma once
// Device memory: large blocks, each one VkBuffer, sub-allocated by bumping. On unified-memory
// devices (lavapipe, iGPUs) blocks are host-visible and mapped, so uploads are memcpy; on discrete
// GPUs they are device-local and uploads/downloads go through a staging buffer.
#include <cstdint>
#include <vector>

#include "runtime/vulkan/context.h"

namespace kiln::vk {

struct BufferRange {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize offset = 0, size = 0;
    uint8_t* mapped = nullptr;  // non-null when host-visible
};

class Allocator {
public:
    explicit Allocator(Context& ctx);
    ~Allocator();
    Allocator(const Allocator&) = delete;
    Allocator& operator=(const Allocator&) = delete;

    // A device buffer range of `size` bytes (aligned for storage-buffer binding). `what` names it in errors.
    // bindable: the range is bound whole to a shader, so it must fit maxStorageBufferRange.
    BufferRange alloc(VkDeviceSize size, const char* what, bool bindable = true);
    void upload(const BufferRange& dst, const void* src, VkDeviceSize size, VkDeviceSize dst_offset = 0);
    void download(const BufferRange& src, void* dst, VkDeviceSize size);
    // The device address of r's first byte (needs the device's bufferDeviceAddress feature).
    VkDeviceAddress address(const BufferRange& r) const;
    bool unified() const { return unified_; }
    uint64_t bytes() const { return bytes_; }
    // Bytes of VkDeviceMemory currently allocated by all Allocators of this process (the soak test checks that
    // it does not grow over many generations).
    static uint64_t process_bytes();
    // The most process_bytes() has been since the start or the last reset_process_peak() (which sets it to now).
    static uint64_t process_peak_bytes();
    static void reset_process_peak();

private:
    struct Block {
        VkDeviceMemory memory = VK_NULL_HANDLE;
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceSize size = 0, used = 0;
        VkDeviceSize memory_size = 0;  // VkMemoryAllocateInfo::allocationSize
        uint8_t* mapped = nullptr;
    };
    Block make_block(VkDeviceSize size, bool host, const char* what);
    void staged_copy(const BufferRange& r, void* host, VkDeviceSize size, VkDeviceSize off, bool to_device);
    Context& ctx_;
    bool unified_ = false;
    std::vector<Block> blocks_;
    Block staging_;
    uint64_t bytes_ = 0;
};

}  // namespace kiln::vk
