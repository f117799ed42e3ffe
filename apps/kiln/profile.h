#pragma once
// Per-step figures of a transformer's runs and the process's memory peaks, summarised, printed and written
// to JSON the same way by `kiln bench` and `kiln generate --profile`. A new figure is one field of
// RunStats (or StepFigures) and one line in profile.cpp.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/exec/executor.h"

namespace kiln::app {

// Each timed step: its wall time (around run()) and the executor's figures.
struct StepFigures {
    double wall_ms = 0;
    exec::RunStats run;
};

// Medians over the steps (submissions, barriers and dispatches are the same every step).
StepFigures median_step(const std::vector<StepFigures>& steps);
// One row per step, with a header (for --profile).
void print_steps(std::FILE* f, const std::vector<StepFigures>& steps);
// {"wall_ms": [...], "gpu_ms": [...], ...} and their medians ("<name>_median").
nlohmann::json steps_json(const std::vector<StepFigures>& steps);

// Peak memory since the last reset_peaks(): what Kiln allocated on the device, the driver's device-local heap
// usage (VK_EXT_memory_budget; 0 without it) and the host's resident set (VmHWM; process-wide where the kernel
// cannot reset it).
struct MemoryPeaks {
    uint64_t device_bytes = 0, driver_heap_bytes = 0, host_rss_bytes = 0;
    bool rss_reset = false;  // host_rss_bytes is since the reset (else since the process started)
};
// Starts a new peak window; returns whether the host RSS peak could be reset (/proc/self/clear_refs).
bool reset_peaks(vk::Context& ctx);
MemoryPeaks read_peaks(vk::Context& ctx, bool rss_reset);
std::string peaks_line(const MemoryPeaks& p);  // "device 256 MiB (driver heap n/a), host RSS 130 MiB"
nlohmann::json peaks_json(const MemoryPeaks& p);

}  // namespace kiln::app
