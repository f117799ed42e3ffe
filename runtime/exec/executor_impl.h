#pragma once
// Internal to runtime/exec: the executor's state, shared by executor_plan.cpp (planning), dispatches.cpp (dispatches
// and their descriptor sets), record.cpp (recording), executor.cpp (runs), block_weights.cpp (where each replayed block
// instance finds its weights) and the other files of this folder.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/exec/commands.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/regions.h"
#include "runtime/exec/weight_stream.h"
#include "runtime/vulkan/lower.h"
#include "runtime/vulkan/memory.h"
#include "runtime/vulkan/pipeline.h"
#include "runtime/vulkan/traffic.h"

namespace kiln::exec::detail {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
constexpr VkDeviceSize kAlign = 256;
inline VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a = kAlign) { return (x + a - 1) / a * a; }
// Bytes per texel of a uniform texel buffer view of a value of dtype dt: 4-vectors (rgba) or scalars; ggml blocks
// are read as 16-bit words.
inline VkDeviceSize texel_bytes(DType dt, bool rgba) {
    if (dtype_is_quant(dt)) return 2;
    return (dt == DType::f32 ? 4 : 2) * (rgba ? 4 : 1);
}
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
        if (cb) full_barrier(cb);  // a null cb counts barriers only
        writes.clear();
        reads.clear();
        barriers++;
    }
    // A barrier recorded elsewhere (the end of an executed secondary) already orders everything before it.
    void covered() {
        writes.clear();
        reads.clear();
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
    double flops = 0, bytes = 0;               // the cost model of one execution (StepCost)
    double flops_executed = 0;                 // flops x vk::products_per_term
    bool matrix = false;                       // vk::matrix_units
    std::vector<vk::Traffic::Reread> rereads;  // its re-read bindings (vk::Traffic)
};

