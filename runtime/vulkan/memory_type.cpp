#include "runtime/vulkan/memory_type.h"

#include <algorithm>
#include <cstdio>

namespace kiln::vk {

namespace {
constexpr VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
// Types Kiln may not allocate from: protected memory needs protected buffers, lazily allocated memory is for
// transient attachments, AMD's device-coherent/uncached types need the deviceCoherentMemory feature and
// RDMA-capable ones externalMemoryRDMA (neither enabled).
constexpr VkMemoryPropertyFlags kExcluded = VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT |
                                            VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD |
                                            VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD |
                                            VK_MEMORY_PROPERTY_RDMA_CAPABLE_BIT_NV;

VkMemoryPropertyFlags required(MemoryUse u) {
    return u == MemoryUse::device ? DL : u == MemoryUse::host ? (HV | HC) : (DL | HV | HC);
}
}  // namespace

const char* memory_use_name(MemoryUse u) {
    return u == MemoryUse::device ? "device" : u == MemoryUse::host ? "host" : "unified";
}

std::string memory_use_needs(MemoryUse u) {
    return u == MemoryUse::device ? "DEVICE_LOCAL"
           : u == MemoryUse::host ? "HOST_VISIBLE|HOST_COHERENT"
                                  : "DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT";
}

std::vector<uint32_t> memory_type_order(const VkPhysicalDeviceMemoryProperties& mp, uint32_t type_bits, MemoryUse use,
                                        VkDeviceSize size) {
    const VkMemoryPropertyFlags need = required(use);
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < mp.memoryTypeCount && i < 32; ++i) {
        const VkMemoryType& t = mp.memoryTypes[i];
        if (!(type_bits >> i & 1u) || (t.propertyFlags & need) != need || (t.propertyFlags & kExcluded)) continue;
        if (t.heapIndex >= mp.memoryHeapCount || mp.memoryHeaps[t.heapIndex].size < size) continue;
        out.push_back(i);
    }
    // The flag a type should not have for this use: host-visible device memory for device blocks, device memory
    // for host blocks (both the BAR). Then the larger heap; then the driver's order (stable).
    const VkMemoryPropertyFlags avoid = use == MemoryUse::device ? HV : use == MemoryUse::host ? DL : 0;
    auto key = [&](uint32_t i) {
        const VkMemoryType& t = mp.memoryTypes[i];
        return std::make_pair((t.propertyFlags & avoid) != 0, ~mp.memoryHeaps[t.heapIndex].size);
    };
    std::stable_sort(out.begin(), out.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
    return out;
}

std::string describe_memory_type(const VkPhysicalDeviceMemoryProperties& mp, uint32_t type) {
    if (type >= mp.memoryTypeCount) return "type " + std::to_string(type) + " (none)";
    const VkMemoryType& t = mp.memoryTypes[type];
    std::string flags;
    const std::pair<VkMemoryPropertyFlags, const char*> names[] = {
        {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "DEVICE_LOCAL"},   {VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "HOST_VISIBLE"},
        {VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "HOST_COHERENT"}, {VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "HOST_CACHED"},
        {VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT, "LAZY"},       {VK_MEMORY_PROPERTY_PROTECTED_BIT, "PROTECTED"}};
    for (auto [bit, name] : names)
        if (t.propertyFlags & bit) flags += (flags.empty() ? "" : "|") + std::string(name);
    char heap[96];
    std::snprintf(heap, sizeof heap, "heap %u of %.1f GiB", t.heapIndex,
                  t.heapIndex < mp.memoryHeapCount ? (double)mp.memoryHeaps[t.heapIndex].size / (1ull << 30) : 0.0);
    return "type " + std::to_string(type) + " (" + (flags.empty() ? "no flags" : flags) + ", " + heap + ")";
}

bool unified_memory(const VkPhysicalDeviceMemoryProperties& mp, VkPhysicalDeviceType type) {
    if (type != VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU && type != VK_PHYSICAL_DEVICE_TYPE_CPU) return false;
    return !memory_type_order(mp, ~0u, MemoryUse::unified).empty();
}

uint64_t device_local_bytes(const VkPhysicalDeviceMemoryProperties& mp) {
    uint64_t best = 0;
    for (uint32_t i = 0; i < mp.memoryHeapCount; ++i)
        if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            best = std::max<uint64_t>(best, mp.memoryHeaps[i].size);
    return best;
}

}  // namespace kiln::vk
