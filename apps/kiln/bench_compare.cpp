// kiln bench's comparisons beyond the per-mode rows: regional mode under a shrinking device budget (--stream),
// and the modes interleaved step by step (--interleave).
#include <cstdio>
#include <ctime>
#include <memory>

#include "apps/kiln/bench.h"
#include "runtime/core/error.h"
#include "runtime/core/platform.h"

namespace kiln::app {

namespace {
// Process CPU time (every thread: on a CPU Vulkan device the device's workers too), in ms.
double process_cpu_ms() { return platform::process_cpu_ms(); }

}  // namespace

// --stream: regional step time against the device budget, from all blocks resident down to the minimum working set
// (two block slots per kind), and at --vram-budget when given, and the bytes streamed from host memory per step; each
// output is compared bitwise with the all-resident one.
nlohmann::json stream_sweep(vk::Context& ctx, const ir::Graph& g, const models::Builder& b,
                            const std::map<std::string, Tensor>& in, exec::BlockWeights bw, exec::Budget base,
                            int warmup, int steps, const std::string& points) {
    nlohmann::json out = nlohmann::json::array();
    std::printf("\nstreaming (regional): step time against the budget\n%-12s %10s %9s %9s %6s %12s %10s %10s %9s %8s\n",
                "budget", "budget_MiB", "resident", "streamed", "slots", "stream_MiB", "step_med", "upload_ms",
                "used_MiB", "bitwise");
    uint64_t minimum = 0, weights = 0;
    std::map<std::string, Tensor> ref;
    // --stream-budgets: a subset of all, 1/2, 1/4, min (two slots) and given (--vram-budget); "all" is always
    // run first: it is the reference of the bitwise comparison and gives the minimum and the weight bytes.
    std::vector<const char*> names = {"all"};
    std::vector<std::string> want;
    for (size_t a = 0; a <= points.size();) {
        size_t b = points.find(',', a);
        if (b == std::string::npos) b = points.size();
        if (b > a) want.push_back(points.substr(a, b - a));
        a = b + 1;
    }
    for (const std::string& w : want) {
        KILN_CHECK(w == "all" || w == "1/2" || w == "1/4" || w == "min" || w == "given", "--stream-budgets: '", w,
                   "' (all, 1/2, 1/4, min or given)");
        KILN_CHECK(w != "given" || base.bytes, "--stream-budgets given needs --vram-budget");
    }
    auto wanted = [&](const char* n) { return want.empty() || std::find(want.begin(), want.end(), n) != want.end(); };
    for (const char* n : {"1/2", "1/4"})
        if (wanted(n)) names.push_back(n);
    if (wanted("min")) names.push_back("2 blocks");
    if (base.bytes && wanted("given")) names.push_back("given");  // --vram-budget
    for (const char* name : names) {
        exec::Budget bud = base;
        const std::string n = name;
        bud.bytes = n == "all"     ? uint64_t(1) << 60
                    : n == "1/2"   ? minimum + weights / 2
                    : n == "1/4"   ? minimum + weights / 4
                    : n == "given" ? base.bytes
                                   : minimum;
        exec::Executor ex(ctx, g, b.weight_fn(), exec::Mode::regional, false, bw, bud);
        const exec::Counters& c = ex.counters();
        if (n == "all") minimum = c.budget_minimum_bytes, weights = c.block_weight_bytes;
        for (auto& [k, t] : in) ex.set_input(k, t);
        for (int i = 0; i < warmup; ++i) ex.run();
        std::vector<double> wall;
        for (int i = 0; i < steps; ++i) {
            auto ts = Clock::now();
            ex.run();
            wall.push_back(ms_since(ts));
        }
        bool same = true;
        for (auto& [name_out, v] : g.outputs()) {
            Tensor t = ex.output(name_out);
            if (n == "all") ref[name_out] = t;
            same = same && t.bytes == ref[name_out].bytes;
        }
        const double mib = 1 << 20;
        std::printf("%-12s %10.1f %9d %9d %6d %12.1f %10.1f %10.0f %9.1f %8s\n", name,
                    n == "all" ? 0.0 : (double)c.budget_bytes / mib, c.blocks_resident, c.blocks_streamed, c.ring_slots,
                    (double)c.streamed_bytes_per_run / mib, median(wall), c.upload_ms,
                    (double)c.device_bytes_used / mib, same ? "yes" : "NO");
        std::fflush(stdout);
        out.push_back({{"budget", name},
                       {"budget_bytes", n == "all" ? 0 : c.budget_bytes},
                       {"blocks_resident", c.blocks_resident},
                       {"blocks_streamed", c.blocks_streamed},
                       {"ring_slots", c.ring_slots},
                       {"streamed_bytes_per_step", c.streamed_bytes_per_run},
                       {"host_weight_bytes", c.host_weight_bytes},
                       {"device_bytes", c.device_bytes},
                       {"device_bytes_used", c.device_bytes_used},
                       {"in_place_bytes", c.in_place_bytes},
                       {"copy_queue", c.copy_queue},
                       {"compute_batches_per_step", c.compute_batches_per_run},
                       {"copy_batches_per_step", c.copy_batches_per_run},
                       {"bitwise_equal_to_all_resident", same},
                       {"weight_upload_ms", c.upload_ms},
                       {"step_ms", wall},
                       {"step_ms_median", median(wall)},
                       {"note", c.stream_note}});
    }
    return out;
}

// --interleave N: one executor per mode, then N rounds of one step of each, the first mode of round r rotating
// by r. Drift on a shared or throttling machine (other tenants, clocks, heat) then falls on every mode alike, and
// the per-round ratio to the first mode compares steps taken seconds apart instead of minutes. Process CPU time
// is reported with the wall time: on a CPU device it is the device's work, which another tenant slows less than
// it slows the wall clock. Every mode's output is compared bitwise with the first mode's.
nlohmann::json interleaved(vk::Context& ctx, const ir::Graph& g, const models::Builder& b,
                           const std::map<std::string, Tensor>& in, const std::vector<exec::Mode>& modes,
                           exec::BlockWeights bw, const exec::Budget& budget, int warmup, int rounds) {
    const size_t n = modes.size();
    std::vector<std::unique_ptr<exec::Executor>> ex;
    for (exec::Mode mode : modes) {
        ex.push_back(std::make_unique<exec::Executor>(ctx, g, b.weight_fn(), mode, false, bw, budget));
        for (auto& [k, t] : in) ex.back()->set_input(k, t);
    }
    for (int i = 0; i < warmup; ++i)
        for (auto& e : ex) e->run();
    std::vector<std::vector<double>> wall(n), cpu(n);
    std::printf("\ninterleaved: %d rounds of one step per mode\n", rounds);
    std::fflush(stdout);
    for (int r = 0; r < rounds; ++r)
        for (size_t j = 0; j < n; ++j) {
            const size_t m = (j + (size_t)r) % n;
            const double c0 = process_cpu_ms();
            const auto t0 = Clock::now();
            ex[m]->run();
            wall[m].push_back(ms_since(t0));
            cpu[m].push_back(process_cpu_ms() - c0);
        }
    std::printf("%-9s %10s %10s %10s %10s %20s %20s %8s\n", "mode", "wall_med", "wall_min", "cpu_med", "cpu_min",
                "wall/first", "cpu/first", "bitwise");
    nlohmann::json out = {{"rounds", rounds}, {"modes", nlohmann::json::array()}};
    for (size_t m = 0; m < n; ++m) {
        // Ratios per round, to the first mode's step of the same round; their median and range.
        std::vector<double> rw, rc;
        for (int r = 0; r < rounds; ++r) {
            rw.push_back(wall[m][(size_t)r] / wall[0][(size_t)r]);
            rc.push_back(cpu[m][(size_t)r] / cpu[0][(size_t)r]);
        }
        bool same = true;
        for (auto& [name, v] : g.outputs()) same = same && ex[m]->output(name).bytes == ex[0]->output(name).bytes;
        auto summary = [](const std::vector<double>& v) {  // "median (min-max)"
            const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.3f (%.3f-%.3f)", median(v), *lo, *hi);
            return std::string(buf);
        };
        std::printf("%-9s %10.1f %10.1f %10.1f %10.1f %20s %20s %8s\n", exec::mode_name(modes[m]), median(wall[m]),
                    *std::min_element(wall[m].begin(), wall[m].end()), median(cpu[m]),
                    *std::min_element(cpu[m].begin(), cpu[m].end()), summary(rw).c_str(), summary(rc).c_str(),
                    same ? "yes" : "NO");
        out["modes"].push_back({{"mode", exec::mode_name(modes[m])},
                                {"dispatches_per_step", ex[m]->counters().dispatches_per_run},
                                {"step_ms", wall[m]},
                                {"cpu_ms", cpu[m]},
                                {"step_ms_median", median(wall[m])},
                                {"cpu_ms_median", median(cpu[m])},
                                {"wall_ratio_to_first", rw},
                                {"cpu_ratio_to_first", rc},
                                {"wall_ratio_to_first_median", median(rw)},
                                {"cpu_ratio_to_first_median", median(rc)},
                                {"bitwise_equal_to_first", same}});
    }
    std::fflush(stdout);
    return out;
}

}  // namespace kiln::app