// One dispatch of a node (row_split.cpp): its lowering, and per binding (node.in..., then the output) the byte
// range of its value's range it binds (size 0: the whole range). A node whose activations fit one binding has one
// part binding everything whole; one that binds a larger value, one part per row chunk.
struct Sub {
    VkDeviceSize off = 0, size = 0;
};
struct Part {
    vk::Dispatch d;
    std::vector<Sub> sub;
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
    StepCost cost;
    std::vector<int> runs_of;  // per dispatch: executions per run, counted while recording
    double copy_bytes = 0;     // per run: bytes buffer copies read and write (chain carries), counted while recording
    std::vector<vk::BufferRange> range;  // per value id; views share their root's range
    std::vector<int> root;
    vk::BufferRange dummy;
    std::vector<BlockKind> blocks;
    // Block weights, per kind: instance i's weights lie in block_arena[k][i] (block_stride[k] bytes), the
    // template's weight j at the same offset block_rel[k][j] in each. Three ways to replay them (Select):
    //  offset: instance i lies in window block_windows[k][window_of[k][i]], each a whole number of instances
    //    in one binding; the template's "_off" dispatches (recorded once per window) bind it whole and read
    //    their weights at the element offsets in their slot of ptr_table (ptr_slot: node -> byte offset),
    //    which the primary rewrites before replay i (ptr_data[k][i] at slot_base[k]);
    //  address (bufferDeviceAddress): the "_ptr" dispatches read their inputs through the device addresses
    //    in their slot, rewritten the same way;
    //  copy: the recording binds block_windows[k][0]; before replay i the primary copies instance i into it.
    // Offset selection, weight-major (weight_arena[k] not empty): where the instances exceed one binding but
    // each weight's instances fit what reads them (a texel view holds more than a storage binding), weight j of
    // every instance lies in weight_arena[k][j] (instance i at i * align_up(its size)) and binding j binds that
    // arena: one recording, no windows. block_arena[k] is then empty.
    enum class Select { copy, address, offset };
    std::vector<std::vector<vk::BufferRange>> block_arena;
    std::vector<std::vector<VkDeviceSize>> block_rel;
    std::vector<VkDeviceSize> block_stride;
    std::vector<std::vector<vk::BufferRange>> block_windows;
    std::vector<std::vector<int>> window_of;
    std::vector<std::vector<vk::BufferRange>> weight_arena;
    std::vector<Select> how;
    bool weight_major(size_t k) const { return !weight_arena[k].empty(); }
    size_t windows(size_t k) const { return weight_major(k) ? 1 : block_windows[k].size(); }
    // The index j of value v among kind k's template weights (v a root), or -1 when v is not one of them.
    int tmpl_weight(size_t k, int v) const {
        const auto& tw = blocks[k].tmpl_weights;
        auto it = std::find(tw.begin(), tw.end(), v);
        return it == tw.end() ? -1 : (int)(it - tw.begin());
    }
    // Offset selection: instance i's weight j, and the range a recording of window w binds for it.
    vk::BufferRange weight_at(size_t k, size_t i, size_t j) const;
    const vk::BufferRange& bound_weight(size_t k, size_t w, size_t j) const {
        return weight_major(k) ? weight_arena[k][j] : block_windows[k][w];
    }
    // The most bytes one bound range of kind k's weight j may hold: what its template readers bind it as (a texel
    // view where every reader's shader takes it as one, else a storage buffer).
    VkDeviceSize weight_binding_limit(const BlockKind& k, size_t j) const;
    bool weight_major_fits(const BlockKind& k) const;
    VkDeviceSize max_binding = 0;  // maxStorageBufferRange, or lower (KILN_MAX_BINDING_RANGE, for tests)
    std::vector<VkDeviceSize> slot_base;
    VkDeviceSize slot_size = 0;
    vk::BufferRange ptr_table;
    std::map<int, VkDeviceSize> ptr_slot;
    std::vector<std::vector<std::vector<uint8_t>>> ptr_data;
    // Streaming under the budget (weight_stream.cpp): block_arena[k] holds only the resident instances.
    Budget budget;
    vk::Allocator host_alloc;
    std::vector<StreamKind> streams;
    struct FileImport {
        std::shared_ptr<const MappedFile> file;
        std::map<uint64_t, std::unique_ptr<vk::HostImport>> chunks;  // by chunk start
        bool failed = false;
    };
    std::vector<FileImport> imports;  // mmapped model files read in place (checked before every run)
    VkDescriptorPool pool = VK_NULL_HANDLE;
    // Uniform texel buffer views of the texel shaders (vk::texel_form_of), by buffer, offset, size and format.
    std::map<std::tuple<VkBuffer, VkDeviceSize, VkDeviceSize, VkFormat>, VkBufferView> texel_views;
    // The view of `br` as texels of a value of dtype dt, 4-vectors (rgba: linear_tex) or scalars (conv2d_tex; ggml
    // words); VK_NULL_HANDLE where the device cannot make it (offset alignment, element count).
    VkBufferView texel_view(const vk::BufferRange& br, DType dt, bool rgba);
    std::vector<DispatchRec> dispatches;  // all recorded dispatches (unrolled or template)
    // Program: a list of steps for the primary command buffer.
    struct Step {
        enum { dispatch, blocks } kind;
        int index;  // dispatch index, or block kind index
    };
    std::vector<Step> program;
    // Per kind and variant: dispatch indices of the template, and its recording. Kinds whose residual stream
    // ping-pongs (ping_pong[k]) have a second recording (parity 1) in which every chain input X and its
    // output Y trade buffers: replay i runs parity i % 2, so instance i reads what i - 1 wrote and nothing is
    // carried. Kinds selected by offset over several windows have one recording (pair) per window.
    std::vector<std::vector<std::vector<int>>> block_dispatches;
    std::vector<std::vector<VkCommandBuffer>> secondaries;
    std::vector<bool> ping_pong;
    // Kinds whose selection slots are kept twice (double_table; the second copy table_half bytes after the first in
    // ptr_table): replay i's recording reads copy i % 2, and its select_advance, recorded first, writes instance
    // i + 1's slots into the other copy while the replay runs, so no barrier separates it from the block's first
    // dispatches. Such a kind has two parities as a ping-pong kind does (the same ones where it ping-pongs too).
    std::vector<bool> double_table;
    VkDeviceSize table_half = 0;
    size_t parities(size_t k) const { return ping_pong[k] || double_table[k] ? 2 : 1; }
    // The byte offset in ptr_table of the slot copy that variant v of kind k reads.
    VkDeviceSize table_copy(size_t k, size_t v) const { return double_table[k] && v % 2 ? table_half : 0; }
    size_t variants(size_t k) const { return parities(k) * (how[k] == Select::offset ? windows(k) : 1); }
    size_t variant(size_t k, size_t i) const {
        return (how[k] == Select::offset ? (size_t)window_of[k][i] : 0) * parities(k) + i % parities(k);
    }
    VkCommandBuffer primary = VK_NULL_HANDLE;
    VkQueryPool queries = VK_NULL_HANDLE;
    uint32_t n_queries = 0;
    BlockWeights select = BlockWeights::automatic;
    bool profile = false, profile_blocks = false;  // timestamps around every replayed block
    bool eager_per_op = false;  // eager mode, ExecOptions::eager_submit "op": one submission per dispatch, waited
    std::vector<double> block_ms;
    VkFence fence = VK_NULL_HANDLE;
    double gpu_ms = 0, host_ms = 0;
    RunStats stats;
    uint64_t last_end_ts = 0;  // device timestamp of the previous run's last submission end (0: none yet)
    std::vector<std::pair<std::string, double>> op_ms;
    std::map<std::string, int> inputs, outputs;

