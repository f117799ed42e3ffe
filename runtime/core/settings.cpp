#include "runtime/core/settings.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "runtime/core/error.h"
#include "runtime/core/platform.h"

namespace kiln {

namespace {

[[noreturn]] void bad(const char* name, const std::string& v, const char* expected) {
    KILN_FAIL(name, "='", v, "' (", expected, ")");
}

// Every value but "0" turns it on (KILN_VALIDATION=1, =yes); "0" turns it off.
bool on_unless_0(const std::string& v) { return v != "0"; }

bool zero_or_one(const char* name, const std::string& v) {
    if (v != "0" && v != "1") bad(name, v, "0 or 1");
    return v == "1";
}

// A whole decimal integer in [lo, hi], else an error naming the variable.
int64_t integer(const char* name, const std::string& v, int64_t lo, int64_t hi, const char* expected) {
    errno = 0;
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (errno || end == v.c_str() || *end != '\0' || n < lo || n > hi) bad(name, v, expected);
    return n;
}

uint64_t count(const char* name, const std::string& v) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (errno || end == v.c_str() || *end != '\0' || v[0] == '-') bad(name, v, "a whole number, 0 or more");
    return n;
}

std::string choice(const char* name, const std::string& v, std::initializer_list<const char*> accepted,
                   const char* expected) {
    for (const char* a : accepted)
        if (v == a) return v;
    bad(name, v, expected);
}

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// clang-format off
// The order matters: USERPROFILE (Windows' home folder; huggingface_hub's os.path.expanduser("~") reads it
// there), then HOME, then XDG_CACHE_HOME, then KILN_CACHE_DIR (HF_HOME), each overriding the cache folder
// (the Hugging Face folder) the previous row set.
const std::vector<SettingInfo> kTable = {
    // The device and its context (vk::Context).
    {"KILN_DEVICE", "int", "best device", "Vulkan device index (see `kiln devices`); the CLI's --device wins",
     false, [](Settings& s, const char* n, const std::string& v) {
         s.context.device = (int)integer(n, v, -1, kIntMax, "a device index, or -1 for the best"); }},
    {"KILN_VALIDATION", "bool", "0", "Vulkan validation layers on (any value but 0); every message is counted",
     false, [](Settings& s, const char* n, const std::string& v) { s.context.validation = on_unless_0(v); }},
    {"KILN_VALIDATION_SYNC", "bool", "1", "with validation, synchronization validation too (0: off)",
     false, [](Settings& s, const char* n, const std::string& v) { s.context.validation_sync = on_unless_0(v); }},
    {"KILN_VALIDATION_GPU", "bool", "0",
     "with validation, GPU-assisted validation too: shaders instrumented to report out-of-bounds buffer accesses, "
     "which lavapipe's own bounds checks hide (1: on; slow)",
     false, [](Settings& s, const char* n, const std::string& v) { s.context.validation_gpu = on_unless_0(v); }},
    {"KILN_TRANSFER_QUEUE", "choice: 0|1|split", "0",
     "where streamed block weights are copied into ring slots: in the step, on a transfer queue, or in batches of "
     "their own on the compute queue", false, [](Settings& s, const char* n, const std::string& v) {
         s.context.transfer_queue = choice(n, v, {"0", "1", "split"}, "0, 1 or split"); }},
    {"KILN_PIPELINE_CACHE", "bool", "1", "0: neither the pipeline cache nor the linear table is read or written",
     false, [](Settings& s, const char* n, const std::string& v) { s.context.pipeline_cache = on_unless_0(v); }},
    {"USERPROFILE", "path", "",
     "Windows: as HOME, when HOME is not set", false, [](Settings& s, const char* n, const std::string& v) {
         s.context.cache_dir = v + "/.cache/kiln";
         s.hf_home = v + "/.cache/huggingface"; }},
    {"HOME", "path", "",
     "the cache folder is $HOME/.cache/kiln and the Hugging Face folder $HOME/.cache/huggingface when no variable "
     "below sets them", false, [](Settings& s, const char* n, const std::string& v) {
         s.context.cache_dir = v + "/.cache/kiln";
         s.hf_home = v + "/.cache/huggingface"; }},
    {"XDG_CACHE_HOME", "path", "",
     "the cache folder is $XDG_CACHE_HOME/kiln unless KILN_CACHE_DIR is set, the Hugging Face folder "
     "$XDG_CACHE_HOME/huggingface unless HF_HOME is", false, [](Settings& s, const char* n, const std::string& v) {
         s.context.cache_dir = v + "/kiln";
         s.hf_home = v + "/huggingface"; }},
    {"KILN_CACHE_DIR", "path", "$XDG_CACHE_HOME/kiln, else ~/.cache/kiln",
     "the folder of the pipeline cache and the linear table", false,
     [](Settings& s, const char* n, const std::string& v) { s.context.cache_dir = v; }},
    {"KILN_PIPELINE_THREADS", "int", "one per core", "threads that compile pipelines (1 to 256)",
     false, [](Settings& s, const char* n, const std::string& v) {
         s.context.pipeline_threads = (int)integer(n, v, 1, 256, "a thread count, 1 to 256"); }},
    {"KILN_VULKAN_LOADER", "path", "the platform's (libvulkan.so.1, vulkan-1.dll, libvulkan.1.dylib)",
     "the Vulkan loader library, loaded at run time by the first context or device list that finds one", false,
     [](Settings& s, const char* n, const std::string& v) { s.context.vulkan_loader = v; }},
    // Executors (runtime/exec).
    {"KILN_FUSE", "choice: 0|1|all", "1",
     "graph fusion: 0 none, 1 in full and regional modes, all every fusion in every mode", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.fuse = choice(n, v, {"0", "1", "all"}, "0, 1 or all"); }},
    {"KILN_ACT_F16", "bool", "0", "1: activations passed from one linear to the next are stored as f16",
     false, [](Settings& s, const char* n, const std::string& v) { s.exec.act_f16 = zero_or_one(n, v); }},
    {"KILN_BLOCK_WEIGHTS", "choice: auto|offset|device|copy", "auto",
     "how regional mode gives each block instance its weights, where the caller asks for automatic", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.block_weights = choice(n, v, {"auto", "offset", "device", "copy"},
                                       "auto, offset, device or copy"); }},
    {"KILN_BLOCK_LAYOUT", "choice: auto|block|weight", "auto",
     "block weights in memory: block-major windows or weight-major ranges", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.block_layout = choice(n, v, {"auto", "block", "weight"}, "auto, block or weight"); }},
    {"KILN_STREAM_IN_PLACE", "choice: 0|1", "unified memory: on",
     "0: streamed weights are never read in place in host memory; 1: also block kinds that fit", false,
     [](Settings& s, const char* n, const std::string& v) { s.exec.stream_in_place = zero_or_one(n, v); }},
    {"KILN_SELECT_ADVANCE", "bool", "1", "0: regional replays are counted on the host, one execute per instance",
     false, [](Settings& s, const char* n, const std::string& v) { s.exec.select_advance = zero_or_one(n, v); }},
    {"KILN_LEVEL_ORDER", "bool", "1",
     "0: full and regional modes record nodes in graph order, not by level (one barrier per level)", false,
     [](Settings& s, const char* n, const std::string& v) { s.exec.level_order = zero_or_one(n, v); }},
    {"KILN_EAGER_SUBMIT", "choice: step|op", "step",
     "eager mode: step records each run into one command buffer, submitted once; op submits and waits per dispatch "
     "(exact per-op GPU times)", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.eager_submit = choice(n, v, {"step", "op"}, "step or op"); }},
    {"KILN_LINEAR",
     "choice: auto|reg|smem|smem64|smem128|coopmat|coopmat128|tex|gemm|gemm128|coopmat_sk|gemm_sk|gemv|coopmat2",
     "auto", "the linear kernel: auto follows the device's measured table", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.linear = choice(n, v, {"auto", "reg", "smem", "smem64", "smem128", "coopmat", "coopmat128", "tex",
                                       "gemm", "gemm128", "coopmat_sk", "gemm_sk", "gemv", "coopmat2"},
                                "auto, reg, smem, smem64, smem128, coopmat, coopmat128, tex, gemm, gemm128, coopmat_sk, "
                                "gemm_sk, gemv or coopmat2"); }},
    {"KILN_CONV2D", "choice: auto|buf|tex", "auto", "conv2d through storage or texel buffers", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.conv2d = choice(n, v, {"auto", "buf", "tex"}, "auto, buf or tex"); }},
    {"KILN_ATTENTION", "choice: auto|coopmat4|coopmat|flash|rows|buf|tex", "auto",
     "the attention kernel (auto: on GPUs the fastest of the device's measured attention table, flash where it has "
     "none; rows on CPU devices): flash where it applies, on cooperative matrices "
     "(coopmat4: query rows split over subgroups; coopmat: 64 invocations per query tile), rows (buf/tex: through "
     "storage/texel buffers)", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.attention = choice(n, v, {"auto", "coopmat4", "coopmat", "flash", "rows", "buf", "tex"},
                                   "auto, coopmat4, coopmat, flash, rows, buf or tex"); }},
    {"KILN_PRECISION", "choice: exact|fast", "exact",
     "the cooperative-matrix kernels' operands: exact splits each into two f16 parts (f32-like results), fast rounds "
     "each to one f16 (half or a third of the matrix operations; about 1e-3 relative, as f16 inference)", false,
     [](Settings& s, const char* n, const std::string& v) {
         s.exec.precision = choice(n, v, {"exact", "fast"}, "exact or fast"); }},
    // Models and the CLI.
    {"KILN_DEVICE_LOOP", "bool", "1", "0: kiln generate runs its step loop on the host (as --host-loop)",
     false, [](Settings& s, const char* n, const std::string& v) { s.device_loop = on_unless_0(v); }},
    {"KILN_DEFAULT_MODEL", "path", "the built-in dit-digits model", "the kiln CLI's model when --model is not given",
     false, [](Settings& s, const char* n, const std::string& v) { s.default_model = v; }},
    {"HF_HOME", "path", "$XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface",
     "the Hugging Face folder: the published models' tokenizers are looked for in its hub/ cache", false,
     [](Settings& s, const char* n, const std::string& v) { s.hf_home = v; }},
    // Test hooks.
    {"KILN_MAX_BINDING_RANGE", "bytes", "the device's", "lowers maxStorageBufferRange as executors see it",
     true, [](Settings& s, const char* n, const std::string& v) { s.test.max_binding_range = count(n, v); }},
    {"KILN_TEST_MAX_STORAGE_BUFFERS", "int", "the device's", "lowers maxPerStageDescriptorStorageBuffers",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.max_storage_buffers = (uint32_t)integer(n, v, 0, UINT32_MAX,
                                                        "a whole number, 0 or more"); }},
    {"KILN_TEST_MAX_TEXEL_ELEMENTS", "int", "the device's", "lowers maxTexelBufferElements",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.max_texel_elements = (uint32_t)integer(n, v, 0, UINT32_MAX,
                                                       "a whole number, 0 or more"); }},
    {"KILN_TEST_MAX_SHARED_MEMORY", "int", "the device's",
     "lowers maxComputeSharedMemorySize for the flash attention kernel's and the tiled GEMM's tiles", true,
     [](Settings& s, const char* n, const std::string& v) {
         s.test.max_shared_memory = (uint32_t)integer(n, v, 0, UINT32_MAX, "a whole number, 0 or more"); }},
    {"KILN_TEST_ATTENTION_LANES", "int", "0 (subgroup / rows, at least 1)",
     "lanes per query row in the coopmat4 attention kernel's softmax (a subgroup of 8 then takes a 32-wide one's path)",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.attention_lanes = (uint32_t)integer(n, v, 0, 128, "a whole number from 0 to 128"); }},
    {"KILN_TEST_ATTENTION_TABLE_SEQS", "list of int", "none",
     "sequence lengths the attention table measures (2 heads), on any device: auto attention then follows the table "
     "on CPU devices too (a GPU's choice on lavapipe)",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.attention_table_seqs.clear();
         size_t at = 0;
         while (at <= v.size()) {
             const size_t comma = std::min(v.find(',', at), v.size());
             s.test.attention_table_seqs.push_back(
                 integer(n, v.substr(at, comma - at), 1, 1 << 20, "comma-separated lengths from 1 to 1048576"));
             at = comma + 1;
         }
     }},
    {"KILN_TEST_DISCRETE", "bool", "0",
     "1: the device is presented as a discrete GPU without unified memory (a CPU device takes a GPU's choices)",
     true, [](Settings& s, const char* n, const std::string& v) { s.test.discrete = zero_or_one(n, v); }},
    {"KILN_TEST_DEVICE_MEMORY_LIMIT", "bytes", "0 (none)",
     "device memory a context's allocators may hold; past it allocations fail as out of device memory",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.device_memory_limit = count(n, v); }},
    {"KILN_TEST_DEVICE_LOST_AFTER", "int", "-1 (never)", "submissions that succeed before the device is lost",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.device_lost_after = integer(n, v, -1,
                                            std::numeric_limits<int64_t>::max(), "a count, or -1 for never"); }},
    {"KILN_TEST_CONVERT_DELAY_MS", "int", "0", "kiln-convert pauses this long after each tensor",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.convert_delay_ms =
             (int)integer(n, v, 0, kIntMax, "milliseconds, 0 or more"); }},
    {"KILN_TEST_SERVE_STEP_DELAY_MS", "int", "0", "kiln serve's jobs pause this long after each step",
     true, [](Settings& s, const char* n, const std::string& v) {
         s.test.serve_step_delay_ms =
             (int)integer(n, v, 0, kIntMax, "milliseconds, 0 or more"); }},
};
// clang-format on

}  // namespace

const std::vector<SettingInfo>& settings_table() { return kTable; }

Settings settings_from(const std::function<const char*(const char* name)>& lookup) {
    Settings s;
    for (const SettingInfo& row : kTable)
        if (const char* v = lookup(row.name); v && *v) row.apply(s, row.name, v);
    return s;
}

Settings settings_from_env() {
    // platform::env: on Windows the wide environment as UTF-8 (a path with any characters reads back whole).
    std::string held;
    return settings_from([&](const char* name) -> const char* {
        const auto v = platform::env(name);
        if (!v) return nullptr;
        held = *v;
        return held.c_str();
    });
}

}  // namespace kiln
