#pragma once
// Which linear kernel (runtime/vulkan/linear_kernels.h: reg, smem64, smem128, coopmat, coopmat128, tex, gemm, gemm128,
// coopmat_sk, gemm_sk)
// each linear node runs on, per device, from measurement rather than vendor names. Only kernels whose declaration
// admits the node on the device are ranked; reg runs every linear and is the fallback. The table holds GFLOP/s of each
// kernel per weight dtype at representative DiT/Flux-like shapes, measured once per device, driver and Kiln build and
// cached as text next to the pipeline cache (pipeline_cache.h; not cached where that is disabled). A kernel is admitted
// for a dtype only if its probe output matches the CPU reference on an awkward shape (partial tiles in M, N and K) and
// the "reg" output at every timed shape: a driver that miscompiles a path we never ran keeps the old one.
// KILN_LINEAR=auto (default) | reg | smem (= smem64) | smem64 | smem128 | coopmat | coopmat128 | tex | gemm | gemm128
// | coopmat_sk | gemm_sk | coopmat2 forces a kernel; a forced kernel applies to the nodes its declaration admits (the
// tiled GEMM: where its tile fits the shared memory for the node's weights; coopmat2: f16 W and x stored f16), the rest
// stay on reg; coopmat, coopmat128, tex or coopmat2 on a device without the feature is an error. A kernel of x stored
// f16 only (coopmat2) is probed and timed on problems of such x, against reg on the same problems.
// KILN_TEST_MAX_SHARED_MEMORY lowers the shared memory every decision here sees. Quantized weights are measured like
// the others (K rounded down to whole blocks; their probe has three blocks per row).
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/exec/device_table.h"
#include "runtime/ir/graph.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/lower.h"

