#pragma once
// What the kernel tables measured on a device (the linear table, linear_select.h; the attention table,
// attention_table.h) share: the timing of a kernel's runs, the probes' input values, the errors that interrupt a
// measurement, and the text file beside the pipeline cache each table is kept in.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/tensor.h"
#include "runtime/vulkan/context.h"

namespace kiln::exec {

class Executor;

// The runs of one variant at one shape: run 0 warms up and the best later run counts (run 0 itself when reps is 0).
// With early_exit, a variant more than 3x slower than the fastest so far (`fastest`, ms) in both the warm-up and the
// first timed run stops there. One slow run is not enough: on a shared machine a single preemption made variants
// look 3-30x slower, and the table kept them out of every later run on that device.
struct LinearTiming {
    double fastest;
    int reps;
    bool early_exit;
    double best = INFINITY;
    int runs = 0;
    bool slow_warmup = false;
    // Adds one run's time; false when no more runs are needed.
    bool add(double ms);
};

// Runs ex until `timing` has its runs; its best time in ms (device timestamps where the device has them, else the
// host clock).
double time_runs(Executor& ex, LinearTiming& timing);
// An error that interrupts a table's measurement rather than ruling a kernel out: out of device memory or a lost
// device. The measurement stops, nothing is written, and the process runs the fallback (reg, the flash kernel).
bool measurement_interrupted(const Error& e);
// Uniform(-1, 1) values of shape s, deterministic (the probes compare devices, not seeds).
Tensor probe_values(const Shape& s, uint32_t seed);

// The key line a table file must start with (the pipeline cache's key and the device name: a table of another driver,
// Kiln build or device is stale), and the file `kind`-VENDOR-DEVICE.txt beside the pipeline cache ("" when that is
// disabled).
std::string device_table_key(vk::Context& ctx);
std::string device_table_path(vk::Context& ctx, const char* kind);
// Such a file: the `header` line, the key line, then `lines` (written to a temporary file renamed into place, so a
// reader never sees half of one). read: false with `status` "missing", "corrupt: bad first line" or "stale".
bool write_device_table(vk::Context& ctx, const std::string& path, const std::string& header,
                        const std::vector<std::string>& lines, std::string& why);
bool read_device_table(vk::Context& ctx, const std::string& path, const std::string& header,
                       std::vector<std::string>& lines, std::string& status);
// A row's note as such a file holds it: "-" when empty, white space as '_'.
std::string table_note(const std::string& note);
// The end every row of both tables shares: its figure (%.6g), admitted (1 or 0) and note (table_note).
std::string table_row_end(double figure, bool admitted, const std::string& note);

}  // namespace kiln::exec
