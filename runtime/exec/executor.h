#pragma once
// Runs an IR graph on a Vulkan device. Three modes:
//  eager:    one submission per op, waited (the PyTorch-eager analogue, for debugging);
//  full:     every op recorded once, unrolled, into one command buffer; one submission per run;
//  regional: each repeated block kind (Graph regions) recorded once into a secondary command
//            buffer and replayed for every block instance; one submission per run.
// Planning (pipelines, memory, descriptor sets, recording) happens in the constructor; run()
// allocates nothing. Inputs change through buffer contents between runs.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/ir/graph.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/memory.h"

namespace kiln::exec {

enum class Mode { eager, full, regional };
const char* mode_name(Mode m);
Mode parse_mode(const std::string& s);  // "eager" | "full" | "regional"

// How regional mode gives each replayed block instance its weights. offset: the replay binds the range of
// all instances and its shaders read at a per-replay offset (needs the kind's weights to fit one binding);
// device: through device addresses (needs bufferDeviceAddress); copy: copied into a bound window.
// automatic: offset where the kind fits one binding, else device addresses, except on CPU devices (where
// address loads are slow) unless a block weight exceeds maxStorageBufferRange; else copy. A request that
// cannot be met falls back as automatic does. KILN_BLOCK_WEIGHTS=auto|offset|device|copy in the environment
// decides for `automatic`.
enum class BlockWeights { automatic, offset, device, copy };
BlockWeights parse_block_weights(const std::string& s);  // "auto" | "offset" | "device" | "copy"

// Writes the bytes of weight `v` (in v.dtype, v.shape, contiguous) to dst (nbytes long).
using WeightBytesFn = std::function<void(const ir::Value& v, void* dst, size_t nbytes)>;

struct Counters {
    int pipelines = 0;          // pipelines this executor uses (created, or shared by an earlier executor)
    int pipelines_created = 0;  // of those, created by this executor
    int command_buffers_recorded = 0;
    int dispatches_per_run = 0;  // dispatches executed by one run()
    int submissions_per_run = 0;
    int barriers_per_run = 0;
    int copies_per_run = 0;                  // buffer copies (chain values; block weights where copied)
    uint64_t weight_copy_bytes_per_run = 0;  // block weights copied per run (0 when selected on the device)
    int table_updates_per_run = 0;           // address-table writes (vkCmdUpdateBuffer) selecting block weights
    int block_kinds_on_device = 0;           // block kinds whose weights are selected on the device
    int block_kinds_by_offset = 0;           // ... of which by an offset into one bound range (no addresses)
    std::string block_weights_note;          // how block weights are replayed, and why when copied
    double pipeline_ms = 0, plan_ms = 0, record_ms = 0, upload_ms = 0;
    uint64_t activation_bytes_planned = 0, activation_bytes_naive = 0, weight_bytes = 0, device_bytes = 0;
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
             bool profile = false, BlockWeights block_weights = BlockWeights::automatic);
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // Input by name: f32 tensors for f32 inputs; i32 inputs accept i32 or i64 (range-checked).
    void set_input(const std::string& name, const Tensor& t);
    void run();
    Tensor output(const std::string& name) const;  // f32
    const Counters& counters() const;
    Mode mode() const;
    // GPU time of the last run() in ms from timestamp queries (0 when the device has none).
    double last_gpu_ms() const;
    // Host time of the last run() in ms: everything but waiting for the device (recording, submitting).
    double last_host_ms() const;
    // Every figure of the last run().
    const RunStats& last_run() const;
    // Regional mode with profile: GPU ms of every replayed block instance in the last run().
    const std::vector<double>& last_block_ms() const;
    // Eager mode only: GPU ms of each dispatch of the last run(), with its shader name.
    const std::vector<std::pair<std::string, double>>& last_op_ms() const;

    // For programs that run the recorded run() between commands of their own (step_program.h): the device range
    // of graph input or output `name` (dtype: its dtype), the primary command buffer one run() submits, recorded
    // for simultaneous use (null in eager mode), and the executor's allocator (ranges taken from it live as long
    // as the executor; they share its blocks instead of adding one). Defined in step_program.cpp.
    vk::BufferRange device_range(const std::string& name, DType* dtype = nullptr) const;
    VkCommandBuffer run_commands() const;
    vk::Allocator& allocator();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Convenience: plan, run once and return every output (for tests and `kiln forward`).
std::map<std::string, Tensor> run_graph(vk::Context& ctx, const ir::Graph& g, const WeightBytesFn& weights,
                                        const std::map<std::string, Tensor>& inputs, Mode mode = Mode::regional);

}  // namespace kiln::exec