    Impl(vk::Context& cx, const ir::Graph& graph, Mode m)
        : ctx(cx), g(graph), mode(m), alloc(cx), kernels(cx), host_alloc(cx, true) {}
    ~Impl() {
        VkDevice d = ctx.device();
        vkDeviceWaitIdle(d);
        free_run_commands();
        if (batching.sem_seg) vkDestroySemaphore(d, batching.sem_seg, nullptr);
        if (batching.sem_copy) vkDestroySemaphore(d, batching.sem_copy, nullptr);
        for (auto& s : secondaries)
            if (!s.empty()) vkFreeCommandBuffers(d, ctx.pool(), (uint32_t)s.size(), s.data());
        if (pool) vkDestroyDescriptorPool(d, pool, nullptr);
        for (auto& [key, view] : texel_views) vkDestroyBufferView(d, view, nullptr);
        if (advance_pool) vkDestroyDescriptorPool(d, advance_pool, nullptr);
        if (queries) vkDestroyQueryPool(d, queries, nullptr);
        if (fence) vkDestroyFence(d, fence, nullptr);
    }

    int r(int v) const { return v < 0 ? v : root[(size_t)v]; }
    Span span(int v) const {
        const auto& br = range[(size_t)r(v)];
        return {br.buffer, br.offset, br.size};
    }

