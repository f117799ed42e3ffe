#pragma once
// The `kiln` subcommands. Each registers its options on the CLI11 app and returns the function
// that runs it (after parsing).
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "apps/component_flags.h"
#include "converter/assemble.h"
#include "include/kiln.h"
#include "runtime/core/file_io.h"
#include "runtime/core/settings.h"
#include "runtime/core/tensor.h"

namespace kiln::app {
using Run = std::function<void()>;
Run add_devices(CLI::App& app);
Run add_info(CLI::App& app);
Run add_forward(CLI::App& app);
Run add_generate(CLI::App& app);
Run add_bench(CLI::App& app);
// kiln bench --kernels (bench_kernels.cpp): shapes "MxNxK" (none: the table's), dtypes "f32,f16,bf16".
void bench_kernels(int device, bool no_pipeline_cache, const std::vector<std::string>& shapes,
                   const std::string& dtypes, int reps);
Run add_tokenize(CLI::App& app);
// kiln serve (cmd_serve.cpp): one resident model behind OpenAI's images API over HTTP.
Run add_serve(CLI::App& app);
// --vram-budget, shared by generate, forward and bench.
inline constexpr const char* kVramBudgetHelp =
    "Device memory for one model's weights and activations (e.g. 4G, 512M; default: the device's memory heap). "
    "Block weights over it stay in host memory and stream into a ring of device slots (regional mode); a budget "
    "below the minimum working set (activations + two block slots) is raised to it with a warning";
// What the device flags shared by generate, forward and bench ask for, over the environment's settings: applied to
// every context the CLI makes (open_context through the C API's options, cli_settings for its own vk::Context).
struct DeviceFlags {
    bool f16_activations = false;  // --f16-activations
    std::string transfer_queue;    // --transfer-queue 0|1|split ("": the environment's)
    std::string precision;         // --precision exact|fast ("": the environment's)
};
inline DeviceFlags& device_flags() {
    static DeviceFlags f;
    return f;
}
// --f16-activations, shared by generate, forward and bench.
inline void add_f16_activations_flag(CLI::App& app) {
    app.add_flag_callback(
        "--f16-activations", [] { device_flags().f16_activations = true; },
        "Store activations only linears read (a transformer MLP's 4x-wide hidden, the modulated norms; on a GPU also "
        "attention's q, k, v and output) as f16, accumulating in f32: those buffers halve, and on a GPU the "
        "cooperative-matrix linears run one product instead of two; outputs move by about 3e-4 relative (as "
        "KILN_ACT_F16=1)");
}
// --precision, shared by generate, forward and bench.
inline void add_precision_option(CLI::App& app) {
    app.add_option_function<std::string>(
           "--precision", [](const std::string& v) { device_flags().precision = v; },
           "Operands of the cooperative-matrix kernels (linear and attention on GPUs that have them): exact = each "
           "split into two f16 parts, results as f32 arithmetic gives (default); fast = each rounded to one f16, "
           "accumulating in f32: half the matrix operations (a third with quantized weights), outputs move by about "
           "1e-3 relative, as f16 inference does (as KILN_PRECISION; docs/precision.md)")
        ->check(CLI::IsMember({"exact", "fast"}));
}
// --transfer-queue, shared by generate, forward and bench.
inline void add_transfer_queue_option(CLI::App& app) {
    app.add_option_function<std::string>(
           "--transfer-queue", [](const std::string& v) { device_flags().transfer_queue = v; },
           "Where streamed block weights are copied into their ring slots: 0 = inside the step's compute "
           "submission (default); 1 = on the device's transfer-only queue (DMA engine) beside compute, in batches "
           "ordered by timeline semaphores (devices without one keep 0; not yet run on such a GPU); split = those "
           "batches on the compute queue (as KILN_TRANSFER_QUEUE)")
        ->check(CLI::IsMember({"0", "1", "split"}));
}
// The CLI goes through libkiln's C API: a failed call throws kiln::Error with kiln_last_error().
void capi_check(kiln_status s);
struct ContextDel {
    void operator()(kiln_context* c) const { kiln_context_destroy(c); }
};
struct ModelDel {
    void operator()(kiln_model* m) const { kiln_model_destroy(m); }
};
struct ResultDel {
    void operator()(kiln_result* r) const { kiln_result_destroy(r); }
};
using ContextPtr = std::unique_ptr<kiln_context, ContextDel>;
using ModelPtr = std::unique_ptr<kiln_model, ModelDel>;
using ResultPtr = std::unique_ptr<kiln_result, ResultDel>;
// Tensors cross the C API as kiln_tensor views (never quantized): a host tensor's kiln_dtype, and a view copied.
kiln_dtype c_dtype(DType d);
Tensor tensor_of(const kiln_tensor& t);
// A context on device `device` (-1: KILN_DEVICE or the best; vram_budget 0: the device heap), and a model opened on it.
ContextPtr open_context(int device, uint64_t vram_budget = 0);
ModelPtr open_model(kiln_context* ctx, const std::string& path);
// The component files besides --model (apps/component_flags.h registers them; model and hf_home unused here).
using ComponentFlags = converter::ComponentFiles;
// The model the flags name: `model` alone (a Kiln file, a diffusers folder, "synthetic:NAME") opens as it is; a single
// file in another layout, or any component flag, assembles a pipeline (converter/assemble.h).
struct ModelSpec {
    std::string model;  // --model as given
    ComponentFlags parts;
    bool assembled() const;
    std::string display() const;  // for messages and the image's metadata: the files given
};
ModelPtr open_model(kiln_context* ctx, const ModelSpec& spec);
// What the assembly of an assembled spec takes (the Hugging Face cache from the environment's settings).
converter::ComponentFiles component_files(const ModelSpec& spec);
// Ctrl-C: generate's progress callbacks stop at the next step boundary once it has been pressed.
void install_interrupt_handler();
bool interrupted();
// The built-in default model (the trained dit-digits pipeline that ships with Kiln), or KILN_DEFAULT_MODEL.
std::string default_model();
// The settings of a vk::Context the CLI makes itself (bench, devices, generate --profile): the environment table
// (runtime/core/settings.h) read at this edge, with device_flags() over it; device >= 0 wins over KILN_DEVICE.
Settings cli_settings(int device = -1);
}  // namespace kiln::app
