#pragma once
// Execution and device settings, passed explicitly: a vk::Context is made from a Settings and carries it
// (Context::settings()); executors, pipelines and the device loop read their options there. The environment is read
// in one place, settings_from_env(), from the table below (docs/settings.md lists it); only the edges call it: the
// kiln CLI, the C API's kiln_context_create, kiln-convert and the tests' support code.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

struct Settings;

// Made when a vk::Context is made (device choice, validation, queues, pipeline cache).
struct ContextOptions {
    int device = -1;                   // KILN_DEVICE: a device index; -1: the best (discrete > integrated > ...)
    bool validation = false;           // KILN_VALIDATION: Vulkan validation layers, every message counted
    bool validation_sync = true;       // KILN_VALIDATION_SYNC: with validation, synchronization validation too
    bool validation_gpu = false;       // KILN_VALIDATION_GPU: with validation, GPU-assisted validation too
    std::string transfer_queue = "0";  // KILN_TRANSFER_QUEUE: "0", "1" or "split" (vk::CopyQueue)
    // KILN_PIPELINE_CACHE: false: neither the pipeline cache file nor the linear table beside it is read or written.
    bool pipeline_cache = true;
    // This Context only (kiln bench --no-pipeline-cache, kiln devices): no pipeline cache file; the linear table is
    // still read and written. Not in the environment table.
    bool skip_pipeline_cache_file = false;
    // KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln: where the pipeline cache and the linear
    // table live ("": nowhere, nothing persisted).
    std::string cache_dir;
    int pipeline_threads = 0;  // KILN_PIPELINE_THREADS: threads compiling pipelines, 1 to 256; 0: one per core
    // KILN_VULKAN_LOADER: the Vulkan loader library to load ("": the platform's, e.g. libvulkan.so.1). Read by the
    // first context or device list of the process that finds a loader (runtime/vulkan/loader.h).
    std::string vulkan_loader;
};

// Read by each executor when it is made (runtime/exec/executor.h).
struct ExecOptions {
    std::string fuse = "1";              // KILN_FUSE: "0" none, "1" full/regional modes, "all" every fusion and mode
    bool act_f16 = false;                // KILN_ACT_F16: linear-to-linear activations stored as f16
    std::string block_weights = "auto";  // KILN_BLOCK_WEIGHTS: auto|offset|device|copy, for BlockWeights::automatic
    int stream_in_place = -1;            // KILN_STREAM_IN_PLACE: 0 off, 1 also kinds that fit; -1: Budget decides
    std::string block_layout = "auto";   // KILN_BLOCK_LAYOUT: auto|block|weight (block_weights.cpp)
    bool select_advance = true;          // KILN_SELECT_ADVANCE: replays counted on the device (regional mode)
    bool level_order = true;             // KILN_LEVEL_ORDER: full / regional record by level (ir::order_by_level)
    std::string eager_submit = "step";   // KILN_EAGER_SUBMIT: eager mode submits once per run (step) or per op (op)
    std::string linear =
        "auto";  // KILN_LINEAR: auto|reg|smem|smem64|smem128|coopmat|coopmat128|tex|gemm|gemm128|coopmat2
    std::string conv2d = "auto";      // KILN_CONV2D: auto|buf|tex
    std::string attention = "auto";   // KILN_ATTENTION: auto|coopmat4|coopmat|flash|rows|buf|tex
    std::string precision = "exact";  // KILN_PRECISION: exact|fast (the cooperative-matrix kernels' operands)
};

// TEST-ONLY: fault injection and device limits smaller than the device's, so that tests reach paths a real device
// rarely takes. Zero / -1 / null: off. Never needed in normal use.
struct TestHooks {
    uint64_t device_memory_limit = 0;  // KILN_TEST_DEVICE_MEMORY_LIMIT: bytes a Context's allocators may hold
    int64_t device_lost_after = -1;    // KILN_TEST_DEVICE_LOST_AFTER: submissions before the device is "lost"
    uint32_t max_storage_buffers = 0;  // KILN_TEST_MAX_STORAGE_BUFFERS: lowers maxPerStageDescriptorStorageBuffers
    uint32_t max_texel_elements = 0;   // KILN_TEST_MAX_TEXEL_ELEMENTS: lowers maxTexelBufferElements
    uint32_t max_shared_memory = 0;  // KILN_TEST_MAX_SHARED_MEMORY: lowers what flash attention and GEMM tiles may use
    uint64_t max_binding_range = 0;  // KILN_MAX_BINDING_RANGE: lowers maxStorageBufferRange for executors
    uint32_t attention_lanes = 0;    // KILN_TEST_ATTENTION_LANES: lanes per row of coopmat4 attention's softmax
    // KILN_TEST_ATTENTION_TABLE_SEQS: the attention table's lengths (exec/attention_table.h), measured at 2 heads on
    // any device, CPU devices included, so that lavapipe takes a GPU's auto attention. Empty: off.
    std::vector<int64_t> attention_table_seqs;
    int convert_delay_ms = 0;     // KILN_TEST_CONVERT_DELAY_MS: kiln-convert pauses after each tensor
    int serve_step_delay_ms = 0;  // KILN_TEST_SERVE_STEP_DELAY_MS: kiln serve's jobs pause after each step
    // KILN_TEST_DISCRETE: the Context presents its device as a discrete GPU without unified memory (device-local
    // blocks unmapped, uploads staged), so that a CPU device takes a GPU's choices (vk::Context::init).
    bool discrete = false;
    // When set, Context::settings() answers live() instead of the settings the Context was made with (what the
    // Context made at construction stays). tests/support sets it to settings_from_env, so that a test may change a
    // KILN_* variable around one executor while sharing a Context. The library, the CLI and the converter never do.
    Settings (*live)() = nullptr;
};

struct Settings {
    ContextOptions context;
    ExecOptions exec;
    bool device_loop = true;    // KILN_DEVICE_LOOP: the pipelines' step loop on the device where supported (models/)
    std::string default_model;  // KILN_DEFAULT_MODEL: the kiln CLI's model when --model is not given ("": built-in)
    // HF_HOME, else $XDG_CACHE_HOME/huggingface, else $HOME/.cache/huggingface (as huggingface_hub resolves it):
    // where the published models' tokenizers are looked for (hub/models--<org>--<name>/snapshots/*). "": nowhere.
    std::string hf_home;
    TestHooks test;
};

// One row of the table: a variable, its type and default as documented, what it sets, whether it is a test hook, and
// the parser that writes it into a Settings (throws kiln::Error naming the variable and the accepted values).
struct SettingInfo {
    const char* name;
    const char* type;  // "bool", "int", "bytes", "choice: a|b|c", "path"
    const char* default_value;
    const char* effect;
    bool test_only;
    void (*apply)(Settings& s, const char* name, const std::string& value);  // name: this row's, for errors
};
const std::vector<SettingInfo>& settings_table();

// Settings from a lookup of variable names (null or "": unset, the default): each row of the table applied in order.
// A bad value throws kiln::Error: "KILN_FUSE='2': expected 0, 1 or all".
Settings settings_from(const std::function<const char*(const char* name)>& lookup);
// settings_from the process environment: the one place Kiln reads it.
Settings settings_from_env();

}  // namespace kiln
