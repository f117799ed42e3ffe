#pragma once
// Runs an IR graph on a Vulkan device. Three modes:
//  eager:    the graph as built, recorded op by op at every run into one command buffer, submitted once (the
//            PyTorch-eager analogue, for debugging; ExecOptions::eager_submit "op": one submission per op, waited);
//  full:     every op recorded once, unrolled, into one command buffer; one submission per run;
//  regional: each repeated block kind (Graph regions) recorded once into a secondary command
//            buffer and replayed for every block instance; one submission per run.
// Planning (pipelines, memory, descriptor sets, recording) happens in the constructor; run()
// allocates nothing. Inputs change through buffer contents between runs. An activation larger than one
// binding (maxStorageBufferRange) is bound in row chunks, one dispatch each, by every op that binds it
// (row-wise ops only; others fail at plan time naming the op; see row_split.cpp).
// Full and regional modes plan the fused graph (ir::fuse: activations in the linear's store, layer_norm +
// modulate, linears of one input in one dispatch; bitwise the same results, fewer dispatches); eager runs the
// graph as built, one dispatch per model op; CPU devices leave linears of one input apart (see executor.cpp).
// The executor's options come from the Context it is given: ctx.settings().exec (ExecOptions, runtime/core/settings.h:
// fusion, f16 activations, block weights and layout, kernel choice). fuse "0" (KILN_FUSE=0) turns fusion off, "all"
// makes every fusion in every mode.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/file_io.h"
#include "runtime/core/tensor.h"
#include "runtime/ir/graph.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/memory.h"
#include "runtime/vulkan/traffic.h"

