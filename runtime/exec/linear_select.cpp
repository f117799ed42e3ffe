#include "runtime/exec/linear_select.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"
#include "runtime/exec/attention_select.h"
#include "runtime/exec/executor.h"
#include "runtime/vulkan/linear_kernels.h"

namespace kiln::exec {

namespace {
using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_kernel_dispatches[16]{};  // per kernel of vk::linear_kernels(), in its order
std::mutex g_mutex;                               // the tables and the probe hook
LinearProbeHook g_probe_hook;
thread_local std::string t_override;
thread_local bool t_measuring = false;  // measure_linear_table: probes and timings at exact precision

// x16: x stored f16 (for kernels that take only that, coopmat2): its values are f16 already, so the CPU reference
// reads what the device reads.
struct Problem {
    ir::Graph g;
    Tensor x, w, b;
    Problem(LinearShape s, DType dt, bool x16 = false) {
        auto xv = g.input("x", {s.M, s.K});
        if (x16) g.set_storage(xv, DType::f16);
        g.output(g.linear(xv, g.weight("w", {s.N, s.K}, dt), g.weight("b", {s.N})), "y");
        x = probe_values({s.M, s.K}, 1);
        if (x16) x = x.astype(DType::f16).astype(DType::f32);
        w = probe_values({s.N, s.K}, 2).astype(dt);  // the CPU reads the same rounded weights
        b = probe_values({s.N}, 3);
    }
    WeightBytesFn bytes() const {
        return [this](const ir::Value& v, void* dst, size_t n) {
            const Tensor& t = v.name == "w" ? w : b;
            KILN_CHECK(t.nbytes() == n, "internal: linear probe weight size");
            std::memcpy(dst, t.bytes.data(), n);
        };
    }
};

// The device as the linear kernels see it: KILN_TEST_MAX_SHARED_MEMORY lowers its shared memory (the tiled GEMM's
// slice and buffering, and whether its tile fits at all).
vk::DeviceInfo linear_device(vk::Context& ctx) {
    vk::DeviceInfo d = ctx.info();
    if (uint32_t t = ctx.settings().test.max_shared_memory) d.max_shared_memory = std::min(d.max_shared_memory, t);
    return d;
}

// f32 sums of K products in two orders (or against the f64 CPU reference): per output |err| <= K 2^-24 sum|x w|,
// E|x w| = 1/4 for U(-1, 1) -> max-abs 2 K^2 2^-24 / 4 (x2 margin); random signs: relative L2 ~ sqrt(K) 2^-24.
// The tiled GEMM (coopmat, gemm, their 128 tiles and split-K forms, which add the same products in another order,
// within the same bound) splits x into two f16 parts (relative 2^-22 per product; W f16 or bf16 exact): + 2 K / 4
// 2^-22 max-abs, `splits` = 1; ggml-block W is split too and one of four products is left out: <= 3 2^-22 per
// product, splits = 3 (vk::linear_splits, linear_gemm.glsl).
bool close(const std::vector<float>& a, const std::vector<float>& ref, int64_t K, std::string& why, int splits = 0) {
    double bound = std::max(1e-6, 2.0 * (double)K * (double)K / 4 * std::ldexp(1.0, -24)), m = 0, num = 0, den = 0;
    bound += splits * 2.0 * (double)K / 4 * std::ldexp(1.0, -22);
    for (size_t i = 0; i < a.size(); ++i) {
        double d = std::abs((double)a[i] - (double)ref[i]);
        if (!(d == d)) d = INFINITY;
        m = std::max(m, d), num += d * d, den += (double)ref[i] * ref[i];
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (m <= bound && rel <= 1e-5) return true;
    char s[128];
    std::snprintf(s, sizeof s, "probe_mismatch:max_abs=%.3g,rel_l2=%.3g", m, rel);
    why = s;
    return false;
}

// Quantized weights: K rounded down to whole blocks (1152 -> 1024 for the 256-value k-quants).
LinearShape whole_blocks(LinearShape s, DType dt) {
    if (dtype_is_quant(dt)) s.K = std::max<int64_t>(dtype_block(dt), s.K / dtype_block(dt) * dtype_block(dt));
    return s;
}

}  // namespace

const std::vector<std::string>& linear_variants() {
    static const std::vector<std::string> v = [] {
        std::vector<std::string> names;
        for (const vk::LinearKernel& k : vk::linear_kernels()) names.push_back(k.name);
        return names;
    }();
    return v;
}

bool linear_variant_available(vk::Context& ctx, const std::string& v, DType dt) {
    const vk::LinearKernel* k = vk::find_linear_kernel(v);
    return k && vk::linear_kernel_unavailable(*k, linear_device(ctx), dt).empty();
}

bool linear_variant_timed(vk::Context& ctx, const std::string& v, DType dt) {
    if (!linear_variant_available(ctx, v, dt)) return false;
    return ctx.info().vk_type != VK_PHYSICAL_DEVICE_TYPE_CPU || vk::find_linear_kernel(v)->caps.cpu_table;
}

std::string linear_unsupported(vk::Context& ctx, const std::string& v, const ir::Graph& g, const ir::Node& n) {
    const vk::LinearKernel* k = vk::find_linear_kernel(v);
    KILN_CHECK(k, "internal: no linear kernel '", v, "'");
    return vk::linear_kernel_unsupported(*k, linear_device(ctx), g, n);
}

// DiT-XL/2 at 256 px (256 tokens, hidden 1152) and its adaLN / timestep rows (M = batch = 2). Measured on first
// use, so kept small: larger shapes (1024 x 1152 x 1152, Flux's 4096 x 3072 x 3072) through
// `kiln bench --kernels --shape` (minutes on a CPU device).
const std::vector<LinearShape>& linear_table_shapes() {
    static const std::vector<LinearShape> s = {{2, 1152, 1152}, {256, 1152, 1152}};
    return s;
}

std::string LinearTable::pick(DType dt, int64_t m, const std::function<bool(const std::string&)>& admits) const {
    double best_dist = INFINITY;
    int64_t best_m = -1;
    for (const Row& r : rows)
        if (r.dtype == dt) {
            double d = std::abs(std::log((double)std::max<int64_t>(m, 1)) - std::log((double)r.shape.M));
            if (d < best_dist) best_dist = d, best_m = r.shape.M;
        }
    std::string v = "reg";
    double g = -1;
    for (const Row& r : rows)
        if (r.dtype == dt && r.shape.M == best_m && r.admitted && r.gflops > g && (!admits || admits(r.variant)))
            g = r.gflops, v = r.variant;
    return v;
}

LinearTable measure_linear_table(vk::Context& ctx, const std::vector<LinearShape>& shapes,
                                 const std::vector<DType>& dtypes, int reps, bool early_exit) {
    LinearTable t;
    t.source = "measured";
    LinearProbeHook hook;
    {
        std::lock_guard<std::mutex> l(g_mutex);
        hook = g_probe_hook;
    }
    const std::string saved = t_override;
    struct Restore {
        const std::string& s;
        ~Restore() { t_override = s, t_measuring = false; }
    } restore{saved};
    // The probe bounds the f32-like arithmetic of KILN_PRECISION=exact (a device's MulAdd keeping f32): measured at
    // fast, it would refuse every GEMM. Picks measured at exact hold at fast too (fewer products, same loads).
    t_measuring = true;
    for (DType dt : dtypes) {
        std::map<int, std::vector<float>> ref_out;             // "reg" output per shape index
        std::map<int, std::vector<float>> ref16_out;           // the same with x stored f16 (for kernels of f16 x)
        std::vector<double> fastest(shapes.size(), INFINITY);  // ms, over the variants timed so far
        for (const std::string& v : linear_variants()) {
            if (!linear_variant_timed(ctx, v, dt)) continue;
            const size_t first_row = t.rows.size();
            std::string why;
            bool ok = false;
            try {
                const vk::LinearKernel& kern = *vk::find_linear_kernel(v);
                const int x_split = vk::linear_splits(kern, dt);
                // A kernel that takes only x stored f16 (coopmat2) runs problems of such x; its timed outputs are
                // compared with reg's on the same problems.
                const bool x16 = !kern.caps.f32_x;
                t_override = v;
                // Probe: partial tiles in M (77), N (130) and K (68 = 4 slices + a quarter; quantized weights: three
                // blocks; 72 = 2 slices + a quarter where the kernel needs K % 8), against the CPU.
                const int64_t pk = dtype_is_quant(dt) ? 3 * dtype_block(dt) : 68 % kern.caps.k_multiple ? 72 : 68;
                const LinearShape ps{77, 130, pk};
                Problem pp(ps, dt, x16);
                const uint64_t ran = linear_kernel_dispatches(v);
                auto gpu = run_graph(ctx, pp.g, pp.bytes(), {{"x", pp.x}}, Mode::full).at("y").to_f32();
                if (hook) hook(v, dt, gpu);
                // A kernel of f16 x only must have run itself, not reg in its place (its admission differs most).
                KILN_CHECK(!x16 || linear_kernel_dispatches(v) > ran, "the probe ran reg in place of ", v);
                auto cpu_w = [&](const ir::Value& val) { return val.name == "w" ? pp.w : pp.b; };
                auto cpu = cpu::run(pp.g, {{"x", pp.x}}, cpu_w).at("y").to_f32();
                ok = close(gpu, cpu, ps.K, why, x_split);
                for (size_t si = 0; si < shapes.size(); ++si) {
                    const LinearShape s = whole_blocks(shapes[si], dt);
                    LinearTable::Row row{dt, v, s, 0, false, why};
                    if (ok && s.K % kern.caps.k_multiple != 0) {  // (kiln bench --shape) reg would run in its place
                        row.note = "K_%_" + std::to_string(kern.caps.k_multiple) + "_!=_0";
                    } else if (ok) {
                        Problem p(s, dt, x16);
                        if (x16 && !ref16_out.count((int)si)) {  // reg on the same problem (not timed)
                            t_override = "reg";
                            ref16_out[(int)si] =
                                run_graph(ctx, p.g, p.bytes(), {{"x", p.x}}, Mode::full).at("y").to_f32();
                            t_override = v;
                        }
                        Executor ex(ctx, p.g, p.bytes(), Mode::full);
                        ex.set_input("x", p.x);
                        LinearTiming timing{fastest[si], reps, early_exit};
                        const double best = time_runs(ex, timing);
                        fastest[si] = std::min(fastest[si], best);
                        row.gflops = 2.0 * (double)s.M * s.N * s.K / (best * 1e6);
                        auto out = ex.output("y").to_f32();
                        std::map<int, std::vector<float>>& refs = x16 ? ref16_out : ref_out;
                        if (v == "reg")
                            ref_out[(int)si] = std::move(out);
                        else if (refs.count((int)si))  // absent when "reg" itself failed its probe
                            ok = close(out, refs.at((int)si), s.K, why, x_split);
                        row.admitted = ok;
                        row.note = ok ? "" : why;
                    }
                    t.rows.push_back(row);
                }
            } catch (const Error& e) {  // a pipeline the driver rejects, say: not this variant (reg: fatal)
                if (v == "reg" || measurement_interrupted(e)) throw;  // no table then (linear_table)
                t.rows.resize(first_row);
                why = std::string("error:") + e.what();
                for (const LinearShape& s : shapes) t.rows.push_back({dt, v, whole_blocks(s, dt), 0, false, why});
            }
            // A later mismatch excludes the variant at every shape.
            for (auto& r : t.rows)
                if (r.dtype == dt && r.variant == v && !ok) r.admitted = false, r.note = why;
        }
    }
    return t;
}

std::string linear_table_path(vk::Context& ctx) { return device_table_path(ctx, "linear"); }

// Text: "kiln-linear-table 1", the key line, then one row per line: dtype variant M N K gflops admitted note.
bool write_linear_table(vk::Context& ctx, const std::string& path, const LinearTable& t, std::string& why) {
    std::vector<std::string> lines;
    for (const auto& r : t.rows) {
        std::ostringstream l;
        l << dtype_name(r.dtype) << ' ' << r.variant << ' ' << r.shape.M << ' ' << r.shape.N << ' ' << r.shape.K << ' '
          << table_row_end(r.gflops, r.admitted, r.note);
        lines.push_back(l.str());
    }
    return write_device_table(ctx, path, "kiln-linear-table 1", lines, why);
}

bool read_linear_table(vk::Context& ctx, const std::string& path, LinearTable& t, std::string& status) {
    std::vector<std::string> lines;
    if (!read_device_table(ctx, path, "kiln-linear-table 1", lines, status)) return false;
    LinearTable r;
    for (const std::string& line : lines) {
        std::istringstream s(line);
        std::string dt, note;
        LinearTable::Row row;
        int adm = 0;
        if (!(s >> dt >> row.variant >> row.shape.M >> row.shape.N >> row.shape.K >> row.gflops >> adm >> note) ||
            std::find(linear_variants().begin(), linear_variants().end(), row.variant) == linear_variants().end())
            return status = "corrupt: bad row '" + line + "'", false;
        try {
            row.dtype = parse_dtype(dt);
        } catch (const Error&) {
            return status = "corrupt: bad dtype '" + dt + "'", false;
        }
        row.admitted = adm == 1;
        row.note = note == "-" ? "" : note;
        r.rows.push_back(row);
    }
    r.source = "loaded " + path;
    t = std::move(r);
    return true;
}

namespace {
// "tex at M=2, tex at M=256": the variant t picks for weights of dtype dt at each row count it measured.
std::string picks_of(const LinearTable& t, DType dt) {
    std::vector<int64_t> ms;
    for (const auto& r : t.rows)
        if (r.dtype == dt && std::find(ms.begin(), ms.end(), r.shape.M) == ms.end()) ms.push_back(r.shape.M);
    std::string out;
    for (int64_t m : ms) out += (out.empty() ? "" : ", ") + t.pick(dt, m) + " at M=" + std::to_string(m);
    return out;
}
}  // namespace

std::string describe_linear_table(vk::Context& ctx) {
    const std::string path = linear_table_path(ctx);
    if (path.empty()) return "no table file (pipeline cache off): measured in every process that plans a linear";
    LinearTable t;
    std::string status;
    if (!read_linear_table(ctx, path, t, status))
        return path + ": " + status +
               (status == "missing" ? " (measured the first time a model is planned"
                                    : " (measured again the next time a model is planned") +
               ", or by `kiln bench --kernels`)";
    std::string picks;
    std::vector<DType> dts;
    for (const auto& r : t.rows)
        if (std::find(dts.begin(), dts.end(), r.dtype) == dts.end()) dts.push_back(r.dtype);
    for (DType dt : dts) picks += (picks.empty() ? "" : "; ") + std::string(dtype_name(dt)) + " " + picks_of(t, dt);
    return path + " (loaded; `kiln bench --kernels` measures it again): " + picks;
}

namespace {
std::mutex g_table_mutex;                     // held while measuring: a second executor waits for the first's table
std::map<std::string, LinearTable> g_tables;  // by key line (device, driver, build) and file
}  // namespace

std::set<DType> known_linear_dtypes(vk::Context& ctx) {
    std::lock_guard<std::mutex> l(g_table_mutex);
    const std::string path = linear_table_path(ctx);
    std::set<DType> out;
    for (const auto& r : g_tables[device_table_key(ctx) + "\n" + path].rows) out.insert(r.dtype);
    LinearTable f;
    std::string status;
    if (!path.empty() && read_linear_table(ctx, path, f, status))
        for (const auto& r : f.rows) out.insert(r.dtype);
    return out;
}

namespace {
// Whether linear node n has a choice: a kernel besides reg admits it on ctx's device.
bool consults_table(vk::Context& ctx, const ir::Graph& g, const ir::Node& n) {
    if (n.op != ir::Op::linear) return false;
    const vk::DeviceInfo dev = linear_device(ctx);
    for (const vk::LinearKernel& k : vk::linear_kernels())
        if (k.name != "reg" && vk::linear_kernel_unsupported(k, dev, g, n).empty()) return true;
    return false;
}
}  // namespace

DType texel_table_dtype(vk::Context& ctx, const ir::Graph& g) {
    const std::set<DType> known = known_linear_dtypes(ctx);
    if (known.count(DType::f32)) return DType::f32;
    for (const ir::Node& n : g.nodes())
        if (consults_table(ctx, g, n)) return g.value(n.in[1]).dtype;
    return known.empty() ? DType::f32 : *known.begin();
}

LinearTable linear_table(vk::Context& ctx, DType dt) {
    std::lock_guard<std::mutex> l(g_table_mutex);
    auto& tables = g_tables;
    const std::string path = linear_table_path(ctx), key = device_table_key(ctx) + "\n" + path;
    auto has = [&](const LinearTable& t) {
        return std::any_of(t.rows.begin(), t.rows.end(), [&](const LinearTable::Row& r) { return r.dtype == dt; });
    };
    LinearTable& t = tables[key];
    std::string status;
    if (!has(t) && !path.empty()) {  // another process may have measured it since
        LinearTable f;
        if (read_linear_table(ctx, path, f, status) && has(f)) t = std::move(f);
    }
    static std::set<std::pair<std::string, DType>> interrupted;  // measured in vain in this process: not again
    if (!has(t) && interrupted.count({key, dt})) return t;
    if (!has(t)) {  // seconds on a CPU device: say so, as the first run of a model would otherwise look stuck
        std::fprintf(stderr,
                     "kiln: measuring the linear kernels for %s weights on %s (once per device and driver%s%s)\n",
                     dtype_name(dt), ctx.info().name.c_str(), path.empty() ? "" : "; saved in ", path.c_str());
        const auto t0 = Clock::now();
        LinearTable m;
        try {
            m = measure_linear_table(ctx, linear_table_shapes(), {dt});
        } catch (const Error& e) {
            if (!measurement_interrupted(e)) throw;
            // Out of device memory (a tight budget, a test's cap) or a lost device says nothing about the kernels:
            // nothing is kept or written; this process runs reg (or what another process's file says).
            std::fprintf(stderr, "kiln: warning: linear kernels for %s not measured (%s): reg in this process\n",
                         dtype_name(dt), e.what());
            interrupted.insert({key, dt});
            return t;
        }
        std::fprintf(stderr, "kiln: linear kernels for %s: %s (%.1f s)\n", dtype_name(dt), picks_of(m, dt).c_str(),
                     std::chrono::duration<double>(Clock::now() - t0).count());
        LinearTable f;  // keep the other dtypes the file holds (another process may have measured them)
        if (!path.empty() && read_linear_table(ctx, path, f, status)) {
            std::set<DType> have;
            for (const auto& r : t.rows) have.insert(r.dtype);
            for (const auto& r : f.rows)
                if (r.dtype != dt && !have.count(r.dtype)) t.rows.push_back(r);
        }
        t.rows.insert(t.rows.end(), m.rows.begin(), m.rows.end());
        t.source = "measured";
        std::string why;
        if (!path.empty() && !write_linear_table(ctx, path, t, why))
            std::fprintf(stderr, "kiln: warning: linear table not saved: %s\n", why.c_str());
    }
    return t;
}

void prepare_linear_table(vk::Context& ctx, const ir::Graph& g) {
    if (!t_override.empty() || ctx.settings().exec.linear != "auto") return;
    for (const ir::Node& n : g.nodes()) {
        if (n.op == ir::Op::conv2d || n.op == ir::Op::attention)  // they follow one table (choose_texel_op)
            linear_table(ctx, texel_table_dtype(ctx, g));
        else if (consults_table(ctx, g, n))
            linear_table(ctx, g.value(n.in[1]).dtype);
    }
}

// conv2d (the VAE's convolutions) and attention: their texel-buffer shader where the device's measured linear table
// (of texel_table_dtype) picks "tex" at 256 rows (the device reads texel buffers faster than storage buffers), or
// as KILN_CONV2D / KILN_ATTENTION = auto|buf|tex says (ExecOptions::conv2d, attention: `v`, named `env`).
void choose_texel_op(vk::Context& ctx, const ir::Graph& g, vk::Dispatch& d, const char* env, const std::string& v) {
    KILN_CHECK(v == "auto" || v == "buf" || v == "tex", env, "='", v, "' (auto, buf or tex)");
    if (v == "buf" || !ctx.info().texel_formats) return;
    if (v == "auto") {
        const std::string forced = !t_override.empty() ? t_override : ctx.settings().exec.linear;
        const DType dt = forced == "auto" ? texel_table_dtype(ctx, g) : DType::f32;
        const std::string pick = forced == "auto" ? linear_table(ctx, dt).pick(dt, 256) : forced;
        if (pick != "tex") return;
    }
    if (auto t = vk::texel_variant(d.shader)) d.shader = *t;
}

std::string linear_choice(vk::Context& ctx, const ir::Graph& g, const ir::Node& n) {
    KILN_CHECK(n.op == ir::Op::linear, "internal: linear_choice of a ", ir::op_name(n.op));
    std::string v = t_override;
    if (v.empty()) v = ctx.settings().exec.linear;
    if (v == "smem") v = "smem64";
    KILN_CHECK(
        v == "auto" || vk::find_linear_kernel(v), "KILN_LINEAR='", v,
        "' (auto, reg, smem, smem64, smem128, coopmat, coopmat128, tex, gemm, gemm128, coopmat_sk, gemm_sk, gemv "
        "or coopmat2)");
    const vk::DeviceInfo dev = linear_device(ctx);
    const DType dt = g.value(n.in[1]).dtype;
    using N = vk::LinearCaps::Needs;
    const vk::LinearKernel* forced = v == "auto" ? nullptr : vk::find_linear_kernel(v);
    if (forced && (forced->caps.needs == N::coopmat || forced->caps.needs == N::texel_formats ||
                   forced->caps.needs == N::coopmat2)) {
        // Forced onto a device without the feature: an error, not a silent reg. Without its shader or the feature
        // only (not for shared memory: that depends on the weights and the tile, and such nodes stay on reg).
        vk::DeviceInfo roomy = dev;
        roomy.max_shared_memory = UINT32_MAX / 2;
        // f16: a weight dtype both take, so only the device's features decide.
        const std::string why = vk::linear_kernel_unavailable(*forced, roomy, DType::f16);
        KILN_CHECK(why.empty(), "KILN_LINEAR=", v, ": device '", dev.name, "': ", why);
    }
    auto admits = [&](const std::string& k) {
        return vk::linear_kernel_unsupported(*vk::find_linear_kernel(k), dev, g, n).empty();
    };
    // auto: the fastest measured kernel that admits n (the table ranks only those); forced: that kernel where it
    // admits n. Anything else stays on reg, which runs every linear.
    if (v == "auto") {
        const int64_t rows = shape_numel(g.value(n.in[0]).shape) / g.value(n.in[1]).shape[1];
        v = consults_table(ctx, g, n) ? linear_table(ctx, dt).pick(dt, rows, admits) : "reg";
    }
    return v == "reg" || !admits(v) ? "reg" : v;
}

void choose_linear(vk::Context& ctx, const ir::Graph& g, const ir::Node& n, vk::Dispatch& d) {
    if (n.op == ir::Op::conv2d) return choose_texel_op(ctx, g, d, "KILN_CONV2D", ctx.settings().exec.conv2d);
    if (n.op == ir::Op::attention) {  // attention_select.h: the flash kernel, else the rows kernel's texel choice
        if (choose_attention_flash(ctx, g, n, d)) return;
        return choose_texel_op(ctx, g, d, "KILN_ATTENTION", attention_texel_choice(ctx.settings().exec.attention));
    }
    if (n.op != ir::Op::linear) return;
    choose_linear_as(ctx, g, n, d, linear_choice(ctx, g, n));
}

void choose_linear_as(vk::Context& ctx, const ir::Graph& g, const ir::Node& n, vk::Dispatch& d,
                      const std::string& variant) {
    KILN_CHECK(n.op == ir::Op::linear, "internal: choose_linear_as on a ", ir::op_name(n.op));
    if (variant == "reg") return;
    const vk::LinearKernel* k = vk::find_linear_kernel(variant);
    KILN_CHECK(k, "internal: no linear kernel '", variant, "'");
    // The kernel where its declaration admits n (the same for any rows: nothing there depends on M), else reg.
    if (!vk::linear_kernel_unsupported(*k, linear_device(ctx), g, n).empty()) return;
    d = k->lower(linear_device(ctx), g, n);
    // KILN_PRECISION=fast: the tiled GEMMs' constant 13 (linear_gemm.glsl: one f16 per operand); a split one's
    // partial pass has it already (then PHASE, 14), its reduce keeps 0 (it multiplies nothing).
    const bool gemm =
        k->caps.needs == vk::LinearCaps::Needs::coopmat || k->caps.needs == vk::LinearCaps::Needs::gemm_tile;
    if (gemm && ctx.settings().exec.precision == "fast" && !t_measuring) {
        KILN_CHECK(d.spec.size() == (d.scratch ? 15 : 13), "internal: the tiled GEMM's constants changed");
        if (d.scratch)
            d.spec[13] = 1u;
        else
            d.spec.push_back(1u);
    }
    const size_t i = (size_t)(k - vk::linear_kernels().data());
    KILN_CHECK(i < std::size(g_kernel_dispatches), "internal: more linear kernels than counters");
    ++g_kernel_dispatches[i];
}

uint64_t linear_smem_dispatches() { return linear_kernel_dispatches("smem64") + linear_kernel_dispatches("smem128"); }

uint64_t linear_kernel_dispatches(const std::string& variant) {
    const vk::LinearKernel* k = vk::find_linear_kernel(variant);
    KILN_CHECK(k, "linear_kernel_dispatches: no kernel '", variant, "'");
    return g_kernel_dispatches[(size_t)(k - vk::linear_kernels().data())].load();
}

void set_linear_probe_hook(LinearProbeHook hook) {
    std::lock_guard<std::mutex> l(g_mutex);
    g_probe_hook = std::move(hook);
}

void set_linear_override(const std::string& variant) { t_override = variant; }

}  // namespace kiln::exec
