#include "apps/kiln/profile.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "runtime/core/platform.h"
#include "runtime/vulkan/memory.h"

namespace kiln::app {

namespace {
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Every per-step figure once: JSON name, table header, and how to read it from a step.
struct Column {
    const char* name;
    const char* header;
    double (*get)(const StepFigures&);
    int decimals = 2;
};
const Column kColumns[] = {
    {"wall_ms", "wall_ms", [](const StepFigures& s) { return s.wall_ms; }},
    {"gpu_ms", "gpu_ms", [](const StepFigures& s) { return s.run.gpu_ms; }},
    {"host_ms", "host_ms", [](const StepFigures& s) { return s.run.host_ms; }},
    {"host_cpu_ms", "host_cpu", [](const StepFigures& s) { return s.run.host_cpu_ms; }},
    {"idle_ms", "idle_ms", [](const StepFigures& s) { return s.run.idle_ms; }},
    {"idle_before_ms", "idle_pre", [](const StepFigures& s) { return s.run.idle_before_ms; }},
    {"submissions", "submits", [](const StepFigures& s) { return (double)s.run.submissions; }, 0},
    {"barriers", "barriers", [](const StepFigures& s) { return (double)s.run.barriers; }, 0},
    {"dispatches", "disp", [](const StepFigures& s) { return (double)s.run.dispatches; }, 0},
};

std::vector<double> column(const std::vector<StepFigures>& steps, const Column& c) {
    std::vector<double> v;
    for (auto& s : steps) v.push_back(c.get(s));
    return v;
}

uint64_t vm_hwm_bytes() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:  1234 kB"
    return platform::peak_rss();  // elsewhere than Linux: the process's peak since it started
}

double mib(uint64_t b) { return (double)b / (1 << 20); }

void print_row(std::FILE* f, const char* label, const StepFigures& s) {
    std::fprintf(f, "  %5s", label);
    for (auto& c : kColumns) {
        const double v = c.get(s);
        if (v < 0)
            std::fprintf(f, " %9s", "-");  // idle before the first run: nothing ran before it
        else
            std::fprintf(f, " %9.*f", c.decimals, v);
    }
    std::fprintf(f, "\n");
}
}  // namespace

StepFigures median_step(const std::vector<StepFigures>& steps) {
    StepFigures m;
    if (steps.empty()) return m;
    m.run = steps.front().run;  // columns 0-5 are the timed figures; the counts are the same every step
    m.wall_ms = median(column(steps, kColumns[0]));
    m.run.gpu_ms = median(column(steps, kColumns[1]));
    m.run.host_ms = median(column(steps, kColumns[2]));
    m.run.host_cpu_ms = median(column(steps, kColumns[3]));
    m.run.idle_ms = median(column(steps, kColumns[4]));
    std::vector<double> before;  // the first run of an executor has none
    for (double v : column(steps, kColumns[5]))
        if (v >= 0) before.push_back(v);
    m.run.idle_before_ms = before.empty() ? -1 : median(before);
    return m;
}

void print_steps(std::FILE* f, const std::vector<StepFigures>& steps) {
    std::fprintf(f, "  %5s", "step");
    for (auto& c : kColumns) std::fprintf(f, " %9s", c.header);
    std::fprintf(f, "\n");
    for (size_t i = 0; i < steps.size(); ++i) print_row(f, std::to_string(i).c_str(), steps[i]);
    print_row(f, "med", median_step(steps));
}

nlohmann::json steps_json(const std::vector<StepFigures>& steps) {
    nlohmann::json j = nlohmann::json::object();
    const StepFigures m = median_step(steps);
    for (auto& c : kColumns) {
        j[c.name] = column(steps, c);
        j[std::string(c.name) + "_median"] = c.get(m);
    }
    return j;
}

bool reset_peaks(vk::Context& ctx) {
    vk::Allocator::reset_process_peak();
    ctx.reset_peak_heap_usage();
    std::ofstream f("/proc/self/clear_refs");  // "5" resets VmHWM to the current RSS (Linux 4.0+)
    f << "5";
    f.flush();
    return f.good();
}

MemoryPeaks read_peaks(vk::Context& ctx, bool rss_reset) {
    MemoryPeaks p;
    p.device_bytes = vk::Allocator::process_peak_bytes();
    ctx.sample_heap_usage();
    p.driver_heap_bytes = ctx.peak_heap_usage_bytes();
    p.host_rss_bytes = vm_hwm_bytes();
    p.rss_reset = rss_reset;
    return p;
}

std::string peaks_line(const MemoryPeaks& p) {
    char b[200];
    std::string heap = p.driver_heap_bytes ? std::to_string((long long)(mib(p.driver_heap_bytes) + 0.5)) + " MiB"
                                           : std::string("n/a: no VK_EXT_memory_budget");
    std::snprintf(b, sizeof b, "device %.0f MiB allocated by Kiln (driver heap usage %s), host RSS %.0f MiB%s",
                  mib(p.device_bytes), heap.c_str(), mib(p.host_rss_bytes), p.rss_reset ? "" : " (process peak)");
    return b;
}

nlohmann::json peaks_json(const MemoryPeaks& p) {
    return {{"device_peak_bytes", p.device_bytes},
            {"driver_heap_peak_bytes", p.driver_heap_bytes},
            {"host_rss_peak_bytes", p.host_rss_bytes},
            {"host_rss_peak_since_start_of_process", !p.rss_reset}};
}

}  // namespace kiln::app
