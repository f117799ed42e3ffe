// kiln bench: compile (pipelines + planning + recording; cold and warm) and per-step figures (wall, GPU, host,
// device idle, submissions, barriers) and memory peaks of a transformer in eager / full / regional modes, on a
// model file or a synthetic architecture at real size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "apps/kiln/bench.h"
#include "apps/kiln/bench_cost.h"
#include "apps/kiln/commands.h"
#include "apps/kiln/profile.h"
#include "models/core/forward.h"
#include "models/registry/registry.h"
#include "models/transformers/dit.h"
#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/exec/attention_table.h"
#include "runtime/exec/linear_select.h"
#include "runtime/ir/cost.h"

namespace kiln::app {

namespace {
// When and where a run was measured, for results compared across machines: ISO 8601 UTC, and the host's CPU (the
// device itself on lavapipe) and its hardware threads.
std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    const std::tm tm = platform::utc_time(t);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}
nlohmann::json host_info() {
    const std::string cpu = platform::cpu_name();
    return {{"cpu", cpu}, {"hardware_threads", std::thread::hardware_concurrency()}};
}

struct BenchOpts {
    std::string model, synthetic, mode = "all", json, dtype = "f16", block_weights = "auto", fuse, block_layout;
    int size = 0, batch = 2, steps = 3, warmup = 1, device = -1, blocks = 0, interleave = 0;
    bool no_pipeline_cache = false, block_times = false;
    bool cost = false;            // --cost: the cost model's table after the mode rows (always in the JSON)
    bool cost_by_shader = false;  // --cost-by-shader: and under each mode, its shaders
    bool no_weights = false;      // --no-weights: plan only, weights never made nor written
    bool kernels = false;         // --kernels: the linear selection table instead of a model
    std::vector<std::string> kernel_shapes;
    std::string kernel_dtypes = "f32,f16,bf16";
    std::string vram_budget;  // streaming options (weight_stream.h)
    bool stream = false, no_in_place = false;
    std::string stream_budgets;
    int slots = 0;
    std::vector<int> lora_ranks;
};

void add_bench_flags(CLI::App& app, BenchOpts& o) {
    auto* m = app.add_option("--model", o.model, "Kiln model file or diffusers folder (its transformer is benched)");
    app.add_option("--synthetic", o.synthetic,
                   "Real architecture, random weights in memory (e.g. dit-xl-2-256, "
                   "dit-xl-2-512, dit-tiny)")
        ->excludes(m);
    app.add_option("--size", o.size,
                   "Image size in pixels (latent = size / 8; Sana and DC-AE: size / 32); default: the model's");
    app.add_option("--blocks", o.blocks,
                   "Synthetic only: keep at most N blocks of each kind (for machines that "
                   "cannot hold the whole model; per-block figures stay valid)");
    app.add_option("--batch", o.batch, "Transformer batch (2 = one image with classifier-free guidance)")
        ->capture_default_str();
    app.add_option("--steps", o.steps, "Timed steps (transformer forwards) per mode; 0: plan and record only")
        ->capture_default_str()
        ->check(CLI::Range(0, 1000000));
    app.add_option("--warmup", o.warmup, "Untimed steps before timing")
        ->capture_default_str()
        ->check(CLI::Range(0, 1000000));
    app.add_option("--mode", o.mode,
                   "eager | full | regional, or a comma-separated list of them (full,regional) | all | none (with "
                   "--stream: only the sweep)")
        ->capture_default_str();
    app.add_option("--block-weights", o.block_weights,
                   "Regional: auto | offset (one bound range, per-replay offsets, no copies) | device (selected "
                   "through device addresses, no copies) | copy (copied per replay)")
        ->capture_default_str();
    app.add_option("--block-layout", o.block_layout,
                   "Regional, offset selection: auto (weight-major where a kind's blocks exceed one binding but each "
                   "weight's instances fit what reads them, else block-major) | block (block-major: windows of whole "
                   "blocks, one recording each) | weight (weight-major wherever it fits); default: KILN_BLOCK_LAYOUT, "
                   "else auto")
        ->check(CLI::IsMember({"auto", "block", "weight"}));
    app.add_option("--dtype", o.dtype,
                   "Synthetic weight dtype: f32 | f16 | bf16, or q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k | q4_k "
                   "| q5_k | q6_k "
                   "(linear matrices)")
        ->capture_default_str();
    app.add_option("--vram-budget", o.vram_budget, kVramBudgetHelp);
    add_f16_activations_flag(app);
    add_transfer_queue_option(app);
    add_precision_option(app);
    app.add_flag("--stream", o.stream,
                 "Also run regional mode with the budget at all blocks resident, 1/2, 1/4 and the minimum (two block "
                 "slots), and at --vram-budget when given: step time, bytes streamed per step, bitwise equality");
    app.add_option("--stream-budgets", o.stream_budgets,
                   "--stream: which budgets, comma-separated: all, 1/2, 1/4, min (two slots), given (--vram-budget); "
                   "default all of them. all always runs: it is the bitwise reference");
    app.add_option("--slots", o.slots, "Ring slots per streamed block kind (default 2)");
    app.add_flag("--no-in-place", o.no_in_place,
                 "Unified memory: stream block weights through the ring instead of reading them in host memory");
    app.add_option("--fuse", o.fuse,
                   "on (full and regional run the fused graph, eager the graph as built; CPU devices leave q/k/v "
                   "apart) | off (nothing fused, as KILN_FUSE=0) | all (every fusion in every mode) | both (every "
                   "mode unfused, then with every fusion: rows '<mode>+f'); default: KILN_FUSE, else on");
    app.add_option("--interleave", o.interleave,
                   "After the per-mode rows: N rounds of one step of each mode, alternating (one executor per mode "
                   "kept alive, fused as --fuse on/off/all says), with wall and process CPU time and each round's "
                   "ratio to the first mode. For a "
                   "shared or throttling machine, where minutes apart the same step differs more than the modes do")
        ->check(CLI::Range(0, 1000000));
    app.add_option("--lora-ranks", o.lora_ranks,
                   "SD3, Flux: after the mode rows, a LoRA of each rank (comma-separated) on every block linear but "
                   "the modulation: its load time, the weight bytes it adds, and the regional step with the runtime "
                   "side path against none (--mode none: only these rows)")
        ->delimiter(',');
    app.add_option("--json", o.json, "Also write every figure to this JSON file");
    app.add_flag("--cost", o.cost,
                 "After the mode rows, the cost model of each (always in the JSON as \"cost\"): per step the FLOPs "
                 "and bytes of the dispatches as planned (each kernel's tiling re-reads counted), bytes_min, "
                 "dispatches, submits, barriers, and the floor those imply on named devices. A model, not a "
                 "measurement; with --steps 0 --warmup 0 nothing runs");
    app.add_flag("--cost-by-shader", o.cost_by_shader,
                 "As --cost, and under each mode's row one row per shader, largest H200 floor first: its executed "
                 "GFLOP, GB, share of the mode's H200 floor, executions and floor on each named device (always in the "
                 "JSON as \"cost_by_shader\"): where a GPU's step time would go");
    app.add_flag("--no-weights", o.no_weights,
                 "Plan only (with --steps 0 --warmup 0): weights are neither made nor written to device memory, so "
                 "models larger than this machine's memory plan for the cost report (on unified memory, lavapipe, "
                 "the unwritten pages are never touched); memory peaks then undercount");
    app.add_flag("--block-times", o.block_times,
                 "Regional: one extra step with timestamps around every replayed block (gpu_ms_per_block in the "
                 "JSON); the timed steps never carry them");
    app.add_option("--device", o.device, "Vulkan device index");
    app.add_flag("--no-pipeline-cache", o.no_pipeline_cache,
                 "Neither read nor write the pipeline cache file (as KILN_PIPELINE_CACHE=0)");
    app.add_flag("--kernels", o.kernels,
                 "Instead of a model: measure the linear variants (GFLOP/s per shape and weight dtype), print the "
                 "selection table and, at the default shapes, save it for this device");
    app.add_option("--shape", o.kernel_shapes, "--kernels: a linear shape MxNxK (repeatable; default: the table's)");
    app.add_option("--kernel-dtypes", o.kernel_dtypes, "--kernels: weight dtypes")->capture_default_str();
    app.footer(
        "Examples:\n  kiln bench --synthetic dit-xl-2-256 --mode all --json bench.json\n"
        "  kiln bench --synthetic dit-xl-2-256 --mode full,regional --steps 0 --interleave 8   (on a noisy machine)\n"
        "  kiln bench --synthetic sd3-medium-1024 --steps 0 --warmup 0 --no-weights --cost   (the cost model, plan "
        "only)\n"
        "  kiln bench --synthetic sd3-medium-1024 --mode regional --steps 0 --warmup 0 --no-weights --cost-by-shader   "
        "(where its floor goes)\n"
        "  kiln bench --kernels");
}

// The transformer benched: a model file's, or a synthetic architecture (--blocks caps its block counts) with
// random weights in ws.
models::SyntheticArch bench_arch(const BenchOpts& o, std::unique_ptr<models::WeightStore>& ws) {
    models::SyntheticArch arch;
    if (!o.synthetic.empty()) {
        const auto& archs = models::synthetic_archs();
        auto it = archs.find(o.synthetic);
        if (it == archs.end()) {
            std::string names;
            for (auto& [n, a] : archs) names += (names.empty() ? "" : ", ") + n;
            KILN_FAIL("unknown --synthetic '", o.synthetic, "' (", names, ")");
        }
        arch = it->second;
        if (o.blocks > 0)
            for (const char* key : {"num_layers", "num_single_layers", "num_hidden_layers"})
                if (arch.config.contains(key)) arch.config[key] = std::min(arch.config[key].get<int>(), o.blocks);
        ws = models::synthetic_store(parse_dtype(o.dtype, "--dtype"));
    } else {
        auto src = models::ModelSource::open(o.model);
        arch = {src.class_of("transformer"), src.config("transformer"),
                src.config("transformer").value("sample_size", 32)};
        ws = src.weights("transformer");
    }
    if (o.size > 0) {  // the VAE's downsampling: DC-AE (Sana) 32x, the KL VAE 8x
        const models::ComponentClass* k = models::find_component_class(arch.cls);
        const bool dc_ae = k && (k->kind == models::ComponentKind::sana || k->kind == models::ComponentKind::dc_ae);
        arch.latent = o.size / (dc_ae ? 32 : 8);
    }
    return arch;
}

// --mode: all, none (--stream only), or one mode or a comma-separated list; checked with --interleave and --fuse.
std::vector<exec::Mode> bench_modes(const BenchOpts& o) {
    std::vector<exec::Mode> modes;
    if (o.mode == "all")
        modes = {exec::Mode::eager, exec::Mode::full, exec::Mode::regional};
    else if (o.mode == "none")
        KILN_CHECK(o.stream || !o.lora_ranks.empty(), "--mode none runs nothing without --stream or --lora-ranks");
    else
        for (size_t a = 0; a <= o.mode.size();) {  // one mode, or a comma-separated list
            size_t e = o.mode.find(',', a);
            if (e == std::string::npos) e = o.mode.size();
            modes.push_back(exec::parse_mode(o.mode.substr(a, e - a)));
            a = e + 1;
        }
    KILN_CHECK(o.interleave == 0 || modes.size() >= 2,
               "--interleave compares modes: give two or more (--mode all, or a list such as full,regional)");
    KILN_CHECK(o.fuse.empty() || o.fuse == "on" || o.fuse == "off" || o.fuse == "all" || o.fuse == "both", "--fuse '",
               o.fuse, "' (on, off, all or both)");
    KILN_CHECK(!o.no_weights || (o.steps == 0 && o.warmup == 0 && o.interleave == 0 && !o.stream &&
                                 o.lora_ranks.empty() && !o.block_times),
               "--no-weights plans only: give --steps 0 --warmup 0, without --interleave, --stream, --lora-ranks or "
               "--block-times");
    KILN_CHECK(o.interleave == 0 || o.fuse != "both",
               "--interleave runs one fusion setting: give --fuse on, off or all (both makes two rows per mode)");
    return modes;
}

// One mode's row: compile cold and warm, the timed steps, recording again, block times, memory peaks.
struct ModeRun {
    std::string label;  // the mode, "+f" for the fused row of --fuse both
    ir::Cost cost;
    exec::StepCost step_cost;  // the executor's cost model of one step
    exec::Counters c, cw;      // the cold and the warm executor's
    double cold = 0, warm = 0, record_again_ms = 0;
    std::vector<double> again, block_ms;
    std::vector<StepFigures> steps;
    std::map<std::string, double> per_op;
    MemoryPeaks peaks;
};

ModeRun measure_mode(vk::Context& ctx, models::WeightStore& ws, const models::SyntheticArch& arch,
                     const std::map<std::string, Tensor>& inputs, exec::Mode mode, const std::string& label,
                     const BenchOpts& o, exec::BlockWeights bw, const exec::Budget& budget) {
    ModeRun m;
    m.label = label;
    ir::Graph g;
    models::Builder b(g, ws);
    auto in = models::build_component(b, arch.cls, arch.config, inputs);
    m.cost = ir::count_cost(g);
    // --no-weights: nothing made, nothing written (bench_checks: no step runs).
    const exec::WeightBytesFn wf =
        o.no_weights ? exec::WeightBytesFn([](const ir::Value&, void*, size_t) {}) : b.weight_fn();
    exec::prepare_linear_table(ctx, g);  // a first-use measurement is not compile time
    exec::prepare_attention_table(ctx, g);
    const bool rss_reset = reset_peaks(ctx);
    // Cold: pipelines through an empty cache, as on the first run on a machine; then warm: the same plan
    // again, pipelines through the cache the cold one filled (as the next run finds it on disk).
    // Compile = pipelines + planning + recording; weight upload is excluded from both.
    ctx.set_cold_pipeline_cache(true);
    auto t0 = Clock::now();
    auto ex = std::make_unique<exec::Executor>(ctx, g, wf, mode, false, bw, budget);
    m.cold = ms_since(t0);
    ctx.set_cold_pipeline_cache(false);
    m.c = ex->counters();
    m.step_cost = ex->cost();
    ex.reset();
    t0 = Clock::now();
    // No per-block timestamps in the timed steps: on lavapipe 56 of them (two per replay) slowed a
    // dit-tiny regional step by 5-15 ms. --block-times measures blocks in a separate run below.
    ex = std::make_unique<exec::Executor>(ctx, g, wf, mode, false, bw, budget);
    m.cw = ex->counters();
    m.warm = ms_since(t0) - m.cw.upload_ms;
    for (auto& [name, t] : in) ex->set_input(name, t);
    for (int i = 0; i < o.warmup; ++i) ex->run();
    for (int i = 0; i < o.steps; ++i) {
        auto ts = Clock::now();
        ex->run();
        m.steps.push_back({ms_since(ts), ex->last_run()});
        for (auto& [k, v] : ex->last_op_ms()) m.per_op[k] += v / o.steps;
    }
    // Recording again, with the driver and this plan warm: the cost of recording itself (median of 9: one
    // recording is tens of microseconds, within a scheduler tick of a busy host).
    for (int i = 0; i < 9; ++i) m.again.push_back(ex->record_again());
    std::sort(m.again.begin(), m.again.end());
    m.record_again_ms = m.again[m.again.size() / 2];
    if (o.block_times && mode == exec::Mode::regional) {  // one more step, timing every replayed block
        ex.reset();
        ex = std::make_unique<exec::Executor>(ctx, g, wf, mode, true, bw, budget);
        for (auto& [name, t] : in) ex->set_input(name, t);
        ex->run();
        m.block_ms = ex->last_block_ms();
    }
    m.peaks = read_peaks(ctx, rss_reset);
    return m;
}

// Bytes moved per step: the graph's, plus block weights copied (read and written) where copied.
double bytes_per_step(const ModeRun& m) { return m.cost.bytes + 2.0 * (double)m.c.weight_copy_bytes_per_run; }
double gflops(const ModeRun& m, const StepFigures& med) {
    return med.wall_ms > 0 ? m.cost.flops / (med.wall_ms * 1e-3) * 1e-9 : 0;  // 0: no step timed
}

// The table: one row per mode, medians over the timed steps (every step in the JSON), and its notes.
void print_mode(const ModeRun& m, bool header) {
    const exec::Counters& c = m.c;
    const StepFigures med = median_step(m.steps);
    if (header)
        std::printf("%-9s %8s %8s %9s %9s %9s %9s %6s %6s %6s %8s %6s %9s %9s %8s %8s %8s %8s\n", "mode", "cold_ms",
                    "warm_ms", "pipe_cold", "pipe_warm", "record_ms", "rec_again", "pipes", "disp", "submit",
                    "barriers", "copies", "step_ms", "gpu_ms", "host_ms", "idle_ms", "GFLOP/s", "dev_MiB");
    std::printf("%-9s %8.0f %8.0f %9.1f %9.1f %9.3f %9.3f %6d %6d %6d %8d %6d %9.1f %9.1f %8.3f %8.2f %8.1f %8.0f\n",
                m.label.c_str(), m.cold - c.upload_ms, m.warm, c.pipeline_ms, m.cw.pipeline_ms, c.record_ms,
                m.record_again_ms, c.pipelines, med.run.dispatches, med.run.submissions, med.run.barriers,
                c.copies_per_run, med.wall_ms, med.run.gpu_ms, med.run.host_ms,
                med.run.idle_ms + std::max(0.0, med.run.idle_before_ms), gflops(m, med),
                (double)m.peaks.device_bytes / (1 << 20));
    if (!c.stream_note.empty())
        std::printf("          %s (%.1f MiB streamed per step; ring copies %s%s)\n", c.stream_note.c_str(),
                    (double)c.streamed_bytes_per_run / (1 << 20), c.copy_queue.c_str(),
                    c.copy_batches_per_run ? (", " + std::to_string(c.compute_batches_per_run) + " compute + " +
                                              std::to_string(c.copy_batches_per_run) + " copy batches")
                                                 .c_str()
                                           : "");
    if (!c.block_weights_note.empty())
        std::printf(
            "          %s (%.1f MiB of weight copies per step); replays counted on the device for %d "
            "block kind(s): %d vkCmdExecuteCommands per step\n",
            c.block_weights_note.c_str(), (double)c.weight_copy_bytes_per_run / (1 << 20), c.kinds_counted_on_device,
            c.executes_per_run);
    std::printf("          memory: weights %.1f MiB, activations %.2f MiB planned (%.2f MiB unplanned); peak %s\n",
                (double)c.weight_bytes / (1 << 20), (double)c.activation_bytes_planned / (1 << 20),
                (double)c.activation_bytes_naive / (1 << 20), peaks_line(m.peaks).c_str());
    if (c.f16_activations)
        std::printf("          f16 activation storage: %d values (%.2f MiB less than f32)\n", c.f16_activations,
                    (double)c.f16_activation_bytes_saved / (1 << 20));
    if (c.split_ops)
        std::printf(
            "          row chunks: %d ops bind an activation over one binding (%.2f MiB), recorded as %d "
            "chunk dispatches\n",
            c.split_ops, (double)c.binding_limit_bytes / (1 << 20), c.split_dispatches);
    std::fflush(stdout);
}

nlohmann::json mode_json(const ModeRun& m, exec::Mode mode) {
    const exec::Counters& c = m.c;
    const StepFigures med = median_step(m.steps);
    const nlohmann::json step_json = steps_json(m.steps);
    const double bytes = bytes_per_step(m);
    return {{"mode", exec::mode_name(mode)},
            {"cost", cost_json(m.step_cost)},
            {"cost_by_shader", cost_by_shader(m.step_cost)},
            {"nodes_fused", c.nodes_fused},
            {"gated_linears", c.gated_linears},
            {"f16_activations", c.f16_activations},
            {"f16_activation_bytes_saved", c.f16_activation_bytes_saved},
            {"cold_compile_ms", m.cold - c.upload_ms},
            {"warm_compile_ms", m.warm},
            {"weight_upload_ms", c.upload_ms},
            {"pipeline_ms", c.pipeline_ms},
            {"pipeline_cold_ms", c.pipeline_ms},
            {"pipeline_warm_ms", m.cw.pipeline_ms},
            {"plan_ms", c.plan_ms},
            {"record_ms", c.record_ms},
            {"record_warm_ms", m.cw.record_ms},
            {"record_again_ms", m.record_again_ms},
            {"record_again_runs_ms", m.again},
            {"pipelines", c.pipelines},
            {"pipelines_created", c.pipelines_created},
            {"command_buffers_recorded", c.command_buffers_recorded},
            {"dispatches_per_step", c.dispatches_per_run},
            {"submissions_per_step", c.submissions_per_run},
            {"barriers_per_step", c.barriers_per_run},
            {"copies_per_step", c.copies_per_run},
            {"weight_copy_bytes_per_step", c.weight_copy_bytes_per_run},
            {"table_updates_per_step", c.table_updates_per_run},
            {"executes_per_step", c.executes_per_run},
            {"block_kinds_counted_on_device", c.kinds_counted_on_device},
            {"block_weights", c.block_weights_note},
            {"block_kinds_weight_major", c.block_kinds_weight_major},
            {"activation_bytes_planned", c.activation_bytes_planned},
            {"activation_bytes_naive", c.activation_bytes_naive},
            {"split_ops", c.split_ops},
            {"split_dispatches", c.split_dispatches},
            {"binding_limit_bytes", c.binding_limit_bytes},
            {"weight_bytes", c.weight_bytes},
            {"device_bytes", c.device_bytes},
            {"device_bytes_used", c.device_bytes_used},
            {"memory", peaks_json(m.peaks)},
            {"steps", step_json},
            {"step_ms", step_json["wall_ms"]},
            {"step_ms_median", med.wall_ms},
            {"gpu_ms", step_json["gpu_ms"]},
            {"gpu_ms_median", med.run.gpu_ms},
            {"host_ms", step_json["host_ms"]},
            {"host_ms_median", med.run.host_ms},
            {"flops_per_step", m.cost.flops},
            {"flops_executed_per_step", m.step_cost.flops_executed},  // the f16 splits (vk::products_per_term)
            {"bytes_per_step", bytes},
            {"gflops_per_s", gflops(m, med)},
            {"gbytes_per_s", bytes / (med.wall_ms * 1e-3) * 1e-9},
            {"gpu_ms_per_op_kind", m.per_op},
            {"gpu_ms_per_block", m.block_ms},
            {"gpu_ms_block_median", median(m.block_ms)},
            {"streamed_bytes_per_step", c.streamed_bytes_per_run},
            {"budget_bytes", c.budget_bytes},
            {"blocks_streamed", c.blocks_streamed},
            {"copy_queue", c.copy_queue},
            {"copy_batches_per_step", c.copy_batches_per_run}};
}

// What the run is, where and when: the report's head, also printed.
nlohmann::json report_head(vk::Context& ctx, const BenchOpts& o, const models::SyntheticArch& arch) {
    const auto& pc = ctx.pipeline_cache_info();
    nlohmann::json report = {
        {"kiln_version", kiln_version()},
        {"date_utc", utc_now()},
        {"host", host_info()},
        {"device", ctx.info().name},
        {"driver", ctx.info().driver},
        {"precision", ctx.settings().exec.precision},
        {"class", arch.cls},
        {"arch", o.synthetic.empty() ? o.model : o.synthetic},
        {"batch", o.batch},
        {"config", arch.config},
        {"latent", arch.latent},
        {"pipeline_cache", {{"path", pc.path}, {"status", pc.status}, {"loaded_bytes", pc.loaded_bytes}}},
        {"cost_model", cost_model_json()},
        {"weights", o.no_weights ? "none: --no-weights, plan only" : "written"},
        {"modes", nlohmann::json::array()}};
    std::printf("kiln bench: %s, batch %d, latent %dx%d, on %s\n", report["arch"].get<std::string>().c_str(), o.batch,
                arch.latent, arch.latent, ctx.info().name.c_str());
    std::printf("pipeline cache: %s%s%s\n", pc.status.c_str(), pc.path.empty() ? "" : ", ", pc.path.c_str());
    std::fflush(stdout);
    return report;
}

// Never a partial file: a temporary name, then rename.
void write_json(const std::string& path, const nlohmann::json& report) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp);
        KILN_CHECK(f.good(), tmp, ": cannot write");
        f << report.dump(2) << "\n";
        KILN_CHECK(f.flush().good(), tmp, ": cannot write");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    KILN_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

