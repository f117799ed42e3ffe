#pragma once
// Which Vulkan memory type a block goes to: a pure function of the device's VkPhysicalDeviceMemoryProperties,
// tested with device profiles (lavapipe, NVIDIA's discrete layout with its 256 MiB BAR heap or ReBAR, integrated
// and mobile GPUs, AMD's device-coherent types) in tests/jit/test_memory_type.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/vulkan/context.h"

namespace kiln::vk {

enum class MemoryUse {
    device,   // device blocks of a discrete GPU: DEVICE_LOCAL, uploads staged
    host,     // staging and host copies of streamed weights: HOST_VISIBLE | HOST_COHERENT, mapped
    unified,  // device blocks where the device's own memory is host-visible: DEVICE_LOCAL | HOST_VISIBLE | COHERENT
};
const char* memory_use_name(MemoryUse u);

// The memory types (indices) a block of `size` bytes for `use` may be allocated from, best first; `type_bits` is
// VkMemoryRequirements::memoryTypeBits. Types that need something Kiln does not enable (PROTECTED,
// LAZILY_ALLOCATED, AMD's DEVICE_COHERENT / DEVICE_UNCACHED) and types whose heap is smaller than `size` are left
// out. Order:
//   device: DEVICE_LOCAL without HOST_VISIBLE first (the BAR window, 256 MiB without ReBAR, is for what the host
//           writes), larger heap first; then DEVICE_LOCAL | HOST_VISIBLE.
//   host: HOST_VISIBLE | HOST_COHERENT in system memory first (not DEVICE_LOCAL: a small BAR heap fills up), larger
//         heap first; then the device-local ones (the BAR; all there is on unified devices).
//   unified: DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT, larger heap first.
// A later entry is what the allocator tries when the driver reports the earlier one's heap out of memory. Empty
// when the device has no type for `use` at all (a missing feature, not a lack of memory).
std::vector<uint32_t> memory_type_order(const VkPhysicalDeviceMemoryProperties& mp, uint32_t type_bits, MemoryUse use,
                                        VkDeviceSize size = 0);

// The flags `use` requires, as text ("HOST_VISIBLE|HOST_COHERENT"), for messages.
std::string memory_use_needs(MemoryUse use);
// One type as text: "type 3 (HOST_VISIBLE|HOST_COHERENT, heap 1 of 251.5 GiB)".
std::string describe_memory_type(const VkPhysicalDeviceMemoryProperties& mp, uint32_t type);

// Whether device blocks are host-visible device memory (MemoryUse::unified): integrated and CPU devices with a
// DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT type. Discrete GPUs keep device-local blocks (and staging) even
// with ReBAR: reads by the host through the BAR are uncached.
bool unified_memory(const VkPhysicalDeviceMemoryProperties& mp, VkPhysicalDeviceType type);

// The device's memory for planning (DeviceInfo::device_local_bytes): the largest DEVICE_LOCAL heap. Not the sum:
// a BAR heap is a window into the same VRAM.
uint64_t device_local_bytes(const VkPhysicalDeviceMemoryProperties& mp);

}  // namespace kiln::vk