    void plan(const WeightBytesFn& weights);
    // Weights outside blocks: read in place where they can be; returns the others, whose bytes it reserves in
    // alloc (upload_weights allocates and fills them after plan_activations has reserved its own).
    std::vector<int> plan_weights(const WeightBytesFn& weights, const std::vector<int>& active);
    void upload_weights(const WeightBytesFn& weights, const std::vector<int>& upload);
    // block_weights.cpp
    void fill_weight(const WeightBytesFn& weights, int v, const vk::BufferRange& dst, VkDeviceSize off);
    void plan_block_weights(const WeightBytesFn& weights);
    void reserve_block_weights(const std::string& layout);
    // Offset selection with each weight's instances in one range (weight-major), from the layout setting.
    bool weight_major(const BlockKind& k, Select sel, VkDeviceSize stride, const std::string& layout) const;
    // allow_offset false: a kind with instances outside device memory (streamed, or read in place).
    Select choose_selection(const BlockKind& k, VkDeviceSize stride, std::string& why, bool allow_offset = true);
    void build_ptr_tables();
    void record_block_weights(Recorder& rec, size_t k, size_t i);
    // Replays counted on the device (block_weights.cpp, build_advance): kind k's replays need no primary command
    // between them (no carry copy, no streaming copy, no timestamps), so its recording ends with a barrier and, when
    // its dispatches select weights, starts with a select_advance dispatch (advance_of(k, v), else -1) that writes
    // the next instance's slots into the other slot copy (double_table); the primary then executes all instances in
    // one vkCmdExecuteCommands.
    // KILN_SELECT_ADVANCE=0: per-replay table updates from the primary instead.
    std::vector<bool> replay_array;
    std::vector<int> advance;      // parity 0's (or the only) select_advance of kind k, else -1
    std::vector<int> advance_odd;  // a double_table kind's parity 1 (its write: the other copy), else -1
    int advance_of(size_t k, size_t v) const { return v % parities(k) ? advance_odd[k] : advance[k]; }
    vk::BufferRange advance_rows;  // a counter per kind (kind k's at byte 4 k), then each kind's selection rows
    static VkDeviceSize advance_ctr(size_t k) { return 4 * k; }
    VkDescriptorPool advance_pool = VK_NULL_HANDLE;
    // Decides replay_array and double_table (before the selection table is allocated and dispatches are made).
    void plan_replay_array();
    void build_advance();
    void record_replay_start(Recorder& rec, size_t k);
    bool can_update_in_place(const ir::Region& t, int x, int y) const;
    void plan_chains();
    // True when kind k's chain needs no carry copy (updated in place: its outputs already share its inputs'
    // buffers).
    bool chain_free(size_t k) const {
        for (auto [x, y] : blocks[k].chain)
            if (r(x) != r(y)) return false;
        return true;
    }
    // weight_stream.cpp
    void plan_stream_budget(const std::vector<KindNeed>& needs, const WeightBytesFn& weights);
    void place_block_instances(size_t k, const WeightBytesFn& weights);
    void record_stream(Recorder& rec, size_t k, size_t i, bool after_barrier);
    vk::BufferRange import_weight(const WeightBytesFn& weights, int v);  // empty when not importable
    vk::BufferRange source_weight(size_t k, size_t i, size_t j) const;   // streamed instance i's weight j
    VkDeviceAddress weight_address(size_t k, size_t i, size_t j) const;  // where replay i reads weight j
    vk::BufferRange template_weight(size_t k, size_t j, const vk::BufferRange& window) const;
    // instance i's weights -> dst, recorded into cb
    void record_instance_copy(VkCommandBuffer cb, size_t k, size_t i, const vk::BufferRange& dst);
    // Ring copies in their own batches (copy_queue.cpp; Counters::copy_queue split or transfer). The run is cut
    // into compute segments: every replay of a streamed kind starts one. Each ring copy is a command buffer of its
    // own that waits for the segment whose replay last read its slot (for the first `slots` copies, the previous
    // run's end) and signals sem_copy; a segment waits for the copy its replay reads and signals sem_seg. Batches
    // are kept in an order valid on one queue (a segment's copies before it).
    struct Batch {
        VkCommandBuffer cb;
        bool copy;
        long wait = -1;              // segment: copy index; copy: segment index; -1: none
        bool wait_prev_run = false;  // copy: waits for the previous run's last segment
    };
    struct CopyBatches {
        bool split = false;  // ring copies in batches of their own this recording (else in the one primary)
        vk::CopyQueue queue = vk::CopyQueue::in_step;  // as recorded, with the queue and pool copies use
        VkQueue vkqueue = VK_NULL_HANDLE;
        VkCommandPool pool = VK_NULL_HANDLE;
        std::vector<Batch> batches, pending;  // in submission order; copies recorded for the segment not yet cut
        long seg_wait = -1;                   // the copy the segment being recorded waits for
        long n_segments = 0, n_copies = 0;
        std::vector<std::vector<long>> seg_of, copy_of;  // [kind][streamed index]: its replay's segment, its copy
        VkSemaphore sem_seg = VK_NULL_HANDLE, sem_copy = VK_NULL_HANDLE;
        uint64_t seg_value = 0, copy_value = 0;  // values signalled by the runs submitted so far
    } batching;
    void begin_split();  // at the start of record(): decides split, makes the semaphores
    void cut_segment(Recorder& rec, bool last = false);
    void record_copy_batch(size_t k, long x, const vk::BufferRange& dst);
    void free_run_commands();
    void plan_activations(const std::vector<int>& active);
    std::vector<Part> parts(int n) const;         // row_split.cpp; throws naming the op when it cannot be split
    std::map<int, std::vector<Part>> node_parts;  // per active compute node: one part, or its row chunks
    // Per split-K linear (a part with Dispatch::scratch): its f32 partial sums, in the activation arena, live during
    // the node only (plan_activations); its parts run one after another and share it.
    std::map<int, vk::BufferRange> scratch;
    // Dispatches of node n; each has its own slot of the selection table (ptr_slot[n] + j * slot_size).
    size_t n_parts(int n) const {
        auto it = node_parts.find(n);
        return it == node_parts.end() ? 1 : it->second.size();
    }
    // dispatches.cpp: every active compute node's dispatch records (per row chunk; per variant in block kinds),
    // and the program of the primary command buffer.
    void build_dispatches(const std::vector<int>& active);
    int kind_of(const ir::Node& node) const;  // the block kind of node's region, or -1
    void make_descriptor_pool(const std::vector<int>& active);
    // One dispatch record of node n's part j (of block kind `kind`, or -1); `swap` exchanges the buffers of the
    // kind's chain roots (parity 1 of a ping-pong); `window`: the weight window an off-selecting dispatch binds.
    // Its ids: one, or a split-K linear's two (partial sums, then the reduce).
    std::vector<int> make_dispatch(int n, size_t j, int kind, const std::map<int, int>& swap, size_t window,
                                   VkDeviceSize table_off = 0);
    // record.cpp
    void record();
    void record_eager();  // eager mode: counts what run() records (no command buffer is kept)
    void finish_cost();   // StepCost from runs_of and the counters
    // Eager mode, at run time: every dispatch into cb, a timestamp after each when queries exist.
    void record_eager_run(VkCommandBuffer cb);
    void record_dispatch(Recorder& rec, const DispatchRec& d);
    void make_fence_and_queries();
    void allocate_command_buffers();
    std::vector<std::vector<int>> record_templates();  // the secondaries; returns their barriers [kind][variant]
    void record_replays(Recorder& rec, size_t k, const std::vector<std::vector<int>>& sec_barriers,
                        uint32_t& next_query);   // every instance of kind k, into the primary
    void record_carry(Recorder& rec, size_t k);  // chain outputs -> chain inputs between two replays
};

}  // namespace kiln::exec
