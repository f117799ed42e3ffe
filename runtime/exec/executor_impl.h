#pragma once
// Internal to runtime/exec: the executor's state, shared by executor.cpp (planning, recording, runs)
// and block_weights.cpp (where each replayed block instance finds its weights).
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "runtime/exec/executor.h"
#include "runtime/exec/regions.h"
#include "runtime/vulkan/lower.h"
#include "runtime/vulkan/memory.h"
#include "runtime/vulkan/pipeline.h"

namespace kiln::exec::detail {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
constexpr VkDeviceSize kAlign = 256;
inline VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a = kAlign) { return (x + a - 1) / a * a; }
inline VkDeviceSize value_bytes(const ir::Value& v) {
    return (VkDeviceSize)dtype_nbytes(v.dtype, shape_numel(v.shape));
}

struct Span {
    VkBuffer b;
    VkDeviceSize off, size;
    bool overlaps(const Span& o) const { return b == o.b && off < o.off + o.size && o.off < off + size; }
};

// Records into one command buffer, inserting a memory barrier only where an access conflicts with
// a write (RAW, WAW) or a read (WAR) made since the last barrier.
struct Recorder {
    VkCommandBuffer cb;
    std::vector<Span> writes, reads;
    int barriers = 0;
    void barrier() {
        VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                           VK_ACCESS_TRANSFER_WRITE_BIT;
        VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
        vkCmdPipelineBarrier(cb, st, st, 0, 1, &mb, 0, nullptr, 0, nullptr);
        writes.clear();
        reads.clear();
        barriers++;
    }
    void access(const std::vector<Span>& r, const std::vector<Span>& w) {
        bool need = false;
        for (auto& x : r)
            for (auto& y : writes) need |= x.overlaps(y);
        for (auto& x : w) {
            for (auto& y : writes) need |= x.overlaps(y);
            for (auto& y : reads) need |= x.overlaps(y);
        }
        if (need) barrier();
        reads.insert(reads.end(), r.begin(), r.end());
        writes.insert(writes.end(), w.begin(), w.end());
    }
};

struct DispatchRec {
    const vk::Kernel* kernel;
    VkDescriptorSet set;
    vk::Dispatch d;
    std::vector<Span> reads, writes;
};

}  // namespace kiln::exec::detail

namespace kiln::exec {
using namespace detail;

struct Executor::Impl {
    vk::Context& ctx;
    ir::Graph g;
    Mode mode;
    vk::Allocator alloc;
    vk::Kernels kernels;
    Counters c;
    std::vector<vk::BufferRange> range;  // per value id; views share their root's range
    std::vector<int> root;
    vk::BufferRange dummy;
    std::vector<BlockKind> blocks;
    // Block weights, per kind: instance i's weights lie in block_arena[k][i] (block_stride[k] bytes), the
    // template's weight j at the same offset block_rel[k][j] in each. Two ways to replay them:
    //  on the device (bufferDeviceAddress): the template's "_ptr" dispatches (ptr_slot: node -> byte
    //    offset in ptr_table) read their inputs through the device addresses in their slot; before replay
    //    i the primary writes instance i's addresses (ptr_data[k][i], slot_base[k] in ptr_table);
    //  copied: the recording binds block_window[k]; before replay i the primary copies instance i into it.
    std::vector<std::vector<vk::BufferRange>> block_arena;
    std::vector<std::vector<VkDeviceSize>> block_rel;
    std::vector<VkDeviceSize> block_stride;
    std::vector<vk::BufferRange> block_window;  // copied kinds only
    std::vector<bool> on_device;
    std::vector<VkDeviceSize> slot_base;
    VkDeviceSize slot_size = 0;
    vk::BufferRange ptr_table;
    std::map<int, VkDeviceSize> ptr_slot;
    std::vector<std::vector<std::vector<uint8_t>>> ptr_data;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    std::vector<DispatchRec> dispatches;  // all recorded dispatches (unrolled or template)
    // Program: a list of steps for the primary command buffer.
    struct Step {
        enum { dispatch, blocks } kind;
        int index;  // dispatch index, or block kind index
    };
    std::vector<Step> program;
    std::vector<std::vector<int>> block_dispatches;  // per kind: dispatch indices of the template
    VkCommandBuffer primary = VK_NULL_HANDLE;
    std::vector<VkCommandBuffer> secondaries;
    VkQueryPool queries = VK_NULL_HANDLE;
    uint32_t n_queries = 0;
    BlockWeights select = BlockWeights::automatic;
    bool profile = false, profile_blocks = false;  // timestamps around every replayed block
    std::vector<double> block_ms;
    VkFence fence = VK_NULL_HANDLE;
    double gpu_ms = 0, host_ms = 0;
    RunStats stats;
    uint64_t last_end_ts = 0;  // device timestamp of the previous run's last submission end (0: none yet)
    std::vector<std::pair<std::string, double>> op_ms;
    std::map<std::string, int> inputs, outputs;

    Impl(vk::Context& cx, const ir::Graph& graph, Mode m) : ctx(cx), g(graph), mode(m), alloc(cx), kernels(cx) {}
    ~Impl() {
        VkDevice d = ctx.device();
        vkDeviceWaitIdle(d);
        if (primary) vkFreeCommandBuffers(d, ctx.pool(), 1, &primary);
        if (!secondaries.empty()) vkFreeCommandBuffers(d, ctx.pool(), (uint32_t)secondaries.size(), secondaries.data());
        if (pool) vkDestroyDescriptorPool(d, pool, nullptr);
        if (queries) vkDestroyQueryPool(d, queries, nullptr);
        if (fence) vkDestroyFence(d, fence, nullptr);
    }

    int r(int v) const { return v < 0 ? v : root[(size_t)v]; }
    Span span(int v) const {
        const auto& br = range[(size_t)r(v)];
        return {br.buffer, br.offset, br.size};
    }

    void plan(const WeightBytesFn& weights);
    void plan_weights(const WeightBytesFn& weights, const std::vector<int>& active);
    // block_weights.cpp
    void fill_weight(const WeightBytesFn& weights, int v, const vk::BufferRange& dst, VkDeviceSize off);
    void plan_block_weights(const WeightBytesFn& weights);
    bool can_select_on_device(const BlockKind& k, std::string& why);
    void build_ptr_tables();
    void record_block_weights(Recorder& rec, size_t k, size_t i);
    void plan_activations(const std::vector<int>& active);
    void build_dispatches(const std::vector<int>& active);
    void record();
    void record_dispatch(Recorder& rec, const DispatchRec& d);
};

}  // namespace kiln::exec
