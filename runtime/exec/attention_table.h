#pragma once
// Which attention kernel KILN_ATTENTION=auto runs on a GPU, from measurement rather than vendor names, as the
// linear kernels are chosen (linear_select.h). Per head size and q/k/v storage (f32 or f16) the table holds each
// kernel's time at two sequence lengths (self-attention, 16 heads, batch 1): the scalar flash kernel, the two
// cooperative-matrix flash kernels (coopmat, coopmat4) where the device has cooperative matrices, and the rows kernel
// for f32 q/k/v. A kernel is admitted only if its probe output (an awkward shape: partial query and key tiles)
// matches the CPU reference within the bound docs/attention.md derives; a driver that miscompiles a kernel keeps the
// others. The pick for a node: the fastest admitted kernel that runs it, at the measured length nearest its keys'.
// Measured once per device, driver and Kiln build at the first such node (a few hundred milliseconds on a GPU) and
// kept as text beside the pipeline cache (attention-VENDOR-DEVICE.txt; not kept where that is disabled).
// CPU devices keep the rows kernel without measuring (docs/attention.md: it is several times faster there), and
// lavapipe presented as a GPU (KILN_TEST_DISCRETE) the scalar flash kernel (timing the emulated matrices at these
// lengths would take minutes), unless KILN_TEST_ATTENTION_TABLE_SEQS sets shorter ones: then auto follows the table
// on any device (measured at 2 heads), so lavapipe takes a GPU's path.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/ir/graph.h"
#include "runtime/vulkan/context.h"

namespace kiln::exec {

struct AttentionTable {
    struct Row {
        int64_t head_dim = 0;
        bool f16 = false;  // q, k, v stored f16
        int64_t seq = 0;   // query and key rows
        std::string kernel;
        double ms = 0;  // best time; 0 when not timed (not admitted)
        bool admitted = false;
        std::string note;  // why not admitted (no spaces in the file)
    };
    std::vector<Row> rows;
    std::string source;  // "measured", "loaded <path>"
    // The fastest admitted kernel for (head_dim, f16) at the measured length nearest to seq (log scale) among those
    // `runs` accepts (all where empty); "" when the table has none.
    std::string pick(int64_t head_dim, bool f16, int64_t seq,
                     const std::function<bool(const std::string&)>& runs = {}) const;
};

// An attention node's table key: its head size and whether q, k or v is stored f16.
struct AttentionKey {
    int64_t head_dim;
    bool f16;
};
AttentionKey attention_key(const ir::Graph& g, const ir::Node& n);

// The kernels a table may hold: "flash", "coopmat", "coopmat4", "rows" (KILN_ATTENTION's names).
const std::vector<std::string>& attention_kernels();
// Why kernel k cannot run attention node n on ctx ("" when it can), as choose_attention_flash would lower it.
std::string attention_kernel_unsupported(vk::Context& ctx, const std::string& k, const ir::Graph& g, const ir::Node& n);

// Whether auto consults the table on ctx: a GPU (not a CPU device, nor one presented as a GPU), or any device under
// KILN_TEST_ATTENTION_TABLE_SEQS.
bool attention_table_decides(vk::Context& ctx);
// The sequence lengths measured: 256 and 2048, or KILN_TEST_ATTENTION_TABLE_SEQS's.
std::vector<int64_t> attention_table_seqs(vk::Context& ctx);

// Measures (head_dim, f16) on ctx: each kernel that runs the problem, its probe, then `reps` timed runs after a
// warm-up per length (device timestamps where the device has them, else the host clock).
AttentionTable measure_attention_table(vk::Context& ctx, int64_t head_dim, bool f16, const std::vector<int64_t>& seqs,
                                       int heads = 16, int reps = 3);

// The table file of ctx's device ("" when the pipeline cache is disabled) and its text I/O, keyed as the linear
// table's (device_table_key). read: false with `status` ("missing", "stale", "corrupt: ...").
std::string attention_table_path(vk::Context& ctx);
bool write_attention_table(vk::Context& ctx, const std::string& path, const AttentionTable& t, std::string& why);
bool read_attention_table(vk::Context& ctx, const std::string& path, AttentionTable& t, std::string& status);

// The table of ctx's device with rows for (head_dim, f16): from memory, else the file, else measured now (once per
// process, device and key; then written to the file with the rows of other keys it holds). A measurement that runs
// out of device memory or loses the device (measurement_interrupted) keeps and writes nothing: a warning, and no
// rows for the key in this process (the flash kernel; rows on a CPU device).
AttentionTable attention_table(vk::Context& ctx, int64_t head_dim, bool f16);
// One line on ctx's attention table without measuring (`kiln devices`): on a CPU device that auto runs the rows
// kernel; else where the file is and whether it is loaded, missing or stale, and its pick per head size, storage and
// length.
std::string describe_attention_table(vk::Context& ctx);
// Loads or measures the rows every attention node of g will consult under auto (benchmarks: the first-use
// measurement is not timed as pipeline compilation).
void prepare_attention_table(vk::Context& ctx, const ir::Graph& g);
// Tables measured in this process (tests).
uint64_t attention_table_measurements();

// Test hooks. Probe hook: sees (and may alter) each probe's device output before it is compared. Forget: drops the
// tables held in memory and the keys measured in vain, so the next consult reads the file or measures.
using AttentionProbeHook = std::function<void(const std::string& kernel, std::vector<float>& out)>;
void set_attention_probe_hook(AttentionProbeHook hook);
void forget_attention_tables();

}  // namespace kiln::exec
