// Memory type choice (runtime/vulkan/memory_type.h) on device memory-property profiles, without their devices:
// NVIDIA's discrete layout (the H200 of ../shared/gpu-runs/2026-11-27-h200: 140.4 GiB of VRAM; a 256 MiB BAR heap,
// or ReBAR), AMD's with device-coherent types, lavapipe, an integrated GPU and a mobile one.
#include <catch2/catch.hpp>
#include <initializer_list>
#include <utility>

#include "runtime/vulkan/memory_type.h"

using namespace kiln;
using vk::MemoryUse;

namespace {
constexpr VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CACHED = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
constexpr uint64_t GiB = 1ull << 30, MiB = 1ull << 20;

VkPhysicalDeviceMemoryProperties profile(std::initializer_list<std::pair<uint64_t, bool>> heaps,
                                         std::initializer_list<std::pair<VkMemoryPropertyFlags, uint32_t>> types) {
    VkPhysicalDeviceMemoryProperties mp{};
    for (auto [size, device_local] : heaps)
        mp.memoryHeaps[mp.memoryHeapCount++] = {size,
                                                device_local ? (VkMemoryHeapFlags)VK_MEMORY_HEAP_DEVICE_LOCAL_BIT : 0u};
    for (auto [flags, heap] : types) mp.memoryTypes[mp.memoryTypeCount++] = {flags, heap};
    return mp;
}

using Order = std::vector<uint32_t>;
Order order(const VkPhysicalDeviceMemoryProperties& mp, MemoryUse u, VkDeviceSize size = MiB, uint32_t bits = ~0u) {
    return vk::memory_type_order(mp, bits, u, size);
}

// NVIDIA on Linux (types as vulkaninfo lists them on GeForce and data-center parts): heap 0 VRAM, heap 1 system
// memory, heap 2 the BAR window (256 MiB; with ReBAR as large as VRAM).
VkPhysicalDeviceMemoryProperties nvidia(uint64_t bar) {
    return profile({{143771 * MiB, true}, {251 * GiB, false}, {bar, true}},
                   {{0, 1}, {DL, 0}, {DL, 0}, {HV | HC, 1}, {HV | HC | CACHED, 1}, {DL | HV | HC, 2}});
}
}  // namespace

TEST_CASE("memory types: NVIDIA discrete (the H200), BAR heap of 256 MiB and ReBAR", "[jit][memory]") {
    for (uint64_t bar : {256 * MiB, 143771 * MiB}) {
        INFO("BAR heap " << bar / MiB << " MiB");
        const auto mp = nvidia(bar);
        // Device blocks in VRAM; the BAR type only after both VRAM types.
        CHECK(order(mp, MemoryUse::device) == Order{1, 2, 5});
        // Staging and host copies in system memory; the BAR after it, never before.
        CHECK(order(mp, MemoryUse::host) == Order{3, 4, 5});
        CHECK(!vk::unified_memory(mp, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU));
        // The VRAM, not VRAM + BAR (a window into the same memory).
        CHECK(vk::device_local_bytes(mp) == 143771 * MiB);
        // The buffer's memoryTypeBits rule: without type 3, the cached system type comes first.
        CHECK(order(mp, MemoryUse::host, MiB, (1u << 4) | (1u << 5)) == Order{4, 5});
    }
    // A block larger than the 256 MiB BAR heap never goes there.
    CHECK(order(nvidia(256 * MiB), MemoryUse::host, 512 * MiB) == Order{3, 4});
    CHECK(order(nvidia(256 * MiB), MemoryUse::device, 512 * MiB) == Order{1, 2});
    // A block larger than any heap: no type (a plan error, not out of memory).
    CHECK(order(nvidia(256 * MiB), MemoryUse::device, 300 * GiB).empty());
}

TEST_CASE("memory types: AMD discrete, device-coherent types left out", "[jit][memory]") {
    const auto coherent = VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD | VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD;
    const auto mp = profile({{16 * GiB, true}, {31 * GiB, false}, {256 * MiB, true}}, {{DL, 0},
                                                                                       {HV | HC, 1},
                                                                                       {DL | HV | HC, 2},
                                                                                       {HV | HC | CACHED, 1},
                                                                                       {DL | coherent, 0},
                                                                                       {HV | HC | coherent, 1},
                                                                                       {DL | HV | HC | coherent, 2}});
    CHECK(order(mp, MemoryUse::device) == Order{0, 2});
    CHECK(order(mp, MemoryUse::host) == Order{1, 3, 2});
    CHECK(vk::device_local_bytes(mp) == 16 * GiB);
}

TEST_CASE("memory types: lavapipe, integrated and mobile GPUs are unified", "[jit][memory]") {
    SECTION("lavapipe: one heap, one type for everything") {
        const auto mp = profile({{8 * GiB, true}}, {{DL | HV | HC | CACHED, 0}});
        CHECK(vk::unified_memory(mp, VK_PHYSICAL_DEVICE_TYPE_CPU));
        CHECK(order(mp, MemoryUse::unified) == Order{0});
        CHECK(order(mp, MemoryUse::host) == Order{0});
        CHECK(order(mp, MemoryUse::device) == Order{0});
    }
    SECTION("integrated GPU (Intel, AMD APU): device-local, host-visible types on one heap") {
        const auto mp = profile({{16 * GiB, true}}, {{DL, 0}, {DL | HV | HC, 0}, {DL | HV | HC | CACHED, 0}});
        CHECK(vk::unified_memory(mp, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU));
        CHECK(order(mp, MemoryUse::unified) == Order{1, 2});
        CHECK(order(mp, MemoryUse::host) == Order{1, 2});
    }
    SECTION("mobile GPU (Adreno, Mali): a non-coherent cached type, lazily allocated and protected memory") {
        const auto mp = profile({{6 * GiB, true}}, {{DL, 0},
                                                    {DL | HV | HC, 0},
                                                    {DL | HV | CACHED, 0},
                                                    {DL | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT, 0},
                                                    {DL | VK_MEMORY_PROPERTY_PROTECTED_BIT, 0}});
        CHECK(vk::unified_memory(mp, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU));
        CHECK(order(mp, MemoryUse::unified) == Order{1});  // coherent only: uploads are plain memcpy
        CHECK(order(mp, MemoryUse::host) == Order{1});
        CHECK(order(mp, MemoryUse::device) == Order{0, 1, 2});  // never lazily allocated or protected memory
    }
    SECTION("a discrete GPU with ReBAR is not unified") {
        CHECK(!vk::unified_memory(nvidia(143771 * MiB), VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU));
    }
}

TEST_CASE("memory types: a device without host-coherent memory has no staging type", "[jit][memory]") {
    // Only a non-coherent host-visible type: Kiln maps only coherent memory, so no host blocks (the allocator
    // reports the missing type in one line, never as out of memory).
    const auto mp = profile({{4 * GiB, true}, {8 * GiB, false}}, {{DL, 0}, {HV | CACHED, 1}});
    CHECK(order(mp, MemoryUse::host).empty());
    CHECK(!vk::unified_memory(mp, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU));
    CHECK(vk::memory_use_needs(MemoryUse::host) == "HOST_VISIBLE|HOST_COHERENT");
    CHECK(vk::describe_memory_type(mp, 1) == "type 1 (HOST_VISIBLE|HOST_CACHED, heap 1 of 8.0 GiB)");
}
