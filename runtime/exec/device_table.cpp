#include "runtime/exec/device_table.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/core/platform.h"
#include "runtime/exec/executor.h"
#include "runtime/vulkan/pipeline_cache.h"

namespace kiln::exec {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

// Uniform(-1, 1) values, deterministic (the probes compare devices, not seeds).
Tensor probe_values(const Shape& s, uint32_t seed) {
    Tensor t(DType::f32, s);
    float* p = t.data<float>();
    uint32_t x = seed * 2654435761u + 1u;
    for (int64_t i = 0; i < t.numel(); ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float)((x >> 8) * (1.0 / 8388608.0) - 1.0);
    }
    return t;
}

bool measurement_interrupted(const Error& e) {
    return e.kind() == ErrorKind::out_of_memory || e.kind() == ErrorKind::device_lost;
}

double time_runs(Executor& ex, LinearTiming& timing) {
    for (bool more = true; more;) {
        auto t0 = Clock::now();
        ex.run();
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (ex.last_gpu_ms() > 0) ms = ex.last_gpu_ms();
        more = timing.add(ms);
    }
    return timing.best;
}

bool LinearTiming::add(double ms) {
    const int i = runs++;
    if (i > 0 || reps == 0) best = std::min(best, ms);  // run 0 warms up
    if (early_exit && ms > 3 * fastest) {
        if (i == 0) slow_warmup = true;
        if (i == 1 && slow_warmup) return false;  // slow twice in a row: best is this run's time
    }
    return runs <= reps;
}

// Keys of the pipeline cache and the device name, as text: a table measured under another driver, Kiln build or
// device is stale.
std::string device_table_key(vk::Context& ctx) {
    vk::PipelineCacheKey k = vk::pipeline_cache_key(ctx.physical());
    std::ostringstream s;
    char b[80];
    std::snprintf(b, sizeof b, "key %04x %04x %u %016llx ", k.vendor_id, k.device_id, k.driver_version,
                  (unsigned long long)k.spirv_hash);
    s << b;
    for (uint8_t u : k.uuid) std::snprintf(b, sizeof b, "%02x", u), s << b;
    // The device name too: one driver can expose the same ids and UUID as different devices (llvmpipe's vector
    // width, LP_NATIVE_VECTOR_WIDTH, shows in its name), and a table measured and probed on one is stale on another.
    std::string name = ctx.info().name;
    std::replace_if(
        name.begin(), name.end(), [](unsigned char c) { return std::isspace(c) != 0; }, '_');
    s << ' ' << name;
    return s.str();
}

std::string device_table_path(vk::Context& ctx, const char* kind) {
    const ContextOptions& o = ctx.settings().context;  // KILN_PIPELINE_CACHE=0: no table file either
    std::string p =
        o.pipeline_cache ? vk::pipeline_cache_path(vk::pipeline_cache_key(ctx.physical()), o.cache_dir) : "";
    if (p.empty()) return "";
    auto slash = p.rfind('/');
    vk::PipelineCacheKey k = vk::pipeline_cache_key(ctx.physical());
    char name[96];
    std::snprintf(name, sizeof name, "/%s-%04x-%04x.txt", kind, k.vendor_id, k.device_id);
    return p.substr(0, slash) + name;
}

bool write_device_table(vk::Context& ctx, const std::string& path, const std::string& header,
                        const std::vector<std::string>& lines, std::string& why) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    std::string tmp = path + ".tmp" + std::to_string(platform::process_id());
    {
        std::ofstream f(tmp);
        if (!f) return why = "cannot write " + tmp, false;
        f << header << "\n" << device_table_key(ctx) << "\n";
        for (const std::string& l : lines) f << l << "\n";
        if (!f.flush()) return std::filesystem::remove(tmp, ec), why = "cannot write " + tmp, false;
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) return std::filesystem::remove(tmp, ec), why = "cannot rename to " + path, false;
    return true;
}

bool read_device_table(vk::Context& ctx, const std::string& path, const std::string& header,
                       std::vector<std::string>& lines, std::string& status) {
    std::ifstream f(path);
    if (!f) return status = "missing", false;
    std::string line;
    if (!std::getline(f, line) || line != header) return status = "corrupt: bad first line", false;
    if (!std::getline(f, line) || line != device_table_key(ctx)) return status = "stale", false;
    lines.clear();
    while (std::getline(f, line)) lines.push_back(line);
    return status = "loaded", true;
}

std::string table_note(const std::string& note) {
    std::string n = note.empty() ? "-" : note;
    std::replace_if(
        n.begin(), n.end(), [](unsigned char c) { return std::isspace(c) != 0; }, '_');
    return n;
}

std::string table_row_end(double figure, bool admitted, const std::string& note) {
    char f[32];
    std::snprintf(f, sizeof f, "%.6g", figure);
    return std::string(f) + (admitted ? " 1 " : " 0 ") + table_note(note);
}

}  // namespace kiln::exec