namespace kiln::exec {

struct LinearShape {
    int64_t M, N, K;
};

struct LinearTable {
    struct Row {
        DType dtype;
        std::string variant;
        LinearShape shape;
        double gflops = 0;  // 0 when not timed (not admitted)
        bool admitted = false;
        std::string note;  // why not admitted (no spaces in the file: written with '_')
    };
    std::vector<Row> rows;
    std::string source;  // "measured", "loaded <path>"
    // The fastest admitted variant for weights of dtype dt at the measured shape whose M is nearest to m
    // (log scale), among those `admits` accepts (all where empty); "reg" when none.
    std::string pick(DType dt, int64_t m, const std::function<bool(const std::string&)>& admits = {}) const;
};

// The variants ("reg" first: the reference of the probes), whether one can run on ctx for weights of dtype dt, and
// the default table shapes.
const std::vector<std::string>& linear_variants();
bool linear_variant_available(vk::Context& ctx, const std::string& variant, DType dt);
// Whether the table measures it: available, and on a CPU device only where its declaration says so
// (LinearCaps::cpu_table): not the tiled GEMM's scalar twins (gemm, gemm128, gemm_sk: about 1 GFLOP/s there and up to
// a minute per pipeline to compile), the split-K kernels (more workgroups help a GPU's idle units, not a CPU's
// threads), gemv, nor coopmat2 (a GPU kernel no CPU driver Kiln knows has the features of); the forced tests run them
// there (KILN_LINEAR=gemm still works).
bool linear_variant_timed(vk::Context& ctx, const std::string& variant, DType dt);
const std::vector<LinearShape>& linear_table_shapes();

// Why variant v cannot run linear node n on ctx ("" when it can), from its declaration (vk::linear_kernels()). (A
// "tex" node whose x or W no texel view can cover still falls back to reg, in the executor.)
std::string linear_unsupported(vk::Context& ctx, const std::string& v, const ir::Graph& g, const ir::Node& n);

// Measures a table on ctx: for every dtype and variant, the probe, then `reps` timed runs (after one warm-up) per
// shape; GFLOP/s = 2 M N K / best time (device timestamps where the device has them, else the host clock), runs as
// LinearTiming counts them (`early_exit` off for benchmarks).
LinearTable measure_linear_table(vk::Context& ctx, const std::vector<LinearShape>& shapes,
                                 const std::vector<DType>& dtypes, int reps = 3, bool early_exit = true);

// The table file of ctx's device ("" when the pipeline cache is disabled), and text I/O keyed by the pipeline
// cache key (device, driver, SPIR-V hash). read: false with `status` ("missing", "stale", "corrupt: ...").
std::string linear_table_path(vk::Context& ctx);
bool write_linear_table(vk::Context& ctx, const std::string& path, const LinearTable& t, std::string& why);
bool read_linear_table(vk::Context& ctx, const std::string& path, LinearTable& t, std::string& status);

// One line on the table file of ctx's device, without measuring: where it is, whether it is loaded, missing or
// stale, and per weight dtype it holds the variant picked at each measured row count (for `kiln devices`).
std::string describe_linear_table(vk::Context& ctx);

// The table of ctx's device with rows for weight dtype dt: from memory, else the file, else measured now (once per
// process, device and dtype; then written to the file with the rows of other dtypes it holds). A measurement that
// runs out of device memory or loses the device (measurement_interrupted) keeps and writes nothing: a warning, and
// no rows for dt in this process (reg).
LinearTable linear_table(vk::Context& ctx, DType dt);

// The weight dtypes the table of ctx's device holds (in this process or in its file), without measuring.
std::set<DType> known_linear_dtypes(vk::Context& ctx);
// The table whose pick at 256 rows decides conv2d's and attention's texel-buffer shaders in graph g (a speed
// choice only: their texel and storage-buffer shaders are bitwise equal): f32 where the table already has it,
// else the weight dtype of g's first linear that consults the table (measured for that linear anyway), else a dtype
// the table holds, else f32. So a model whose linears are all f16 measures f16 only.
DType texel_table_dtype(vk::Context& ctx, const ir::Graph& g);

// Loads or measures the table rows every linear of g will consult under KILN_LINEAR=auto, and the rows its conv2d
// and attention nodes follow (texel_table_dtype) (benchmarks: so the first-use measurement is not timed as pipeline
// compilation; it had added 1.7 s to dit-tiny's cold eager compile on a new machine).
void prepare_linear_table(vk::Context& ctx, const ir::Graph& g);

// The kernel linear node n runs on ctx: KILN_LINEAR's where it admits n, else under auto the table's pick among those
// that admit n, else "reg". Throws for a forced coopmat, coopmat128, tex or coopmat2 on a device without the feature.
std::string linear_choice(vk::Context& ctx, const ir::Graph& g, const ir::Node& n);

// Post-lowering pass for linear node n: rewrites d (from vk::lower) to the variant chosen by KILN_LINEAR or the
// table. conv2d and attention nodes take their texel-buffer shaders where the table of texel_table_dtype (or a
// forced KILN_LINEAR) picks "tex" at 256 rows, or as KILN_CONV2D / KILN_ATTENTION = auto|buf|tex says. Other ops are
// left alone.
void choose_linear(vk::Context& ctx, const ir::Graph& g, const ir::Node& n, vk::Dispatch& d);
// Linear node n lowered (d: vk::lower's) on kernel `variant` (a linear_choice result) where its declaration admits n,
// else left on reg. Row chunks take the whole node's choice this way (row_split.cpp): a table that picks another
// kernel at the chunk's fewer rows would sum in another order than the unsplit node.
void choose_linear_as(vk::Context& ctx, const ir::Graph& g, const ir::Node& n, vk::Dispatch& d,
                      const std::string& variant);

// linear_smem dispatches (not coopmat) choose_linear has produced in this process (tests: the forced path ran).
uint64_t linear_smem_dispatches();
// Dispatches choose_linear has rewritten to `variant` (not "reg": nodes left on it are not counted) in this process.
uint64_t linear_kernel_dispatches(const std::string& variant);

// Test hooks. Probe hook: sees (and may alter) each probe's device output before it is compared. Forced
// variant: overrides KILN_LINEAR on this thread while set ("" clears).
using LinearProbeHook = std::function<void(const std::string& variant, DType dt, std::vector<float>& out)>;
void set_linear_probe_hook(LinearProbeHook hook);
void set_linear_override(const std::string& variant);

}  // namespace kiln::exec