void run_bench(const BenchOpts& o) {
    if (o.kernels)
        return bench_kernels(o.device, o.no_pipeline_cache, o.kernel_shapes, o.kernel_dtypes, std::max(o.steps, 1));
    KILN_CHECK(!o.model.empty() || !o.synthetic.empty(), "give --model FILE or --synthetic ARCH");
    std::unique_ptr<models::WeightStore> ws;
    const models::SyntheticArch arch = bench_arch(o, ws);
    const exec::BlockWeights bw = exec::parse_block_weights(o.block_weights);
    const std::vector<exec::Mode> modes = bench_modes(o);
    // The KILN_FUSE value the executors read for --fuse on/off/all ("" leaves the environment as it is).
    const std::string fuse_env_of_option = o.fuse == "on" ? "1" : o.fuse == "off" ? "0" : o.fuse;
    Settings settings = cli_settings(o.device);
    settings.context.skip_pipeline_cache_file = o.no_pipeline_cache;
    if (!o.block_layout.empty()) settings.exec.block_layout = o.block_layout;
    vk::Context ctx(settings);
    // The executors of one row read its fusion from the context's settings ("" keeps the environment's).
    auto set_fuse = [&](const std::string& fuse) {
        Settings s = settings;
        if (!fuse.empty()) s.exec.fuse = fuse;
        ctx.set_settings(s);
    };
    ctx.set_pipeline_reuse(false);  // every executor creates its pipelines, as a new process does
    exec::Budget budget{o.vram_budget.empty() ? 0 : exec::parse_bytes(o.vram_budget), o.slots, !o.no_in_place};
    auto inputs = models::example_inputs(arch.cls, arch.config, o.batch, arch.latent, arch.latent);
    nlohmann::json report = report_head(ctx, o, arch);
    // Fusion per row: the KILN_FUSE value the executor reads ("" leaves the environment as it is).
    std::vector<std::pair<exec::Mode, std::string>> rows;
    for (exec::Mode mode : modes) {
        if (o.fuse == "both") {
            rows.push_back({mode, "0"});
            rows.push_back({mode, "all"});
        } else {
            rows.push_back({mode, fuse_env_of_option});
        }
    }
    bool header = true;
    std::vector<std::pair<std::string, exec::StepCost>> costs;  // --cost: printed after the rows
    for (auto& [mode, fuse_env] : rows) {
        set_fuse(fuse_env);
        const std::string label =
            std::string(exec::mode_name(mode)) + (o.fuse == "both" && fuse_env != "0" ? "+f" : "");
        const ModeRun m = measure_mode(ctx, *ws, arch, inputs, mode, label, o, bw, budget);
        print_mode(m, header);
        header = false;
        report["modes"].push_back(mode_json(m, mode));
        costs.push_back({label, m.step_cost});
        set_fuse("");
    }
    if (o.cost || o.cost_by_shader)
        for (size_t i = 0; i < costs.size(); ++i) {
            print_cost(costs[i].first, costs[i].second, i == 0);
            if (o.cost_by_shader) print_cost_by_shader(costs[i].second);
        }
    // The graph of the interleaved and streaming runs, built anew for each.
    auto built = [&](auto&& fn) {
        ir::Graph g;
        models::Builder b(g, *ws);
        auto in = models::build_component(b, arch.cls, arch.config, inputs);
        return fn(g, b, in);
    };
    if (o.interleave > 0) {  // with the rows' fusion
        set_fuse(fuse_env_of_option);
        report["interleaved"] = built([&](const ir::Graph& g, const models::Builder& b, const auto& in) {
            return interleaved(ctx, g, b, in, modes, bw, budget, o.warmup, o.interleave);
        });
        set_fuse("");
    }
    if (o.stream)
        report["stream"] = built([&](const ir::Graph& g, const models::Builder& b, const auto& in) {
            return stream_sweep(ctx, g, b, in, bw, budget, o.warmup, o.steps, o.stream_budgets);
        });
    if (!o.lora_ranks.empty())
        report["lora"] = lora_rows(ctx, *ws, arch, inputs, o.lora_ranks, bw, budget, o.warmup, o.steps);
    if (!o.json.empty()) write_json(o.json, report);
}
}  // namespace

Run add_bench(CLI::App& app) {
    auto o = std::make_shared<BenchOpts>();
    add_bench_flags(app, *o);
    return [o] { run_bench(*o); };
}

}  // namespace kiln::app
