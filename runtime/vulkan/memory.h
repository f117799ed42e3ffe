#pragma once
// Device memory: blocks, each one VkBuffer, sub-allocated by bumping. A caller that knows how much it is about to
// allocate says so (reserve()) and gets one block of that size; other requests get blocks doubling from 1 MiB up to
// 256 MiB (memory.cpp argues the bounds). On unified-memory devices (lavapipe, iGPUs) blocks are host-visible and
// mapped, so uploads are memcpy; on discrete GPUs they are device-local and uploads/downloads go through a staging
// buffer.
#include <cstdint>
#include <vector>

#include "runtime/vulkan/context.h"
#include "runtime/vulkan/memory_type.h"

namespace kiln::vk {

struct BufferRange {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize offset = 0, size = 0;
    uint8_t* mapped = nullptr;  // non-null when host-visible
};

class Allocator {
public:
    // host: every block in host-visible memory (the source of streamed weights), never device-local-only.
    explicit Allocator(Context& ctx, bool host = false);
    ~Allocator();
    Allocator(const Allocator&) = delete;
    Allocator& operator=(const Allocator&) = delete;

    // A device buffer range of `size` bytes (aligned for storage-buffer binding). `what` names it in errors.
    // bindable: the range is bound whole to a shader, so it must fit maxStorageBufferRange.
    BufferRange alloc(VkDeviceSize size, const char* what, bool bindable = true);
    // Hint: the next alloc() calls add up to `bytes` more (each counted as its size rounded up to the alignment).
    // Reservations add up and each alloc() uses up its share; a block made while some is left holds exactly what is
    // left (capped by maxMemoryAllocationSize and the heap), so they share one block with no tail. Nothing is
    // allocated here: requests that fit an existing block's tail still go there.
    void reserve(VkDeviceSize bytes) { reserved_ += bytes; }
    // Forgets what is left of the reservations (a caller that reserved more than it allocated).
    void drop_reservation() { reserved_ = 0; }
    VkDeviceSize reserved() const { return reserved_; }
    void upload(const BufferRange& dst, const void* src, VkDeviceSize size, VkDeviceSize dst_offset = 0);
    void download(const BufferRange& src, void* dst, VkDeviceSize size);
    // The device address of r's first byte (needs the device's bufferDeviceAddress feature).
    VkDeviceAddress address(const BufferRange& r) const;
    bool unified() const { return unified_; }
    uint64_t bytes() const { return bytes_; }
    uint64_t used() const { return used_; }  // bytes handed out by alloc() (what a plan needs, without block slack)
    size_t blocks() const { return blocks_.size(); }  // VkDeviceMemory allocations held (staging not counted)
    // The alignment of every range alloc() hands out (used() counts each size rounded up to it).
    VkDeviceSize alignment() const;
    // What alloc(size) counts against used() and a reservation: size rounded up to alignment() (at least 4 bytes).
    VkDeviceSize footprint(VkDeviceSize size) const;
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
    Block make_block(VkDeviceSize size, MemoryUse use, const char* what);
    void staged_copy(const BufferRange& r, void* host, VkDeviceSize size, VkDeviceSize off, bool to_device);
    Context& ctx_;
    bool unified_ = false, host_ = false;
    uint64_t used_ = 0;
    VkDeviceSize next_block_ = 1ull << 20;  // the next unreserved block's size (doubling up to 256 MiB)
    VkDeviceSize reserved_ = 0;             // what is left of reserve()
    std::vector<Block> blocks_;
    Block staging_;
    uint64_t bytes_ = 0;
};

// Host memory imported as one Vulkan buffer (VK_EXT_external_memory_host), read by the device where it lies: the
// pages of an mmapped model file. p and size must be multiples of DeviceInfo::host_import_align; the memory must
// outlive the import. Throws kiln::Error when the device refuses it (callers fall back to copies).
class HostImport {
public:
    HostImport(Context& ctx, const void* p, VkDeviceSize size);
    ~HostImport();
    HostImport(const HostImport&) = delete;
    HostImport& operator=(const HostImport&) = delete;
    BufferRange range(VkDeviceSize off, VkDeviceSize n) const { return {buffer_, off, n, nullptr}; }
    VkDeviceAddress address(VkDeviceSize off) const;

private:
    Context& ctx_;
    VkBuffer buffer_ = VK_NULL_HANDLE;
    VkDeviceMemory memory_ = VK_NULL_HANDLE;
};

}  // namespace kiln::vk