namespace kiln::exec {

enum class Mode { eager, full, regional };
const char* mode_name(Mode m);
Mode parse_mode(const std::string& s);  // "eager" | "full" | "regional"

// How regional mode gives each replayed block instance its weights. offset: the replay binds the range of
// all instances and its shaders read at a per-replay offset (needs the kind's weights to fit one binding);
// device: through device addresses (needs bufferDeviceAddress); copy: copied into a bound window.
// automatic: offset where the kind fits one binding, else device addresses, except on CPU devices (where
// address loads are slow) unless a block weight exceeds maxStorageBufferRange; else copy. A request that
// cannot be met falls back as automatic does. ExecOptions::block_weights (KILN_BLOCK_WEIGHTS=auto|offset|device|copy)
// decides for `automatic`.
enum class BlockWeights { automatic, offset, device, copy };
BlockWeights parse_block_weights(const std::string& s);  // "auto" | "offset" | "device" | "copy"

// Device memory one executor may use for weights and activations, and how block weights stream when they do not
// fit (see weight_stream.h). bytes 0: the Context's budget (vk::Context::vram_budget(), by default the device's
// memory heap). A budget below the minimum working set (weights outside blocks, activations, two block slots per
// kind) is raised to it with a warning. Streaming applies to regional mode; full and eager keep every weight resident.
struct Budget {
    uint64_t bytes = 0;
    int slots = 0;         // ring slots per streamed block kind (0: 2); prefetch depth is slots - 1
    bool in_place = true;  // unified memory: weights read in host memory where they lie (the mmapped file), no ring
                           // (ExecOptions::stream_in_place 0, KILN_STREAM_IN_PLACE=0, turns it off)
    bool force_in_place = false;  // also block kinds that fit and whose replays would copy (stream_in_place 1)
};
// Parses a byte count with an optional K/M/G/T suffix (powers of 1024): "4G", "512M", "1073741824".
uint64_t parse_bytes(const std::string& s);

// Where weight bytes lie in host memory exactly as the device reads them: `offset` in an mmapped model file.
struct HostBytes {
    std::shared_ptr<const MappedFile> file;  // null: nowhere (converted or computed bytes)
    uint64_t offset = 0;
};

// Writes the bytes of weight `v` (in v.dtype, v.shape, contiguous) to dst (nbytes long). `view`, when set, says
// where they already lie in host memory: on unified memory with VK_EXT_external_memory_host the executor reads
// them there, with no upload copy, and holds the file until it is destroyed.
struct WeightBytesFn : std::function<void(const ir::Value& v, void* dst, size_t nbytes)> {
    using std::function<void(const ir::Value& v, void* dst, size_t nbytes)>::function;
    std::function<HostBytes(const ir::Value& v)> view;
};

struct Counters {
    int pipelines = 0;          // pipelines this executor uses (created, or shared by an earlier executor)
    int pipelines_created = 0;  // of those, created by this executor
    int command_buffers_recorded = 0;
    int dispatches_per_run = 0;  // dispatches executed by one run()
    int nodes_fused = 0;         // IR nodes fusion removed before planning (ir::fuse; 0 when KILN_FUSE=0 or eager)
    int gated_linears = 0;       // of those fusions, gated residuals (mul_add) folded into their linear
    int f16_activations = 0;     // activations stored as f16 (ir::store_f16, KILN_ACT_F16=1)
    int texel_dispatches = 0;    // dispatch records reading x and W through texel buffers (linear "tex")
    uint64_t f16_activation_bytes_saved = 0;
    int submissions_per_run = 0;
    int barriers_per_run = 0;
    int copies_per_run = 0;                  // buffer copies (chain values; block weights where copied)
    uint64_t weight_copy_bytes_per_run = 0;  // block weights copied per run (0 when selected on the device)
    int table_updates_per_run = 0;           // address-table writes (vkCmdUpdateBuffer) selecting block weights
    // vkCmdExecuteCommands in the primary: one per block kind where replays are counted on the device (the
    // recording moves its own selection on, select_advance), else one per replayed instance.
    int executes_per_run = 0;
    int kinds_counted_on_device = 0;   // block kinds replayed by one execute of all their instances
    int block_kinds_on_device = 0;     // block kinds whose weights are selected on the device
    int block_kinds_by_offset = 0;     // ... of which by an offset into one bound range (no addresses)
    int block_kinds_weight_major = 0;  // ... of which weight-major: a bound range per weight (block_weights.cpp)
    std::string block_weights_note;    // how block weights are replayed, and why when copied
    // Streaming under a budget (weight_stream.h): instances kept in device memory, instances in host memory
    // (streamed), ring slots, bytes copied host -> device per run, the budget applied.
    int blocks_resident = 0, blocks_streamed = 0, ring_slots = 0;
    uint64_t streamed_bytes_per_run = 0, budget_bytes = 0, budget_minimum_bytes = 0, host_weight_bytes = 0;
    uint64_t block_weight_bytes = 0;  // all block instances' weights (what streaming divides)
    uint64_t in_place_bytes = 0;      // weights read where they lie in the mmapped model file (no upload)
    uint64_t device_bytes_used = 0;   // device memory the plan uses (device_bytes rounds up to whole blocks)
    std::string stream_note;
    // Where ring copies run (vk::CopyQueue: in_step, split or transfer). split/transfer: the step is cut into
    // compute batches, one per replay of a streamed kind, and every ring copy is a batch of its own, ordered by
    // two timeline semaphores.
    std::string copy_queue = "in_step";
    int compute_batches_per_run = 1, copy_batches_per_run = 0;
    double pipeline_ms = 0, plan_ms = 0, record_ms = 0, upload_ms = 0;
    // Ops binding an activation over maxStorageBufferRange (or KILN_MAX_BINDING_RANGE), split into row chunks: such
    // ops recorded, and the dispatches recorded for them (each recording of a block template counts once).
    int split_ops = 0, split_dispatches = 0;
    uint64_t binding_limit_bytes = 0;  // the limit applied (maxStorageBufferRange, or KILN_MAX_BINDING_RANGE)
    uint64_t activation_bytes_planned = 0, activation_bytes_naive = 0, weight_bytes = 0, device_bytes = 0;
};

// The cost model of one run() (docs/benchmarks.md#the-cost-model), from the dispatches as planned: each dispatch's
// FLOPs (ir::node_flops, a row chunk its share) and the bytes its workgroups read and write as its tiling implies
// (vk::traffic), times how often one run executes it (every replay of a block's recording counts). A model, not a
// measurement.
struct DispatchCost {
    std::string shader;                        // its kShaderTable name; "copy" for the run's buffer copies
    double flops = 0, bytes = 0;               // one execution
    int per_run = 0;                           // executions per run
    std::vector<vk::Traffic::Reread> rereads;  // its bindings read more than once (vk::memory_bytes)
    double flops_executed = 0;                 // flops x the matrix products per term (vk::products_per_term)
    bool matrix = false;                       // on the device's matrix units (vk::matrix_units), else its ALUs
};
struct StepCost {
    double flops = 0, bytes = 0;  // per run: the sum over per_dispatch, copies included (read + written)
    double flops_executed = 0;    // per run: FLOPs as the kernels run them (their operands' f16 splits)
    double bytes_min = 0;         // an ideal plan's traffic, ir::min_bytes of the planned graph
    int dispatches = 0, submits = 0, barriers = 0;
    std::vector<DispatchCost> per_dispatch;  // each recorded dispatch once (per_run 0: recorded, never run)
};

// Figures of one run(), from the host clock and the device's timestamps (device figures are 0 without
// timestamps). Idle is time the device sat between two submissions: waiting for the host.
struct RunStats {
    double gpu_ms = 0;           // device busy: per submission, last timestamp - first, summed
    double host_ms = 0;          // run()'s wall time minus its waits for the device (recording, submitting)
    double host_cpu_ms = 0;      // CPU time of the calling thread in run() (CLOCK_THREAD_CPUTIME_ID)
    double idle_ms = 0;          // device idle between consecutive submissions of this run
    double idle_before_ms = -1;  // device idle since the previous run's last submission (-1: first run)
    int submissions = 0, barriers = 0, dispatches = 0;
};

class Executor {
public:
    // profile: also time every replayed block (timestamps around each replay; see last_block_ms()).
    Executor(vk::Context& ctx, const ir::Graph& g, const WeightBytesFn& weights, Mode mode = Mode::regional,
             bool profile = false, BlockWeights block_weights = BlockWeights::automatic, const Budget& budget = {});
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // Input by name: f32 tensors for f32 inputs; i32 inputs accept i32 or i64 (range-checked).
    void set_input(const std::string& name, const Tensor& t);
    void run();
    Tensor output(const std::string& name) const;  // f32 (an output stored f16 is converted)
    const Counters& counters() const;
    const StepCost& cost() const;  // as recorded (the constructor records)
    // Records the command buffers again, as the constructor did, and returns the time recording took in ms; the
    // counters are unchanged. The first recording (counters().record_ms) finds the driver's code and every
    // pipeline and descriptor cold; this one measures recording itself (kiln bench: record_again_ms). Waits for
    // the device first; not while a caller's program drives this executor (it holds the old command buffer).
    double record_again();
    Mode mode() const;
    // GPU time of the last run() in ms from timestamp queries (0 when the device has none).
    double last_gpu_ms() const;
    // Host time of the last run() in ms: everything but waiting for the device (recording, submitting).
    double last_host_ms() const;
    // Every figure of the last run().
    const RunStats& last_run() const;
    // Regional mode with profile: GPU ms of every replayed block instance in the last run().
    const std::vector<double>& last_block_ms() const;
    // Eager mode only: GPU ms of each dispatch of the last run(), with its shader name. Submitted once per run, a
    // dispatch's time is from the previous dispatch's end to its own (timestamps after each): dispatches that overlap
    // share it out; KILN_EAGER_SUBMIT=op isolates each.
    const std::vector<std::pair<std::string, double>>& last_op_ms() const;

    // For programs that run the recorded run() between commands of their own (commands.h; models/loop/step_program.h):
    // the device range of graph input or output `name` (dtype: its dtype), the primary command buffer one run()
    // submits, recorded for simultaneous use (null in eager mode; the first of its compute batches where ring copies
    // have their own, so submit through submit_run()), and the executor's allocator (ranges taken from it live as
    // long as the executor; they share its blocks instead of adding one).
    vk::BufferRange device_range(const std::string& name, DType* dtype = nullptr) const;
    VkCommandBuffer run_commands() const;
    // Submits one run with `before` and `after` (each may be VK_NULL_HANDLE) around it on the compute queue, fence
    // signalled at its end: one batch, or the compute and copy batches when ring copies have their own (see
    // Counters::copy_queue). A caller's loop submits its iterations through this.
    void submit_run(VkCommandBuffer before, VkCommandBuffer after, VkFence fence);
    vk::Allocator& allocator();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Convenience: plan, run once and return every output (for tests and `kiln forward`).
std::map<std::string, Tensor> run_graph(vk::Context& ctx, const ir::Graph& g, const WeightBytesFn& weights,
                                        const std::map<std::string, Tensor>& inputs, Mode mode = Mode::regional);

}  // namespace kiln::exec
