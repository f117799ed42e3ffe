#include "runtime/vulkan/memory.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/platform.h"

namespace kiln::vk {

namespace {
// Blocks made without a reservation double from kFirstBlock to kBlockSize. The newest such block is at most the sum of
// the earlier ones plus kFirstBlock, so the tail it leaves is under half of what those blocks hold plus 1 MiB, and
// reaching T bytes takes about log2(T / 1 MiB) blocks below 256 MiB, then one per 256 MiB. Every large caller
// (an executor's plan, the device loop, host copies of streamed blocks) reserves what it needs, so these blocks hold
// only the small leftovers (selection tables, replay rows): a 1 MiB start keeps that to one small block, where a
// 16 MiB start left most of 16 MiB unused per executor.
constexpr VkDeviceSize kFirstBlock = 1ull << 20;
constexpr VkDeviceSize kBlockSize = 256ull << 20;
constexpr VkDeviceSize kStagingSize = 32ull << 20;
// A reserved block is at most 2 GiB even where maxMemoryAllocationSize allows more: buffers are also limited by
// maxBufferSize (Vulkan 1.3, at least 1 GiB; not queried), and one huge allocation is the likeliest to fail on a
// fragmented heap. Flux's 22 GiB of f16 block weights still take only about a dozen such blocks. Where a reservation
// is split, a request that does not fit one block's tail opens the next, leaving that tail (less than the request).
constexpr VkDeviceSize kMaxReserved = 2048ull << 20;
std::atomic<uint64_t> g_process_bytes{0}, g_process_peak{0}, g_process_allocations{0};

void free_memory(Context& ctx, VkDeviceMemory& m, VkDeviceSize size) {
    if (!m) return;
    vkFreeMemory(ctx.device(), m, nullptr);
    g_process_bytes -= size;
    g_process_allocations--;
    ctx.release_memory(size);
    m = VK_NULL_HANDLE;
}
}  // namespace

uint64_t Allocator::process_bytes() { return g_process_bytes.load(); }
uint64_t Allocator::process_peak_bytes() { return g_process_peak.load(); }
void Allocator::reset_process_peak() { g_process_peak = g_process_bytes.load(); }

Allocator::Allocator(Context& ctx, bool host) : ctx_(ctx), unified_(ctx.info().unified_memory), host_(host) {}

Allocator::~Allocator() {
    VkDevice d = ctx_.device();
    auto free_block = [&](Block& b) {
        if (b.buffer) vkDestroyBuffer(d, b.buffer, nullptr);
        free_memory(ctx_, b.memory, b.memory_size);
    };
    for (auto& b : blocks_) free_block(b);
    free_block(staging_);
}

namespace {
std::string mib(uint64_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f MiB", (double)bytes / (1 << 20));
    return b;
}

std::string hex(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%x", v);
    return b;
}

// ", heap 1: 3.0 of 251.5 GiB in use (budget 250.1 GiB)" from VK_EXT_memory_budget, "" without it.
std::string heap_state(Context& ctx, uint32_t heap) {
    if (!ctx.info().memory_budget) return "";
    VkPhysicalDeviceMemoryBudgetPropertiesEXT mb{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, &mb};
    vkGetPhysicalDeviceMemoryProperties2(ctx.physical(), &mp);
    if (heap >= mp.memoryProperties.memoryHeapCount) return "";
    char b[128];
    std::snprintf(b, sizeof b, ", heap %u: %.1f of %.1f GiB in use (budget %.1f GiB)", heap,
                  (double)mb.heapUsage[heap] / (1ull << 30),
                  (double)mp.memoryProperties.memoryHeaps[heap].size / (1ull << 30),
                  (double)mb.heapBudget[heap] / (1ull << 30));
    return b;
}
}  // namespace

Allocator::Block Allocator::make_block(VkDeviceSize size, MemoryUse use, const char* what) {
    Block b;
    b.size = size;
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = size;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |
               VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    const bool bda = ctx_.info().buffer_device_address;
    if (bda) bi.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
    if (ctx_.info().texel_formats) bi.usage |= VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT;  // linear "tex" views
    ctx_.set_sharing(bi);
    VK_CHECK(vkCreateBuffer(ctx_.device(), &bi, nullptr, &b.buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(ctx_.device(), b.buffer, &req);
    const auto& mp = ctx_.memory_properties();
    std::vector<uint32_t> types = memory_type_order(mp, req.memoryTypeBits, use, req.size);
    // A device without device-local memory types (some virtual GPUs) reads its blocks from host memory.
    if (types.empty() && use == MemoryUse::device)
        types = memory_type_order(mp, req.memoryTypeBits, MemoryUse::host, req.size);
    if (types.empty()) {  // a missing kind of memory (or a heap smaller than the block), not a lack of it
        vkDestroyBuffer(ctx_.device(), b.buffer, nullptr);
        std::string listed;
        for (uint32_t i = 0; i < mp.memoryTypeCount; ++i)
            if (req.memoryTypeBits >> i & 1u) listed += (listed.empty() ? "" : "; ") + describe_memory_type(mp, i);
        KILN_FAIL("device '", ctx_.info().name, "' has no memory type for ", mib(req.size), " of ", what, " (",
                  memory_use_name(use), " memory: ", memory_use_needs(use), "; the buffer may use ",
                  listed.empty() ? "none" : listed, ")");
    }
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    VkMemoryAllocateFlagsInfo fi{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    fi.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    if (bda) ai.pNext = &fi;
    // The context counts what its Allocators hold (and a test hook may cap it). A type whose heap the driver
    // reports full gives way to the next one (system memory after the BAR, the BAR after system memory).
    VkResult r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
    uint32_t type = types[0];
    const bool capped = !ctx_.reserve_memory(req.size);
    std::string tried;  // each type's result, for the error below
    if (!capped) {
        for (uint32_t t : types) {
            type = t;
            ai.memoryTypeIndex = t;
            r = vkAllocateMemory(ctx_.device(), &ai, nullptr, &b.memory);
            tried += (tried.empty() ? "" : "; ") + describe_memory_type(mp, t) + ": " + vk_result_name(r) +
                     heap_state(ctx_, mp.memoryTypes[t].heapIndex);
            if (r != VK_ERROR_OUT_OF_DEVICE_MEMORY && r != VK_ERROR_OUT_OF_HOST_MEMORY) break;
        }
        if (r != VK_SUCCESS) ctx_.release_memory(req.size);
    }
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
        vkDestroyBuffer(ctx_.device(), b.buffer, nullptr);
        // Everything the next device run needs to tell a driver's refusal from Kiln's own: the allocation size the
        // buffer asked for, each type tried with its result and heap, or the test cap; what this allocator and the
        // process hold, in how many allocations; and the open files (a driver may report their exhaustion as this).
        const std::string files = platform::open_files();
        KILN_FAIL_AS(out_of_memory, "out of GPU memory allocating ", mib(size), " for ", what, " (allocationSize ",
                     req.size, " bytes, alignment ", req.alignment, ", memoryTypeBits 0x", hex(req.memoryTypeBits),
                     "; ",
                     capped ? "refused by the test limit KILN_TEST_DEVICE_MEMORY_LIMIT of " +
                                  mib(ctx_.faults().memory_limit.load()) + ", " + mib(ctx_.memory_bytes()) +
                                  " held by this context"
                            : "vkAllocateMemory: " + tried,
                     "; this allocator holds ", mib(bytes_), " in ", blocks_.size(), " blocks on '", ctx_.info().name,
                     "'; Kiln holds ", mib(g_process_bytes.load()), " in ", g_process_allocations.load(),
                     " allocations in this process", files.empty() ? "" : ", " + files, ")");
    }
    VK_CHECK(r);
    b.memory_size = req.size;
    g_process_allocations++;
    const uint64_t now = g_process_bytes += req.size;
    uint64_t peak = g_process_peak.load();
    while (now > peak && !g_process_peak.compare_exchange_weak(peak, now)) continue;
    ctx_.sample_heap_usage();
    VK_CHECK(vkBindBufferMemory(ctx_.device(), b.buffer, b.memory, 0));
    // Mapped (uploads by memcpy, no flushes) only where coherent: a device block that fell back to a host-visible
    // but non-coherent type is staged like device-local memory. KILN_TEST_DISCRETE stages every device block.
    const VkMemoryPropertyFlags hv_hc = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const bool as_gpu = use == MemoryUse::device && ctx_.presented_discrete();
    if ((mp.memoryTypes[type].propertyFlags & hv_hc) == hv_hc && !as_gpu) {
        void* p = nullptr;
        VK_CHECK(vkMapMemory(ctx_.device(), b.memory, 0, VK_WHOLE_SIZE, 0, &p));
        b.mapped = static_cast<uint8_t*>(p);
    }
    return b;
}

VkDeviceSize Allocator::alignment() const { return std::max<VkDeviceSize>(ctx_.info().min_storage_offset_align, 256); }

VkDeviceSize Allocator::footprint(VkDeviceSize size) const {
    const VkDeviceSize align = alignment();
    return (std::max<VkDeviceSize>(size, 4) + align - 1) / align * align;
}

BufferRange Allocator::alloc(VkDeviceSize size, const char* what, bool bindable) {
    const auto& info = ctx_.info();
    KILN_CHECK(!bindable || size <= info.max_storage_buffer_range, what, " needs ", size,
               " bytes in one binding, over this "
               "device's maxStorageBufferRange (",
               info.max_storage_buffer_range, ")");
    const VkDeviceSize align = alignment();
    const VkDeviceSize need = footprint(size);
    size = std::max<VkDeviceSize>(size, 4);
    used_ += need;
    // Every request uses up its share of the reservation, wherever it lands, so a block made for the reservation
    // below holds exactly the requests still to come (each starts aligned, and `need` counts its padding).
    const VkDeviceSize left = reserved_;
    reserved_ -= std::min(reserved_, need);
    for (auto& b : blocks_) {
        VkDeviceSize off = (b.used + align - 1) / align * align;
        if (off + size <= b.size) {
            b.used = off + size;
            return {b.buffer, off, size, b.mapped ? b.mapped + off : nullptr};
        }
    }
    // The largest block the device allows: maxMemoryAllocationSize, and a heap can hold no more than its size.
    VkDeviceSize cap = info.max_allocation ? info.max_allocation : UINT64_MAX;
    if (!host_ && info.device_local_bytes) cap = std::min<VkDeviceSize>(cap, info.device_local_bytes);
    KILN_CHECK(size <= cap, what, ": ", size, " bytes exceed maxMemoryAllocationSize");
    VkDeviceSize bs = need;
    if (left) {
        // Reserved: exactly what is left of the reservation (this request included), up to the cap and kMaxReserved;
        // a remainder past them gets the next block, sized the same way.
        bs = std::max(need, std::min({left, cap, kMaxReserved}));
    } else if (need < kBlockSize / 4) {
        // A request of a quarter block or more gets a block of exactly its size: a shared block opened for it would
        // leave its tail, up to three quarters of it, to whatever small request comes later.
        bs = std::max(next_block_, need);
        next_block_ = std::min(kBlockSize, 2 * next_block_);
    }
    bs = std::min(bs, cap);
    // Unified memory: device-local *and* host-visible, so uploads are memcpy; else device-local.
    Block b = make_block(bs, host_ ? MemoryUse::host : unified_ ? MemoryUse::unified : MemoryUse::device, what);
    bytes_ += bs;
    b.used = size;
    blocks_.push_back(b);
    return {b.buffer, 0, size, b.mapped};
}

void Allocator::staged_copy(const BufferRange& r, void* host, VkDeviceSize size, VkDeviceSize off, bool to_device) {
    // Sized to the largest transfer so far (up to kStagingSize, which larger ones pass through in pieces): a model
    // whose uploads are a few MiB does not hold 32 MiB of staging.
    const VkDeviceSize want = std::min(kStagingSize, std::max<VkDeviceSize>(size, 1ull << 20));
    if (staging_.size < want) {
        if (staging_.buffer) vkDestroyBuffer(ctx_.device(), staging_.buffer, nullptr);
        free_memory(ctx_, staging_.memory, staging_.memory_size);
        staging_ =
            make_block(std::max(want, std::min(kStagingSize, 2 * staging_.size)), MemoryUse::host, "staging buffer");
    }
    auto* h = static_cast<uint8_t*>(host);
    for (VkDeviceSize done = 0; done < size;) {
        VkDeviceSize n = std::min(staging_.size, size - done);
        if (to_device) std::memcpy(staging_.mapped, h + done, n);
        VkCommandBuffer cb = ctx_.begin_one_shot();
        VkBufferCopy c{};
        c.size = n;
        if (to_device) {
            c.dstOffset = r.offset + off + done;
            vkCmdCopyBuffer(cb, staging_.buffer, r.buffer, 1, &c);
        } else {
            c.srcOffset = r.offset + off + done;
            vkCmdCopyBuffer(cb, r.buffer, staging_.buffer, 1, &c);
        }
        VK_CHECK(vkEndCommandBuffer(cb));
        ctx_.submit_wait(cb);
        if (!to_device) std::memcpy(h + done, staging_.mapped, n);
        done += n;
    }
}

void Allocator::upload(const BufferRange& dst, const void* src, VkDeviceSize size, VkDeviceSize dst_offset) {
    KILN_CHECK(dst_offset + size <= dst.size, "upload of ", size, " bytes overruns a ", dst.size, "-byte buffer");
    if (dst.mapped) {
        std::memcpy(dst.mapped + dst_offset, src, size);
        return;
    }
    staged_copy(dst, const_cast<void*>(src), size, dst_offset, true);
}

VkDeviceAddress Allocator::address(const BufferRange& r) const {
    KILN_CHECK(ctx_.info().buffer_device_address, "device '", ctx_.info().name, "' has no bufferDeviceAddress");
    VkBufferDeviceAddressInfo ai{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    ai.buffer = r.buffer;
    return vkGetBufferDeviceAddress(ctx_.device(), &ai) + r.offset;
}

void Allocator::download(const BufferRange& src, void* dst, VkDeviceSize size) {
    KILN_CHECK(size <= src.size, "download of ", size, " bytes overruns a ", src.size, "-byte buffer");
    if (src.mapped) {
        std::memcpy(dst, src.mapped, size);
        return;
    }
    staged_copy(src, dst, size, 0, false);
}

HostImport::HostImport(Context& ctx, const void* p, VkDeviceSize size) : ctx_(ctx) {
    const auto& info = ctx.info();
    KILN_CHECK(info.host_import, "device '", info.name, "' cannot import host memory");
    KILN_CHECK(
        info.host_import_align && (uintptr_t)p % info.host_import_align == 0 && size % info.host_import_align == 0,
        "host import of ", size, " bytes is not aligned to ", info.host_import_align);
    VkDevice d = ctx.device();
    VkExternalMemoryBufferCreateInfo ext{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
    ext.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, &ext};
    bi.size = size;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    if (info.buffer_device_address) bi.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
    if (info.texel_formats) bi.usage |= VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT;  // weights read in place by "tex"
    ctx.set_sharing(bi);
    VK_CHECK(vkCreateBuffer(d, &bi, nullptr, &buffer_));
    auto host_props = reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(
        vkGetDeviceProcAddr(d, "vkGetMemoryHostPointerPropertiesEXT"));
    VkMemoryHostPointerPropertiesEXT hp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d, buffer_, &req);
    VkResult r = host_props ? host_props(d, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, p, &hp)
                            : VK_ERROR_EXTENSION_NOT_PRESENT;
    uint32_t bits = r == VK_SUCCESS ? hp.memoryTypeBits & req.memoryTypeBits : 0, type = 0;
    while (bits && !(bits & 1u << type)) ++type;
    if (!bits || req.size > size) {
        vkDestroyBuffer(d, buffer_, nullptr);
        KILN_FAIL("device '", info.name, "' cannot import this host memory (", vk_result_name(r), ")");
    }
    VkMemoryAllocateFlagsInfo fi{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    fi.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkImportMemoryHostPointerInfoEXT imp{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
                                         info.buffer_device_address ? &fi : nullptr};
    imp.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    imp.pHostPointer = const_cast<void*>(p);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &imp};
    ai.allocationSize = size;
    ai.memoryTypeIndex = type;
    r = vkAllocateMemory(d, &ai, nullptr, &memory_);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(d, buffer_, nullptr);
        KILN_FAIL("device '", info.name, "' cannot import this host memory (", vk_result_name(r), ")");
    }
    VK_CHECK(vkBindBufferMemory(d, buffer_, memory_, 0));
}

HostImport::~HostImport() {
    vkDestroyBuffer(ctx_.device(), buffer_, nullptr);
    vkFreeMemory(ctx_.device(), memory_, nullptr);
}

VkDeviceAddress HostImport::address(VkDeviceSize off) const {
    VkBufferDeviceAddressInfo ai{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    ai.buffer = buffer_;
    return vkGetBufferDeviceAddress(ctx_.device(), &ai) + off;
}

}  // namespace kiln::vk
