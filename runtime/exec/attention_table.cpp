#include "runtime/exec/attention_table.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"
#include "runtime/exec/attention_select.h"
#include "runtime/exec/device_table.h"
#include "runtime/exec/executor.h"
#include "runtime/vulkan/attention_flash.h"
#include "runtime/vulkan/lower.h"

namespace kiln::exec {

namespace {
using Clock = std::chrono::steady_clock;

std::mutex g_mutex;        // the hooks
std::mutex g_table_mutex;  // the tables in memory; held while measuring (a second executor waits for the first's)
AttentionProbeHook g_probe_hook;
std::map<std::string, AttentionTable> g_tables;                  // by device_table_key and file
std::set<std::tuple<std::string, int64_t, bool>> g_interrupted;  // keys measured in vain (out of memory): not again
std::atomic<uint64_t> g_measurements{0};

// Probe values; stored f16, they are rounded first, so that the CPU reads what the device reads.
Tensor values(const Shape& s, uint32_t seed, bool f16) {
    Tensor t = probe_values(s, seed);
    return f16 ? t.astype(DType::f16).astype(DType::f32) : t;
}

// Self-attention of B = 1, heads x head_dim, Sq query and Sk key rows; q, k, v stored f16 where f16 (the output f32).
struct Problem {
    ir::Graph g;
    std::map<std::string, Tensor> in;
    Problem(int64_t heads, int64_t head_dim, int64_t sq, int64_t sk, bool f16) {
        const int64_t W = heads * head_dim;
        auto q = g.input("q", {1, sq, W}), k = g.input("k", {1, sk, W}), v = g.input("v", {1, sk, W});
        if (f16)
            for (ir::Val x : {q, k, v}) g.set_storage(x, DType::f16);
        g.output(g.attention(q, k, v, (int)heads), "y");
        in = {{"q", values({1, sq, W}, 1, f16)}, {"k", values({1, sk, W}, 2, f16)}, {"v", values({1, sk, W}, 3, f16)}};
    }
    const ir::Node& node() const { return g.nodes().back(); }
};

// The probe's bound (docs/attention.md, "Tolerance ..."): every kernel is within max-abs 2e-5 and relative L2 1e-5
// of the f64 reference for |q|, |k| <= 2, |v| <= 1 and up to 269 keys (the scalar kernels' f32 sums); the
// cooperative-matrix kernels' f16 splits add 2 ds max|v| with ds <= scale sum_d (5 2^-22 |q_d k_d| + 2^-23 (|q_d| +
// sqrt(2) |k_d|)), at |q|, |k|, |v| <= 1 and scale = 1 / sqrt(D): 2 sqrt(D) (5 2^-22 + 2.42 2^-23) < 3e-6 sqrt(D).
bool close(const std::vector<float>& a, const std::vector<float>& ref, int64_t head_dim, std::string& why) {
    const double bound = 2e-5 + 3e-6 * std::sqrt((double)head_dim);
    double m = a.size() == ref.size() ? 0 : INFINITY, num = 0, den = 0;
    for (size_t i = 0; i < std::min(a.size(), ref.size()); ++i) {
        double d = std::abs((double)a[i] - (double)ref[i]);
        if (!(d == d)) d = INFINITY;
        m = std::max(m, d), num += d * d, den += (double)ref[i] * ref[i];
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (m <= bound && rel <= 1e-5) return true;
    char s[128];
    std::snprintf(s, sizeof s, "probe_mismatch:max_abs=%.3g,rel_l2=%.3g", m, rel);
    why = s;
    return false;
}

std::string key_of(vk::Context& ctx) { return device_table_key(ctx) + "\n" + attention_table_path(ctx); }

bool has(const AttentionTable& t, int64_t head_dim, bool f16) {
    return std::any_of(t.rows.begin(), t.rows.end(),
                       [&](const AttentionTable::Row& r) { return r.head_dim == head_dim && r.f16 == f16; });
}

std::string picks_of(const AttentionTable& t, int64_t head_dim, bool f16, const std::vector<int64_t>& seqs) {
    std::string s;
    for (int64_t seq : seqs) {
        const std::string k = t.pick(head_dim, f16, seq);
        s += (s.empty() ? "" : ", ") + std::to_string(seq) + " rows: " + (k.empty() ? "none" : k);
    }
    return s;
}
}  // namespace

AttentionKey attention_key(const ir::Graph& g, const ir::Node& n) {
    bool f16 = false;
    for (size_t i = 0; i < 3; ++i) f16 = f16 || g.value(n.in[i]).dtype == DType::f16;
    return {g.value(n.in[0]).shape[2] / std::get<ir::AttentionAttrs>(n.attrs).heads, f16};
}

const std::vector<std::string>& attention_kernels() {
    static const std::vector<std::string> k{"flash", "coopmat", "coopmat4", "rows"};
    return k;
}

std::string AttentionTable::pick(int64_t head_dim, bool f16, int64_t seq,
                                 const std::function<bool(const std::string&)>& runs) const {
    int64_t nearest = 0;  // the measured length nearest to seq, on a log scale
    for (const Row& r : rows)
        if (r.head_dim == head_dim && r.f16 == f16 &&
            (!nearest || std::abs(std::log((double)r.seq / seq)) < std::abs(std::log((double)nearest / seq))))
            nearest = r.seq;
    std::string best;
    double best_ms = INFINITY;
    for (const Row& r : rows)
        if (r.head_dim == head_dim && r.f16 == f16 && r.seq == nearest && r.admitted && r.ms > 0 && r.ms < best_ms &&
            (!runs || runs(r.kernel)))
            best = r.kernel, best_ms = r.ms;
    return best;
}

std::string attention_kernel_unsupported(vk::Context& ctx, const std::string& k, const ir::Graph& g,
                                         const ir::Node& n) {
    uint32_t smem = ctx.info().max_shared_memory;
    if (uint32_t t = ctx.settings().test.max_shared_memory) smem = std::min(smem, t);  // KILN_TEST_MAX_SHARED_MEMORY
    const vk::DeviceInfo& dev = ctx.info();
    if (k == "flash") return vk::attention_flash_unsupported(g, n, smem);
    if (k == "coopmat") {
        const std::string why = vk::attention_coopmat_unavailable(dev);
        return why.empty() ? vk::attention_coopmat_unsupported(dev, g, n, smem) : why;
    }
    if (k == "coopmat4") {
        const std::string why = vk::attention_coopmat4_unavailable(dev);
        const uint32_t lanes = ctx.settings().test.attention_lanes;
        return why.empty() ? vk::attention_coopmat4_unsupported(dev, g, n, smem, lanes) : why;
    }
    if (k == "rows") {
        for (size_t i = 0; i < 3; ++i)
            if (g.value(n.in[i]).dtype != DType::f32) return "q, k and v stored f32 only";
        try {
            vk::lower(g, n);
            return "";
        } catch (const Error& e) {
            return e.what();
        }
    }
    return "unknown attention kernel '" + k + "'";
}

bool attention_table_decides(vk::Context& ctx) {
    if (!ctx.settings().test.attention_table_seqs.empty()) return true;  // KILN_TEST_ATTENTION_TABLE_SEQS
    return ctx.info().vk_type != VK_PHYSICAL_DEVICE_TYPE_CPU && !ctx.presented_discrete();
}

std::vector<int64_t> attention_table_seqs(vk::Context& ctx) {
    const std::vector<int64_t>& t = ctx.settings().test.attention_table_seqs;
    return t.empty() ? std::vector<int64_t>{256, 2048} : t;
}

AttentionTable measure_attention_table(vk::Context& ctx, int64_t head_dim, bool f16, const std::vector<int64_t>& seqs,
                                       int heads, int reps) {
    AttentionTable t;
    t.source = "measured";
    AttentionProbeHook hook;
    {
        std::lock_guard<std::mutex> l(g_mutex);
        hook = g_probe_hook;
    }
    struct Restore {
        ~Restore() { set_attention_override(""); }
    } restore;
    ++g_measurements;
    std::vector<double> fastest(seqs.size(), INFINITY);  // ms, over the kernels timed so far
    for (const std::string& k : attention_kernels()) {
        // Probe: 37 query rows against 53 keys (partial tiles of every kernel), 2 heads, against the CPU.
        Problem pp(2, head_dim, 37, 53, f16);
        if (std::string no = attention_kernel_unsupported(ctx, k, pp.g, pp.node()); !no.empty()) {
            for (int64_t s : seqs) t.rows.push_back({head_dim, f16, s, k, 0, false, "unsupported:" + no});
            continue;  // not on this device or at this head size: a row all the same, so the key is not measured again
        }
        const size_t first_row = t.rows.size();
        std::string why;
        bool ok = false;
        try {
            set_attention_override(k);
            auto nothing = [](const ir::Value&, void*, size_t) {};
            auto gpu = run_graph(ctx, pp.g, nothing, pp.in, Mode::full).at("y").to_f32();
            if (hook) hook(k, gpu);
            auto cpu = cpu::run(pp.g, pp.in, [](const ir::Value&) { return Tensor(); }).at("y").to_f32();
            ok = close(gpu, cpu, head_dim, why);
            for (size_t si = 0; si < seqs.size(); ++si) {
                AttentionTable::Row row{head_dim, f16, seqs[si], k, 0, false, why};
                Problem p(heads, head_dim, seqs[si], seqs[si], f16);
                if (ok && attention_kernel_unsupported(ctx, k, p.g, p.node()).empty()) {
                    Executor ex(ctx, p.g, nothing, Mode::full);
                    for (const auto& [name, v] : p.in) ex.set_input(name, v);
                    LinearTiming timing{fastest[si], reps, true};
                    fastest[si] = std::min(fastest[si], time_runs(ex, timing));
                    row.ms = timing.best;
                    row.admitted = true;
                }
                t.rows.push_back(row);
            }
        } catch (const Error& e) {                  // a pipeline the driver rejects, say: not this kernel
            if (measurement_interrupted(e)) throw;  // no table then (attention_table)
            t.rows.resize(first_row);
            why = std::string("error:") + e.what();
            for (int64_t s : seqs) t.rows.push_back({head_dim, f16, s, k, 0, false, why});
        }
    }
    return t;
}

std::string attention_table_path(vk::Context& ctx) { return device_table_path(ctx, "attention"); }

// Text: "kiln-attention-table 1", the key line, then one row per line: head_dim f32|f16 seq kernel ms admitted note.
bool write_attention_table(vk::Context& ctx, const std::string& path, const AttentionTable& t, std::string& why) {
    std::vector<std::string> lines;
    for (const auto& r : t.rows) {
        std::ostringstream l;
        l << r.head_dim << ' ' << (r.f16 ? "f16" : "f32") << ' ' << r.seq << ' ' << r.kernel << ' '
          << table_row_end(r.ms, r.admitted, r.note);
        lines.push_back(l.str());
    }
    return write_device_table(ctx, path, "kiln-attention-table 1", lines, why);
}

bool read_attention_table(vk::Context& ctx, const std::string& path, AttentionTable& t, std::string& status) {
    std::vector<std::string> lines;
    if (!read_device_table(ctx, path, "kiln-attention-table 1", lines, status)) return false;
    AttentionTable r;
    const auto& kernels = attention_kernels();
    for (const std::string& line : lines) {
        std::istringstream s(line);
        AttentionTable::Row row;
        std::string io, note;
        int adm = 0;
        if (!(s >> row.head_dim >> io >> row.seq >> row.kernel >> row.ms >> adm >> note) ||
            (io != "f32" && io != "f16") || row.head_dim <= 0 || row.seq <= 0 || (adm != 0 && adm != 1) ||
            std::find(kernels.begin(), kernels.end(), row.kernel) == kernels.end())
            return status = "corrupt: bad row '" + line + "'", false;
        row.f16 = io == "f16";
        row.admitted = adm == 1;
        row.note = note == "-" ? "" : note;
        r.rows.push_back(row);
    }
    r.source = "loaded " + path;
    t = std::move(r);
    return true;
}

AttentionTable attention_table(vk::Context& ctx, int64_t head_dim, bool f16) {
    std::lock_guard<std::mutex> l(g_table_mutex);
    const std::string path = attention_table_path(ctx);
    AttentionTable& t = g_tables[key_of(ctx)];
    std::string status;
    if (!has(t, head_dim, f16) && !path.empty()) {  // another process may have measured it since
        AttentionTable f;
        if (read_attention_table(ctx, path, f, status) && has(f, head_dim, f16)) t = std::move(f);
    }
    if (has(t, head_dim, f16) || g_interrupted.count({key_of(ctx), head_dim, f16})) return t;
    const std::vector<int64_t> seqs = attention_table_seqs(ctx);
    const bool test_seqs = !ctx.settings().test.attention_table_seqs.empty();
    std::fprintf(stderr,
                 "kiln: measuring the attention kernels for head size %lld (q, k, v %s) on %s (once per device and "
                 "driver%s%s)\n",
                 (long long)head_dim, f16 ? "f16" : "f32", ctx.info().name.c_str(), path.empty() ? "" : "; saved in ",
                 path.c_str());
    const auto t0 = Clock::now();
    AttentionTable m;
    try {
        m = measure_attention_table(ctx, head_dim, f16, seqs, test_seqs ? 2 : 16);
    } catch (const Error& e) {
        if (!measurement_interrupted(e)) throw;
        // Out of device memory or a lost device says nothing about the kernels: nothing is kept or written, and
        // this process runs the fallback (the flash kernel; rows on a CPU device).
        std::fprintf(stderr, "kiln: warning: attention kernels for head size %lld not measured (%s)\n",
                     (long long)head_dim, e.what());
        g_interrupted.insert({key_of(ctx), head_dim, f16});
        return t;
    }
    AttentionTable f;  // keep the other keys the file holds (another process may have measured them)
    if (!path.empty() && read_attention_table(ctx, path, f, status))
        for (const auto& r : f.rows)
            if (!has(t, r.head_dim, r.f16) && !(r.head_dim == head_dim && r.f16 == f16)) t.rows.push_back(r);
    t.rows.insert(t.rows.end(), m.rows.begin(), m.rows.end());
    t.source = "measured";
    std::fprintf(stderr, "kiln: attention kernels for head size %lld (q, k, v %s): %s (%.1f s)\n", (long long)head_dim,
                 f16 ? "f16" : "f32", picks_of(t, head_dim, f16, seqs).c_str(),
                 std::chrono::duration<double>(Clock::now() - t0).count());
    std::string why;
    if (!path.empty() && !write_attention_table(ctx, path, t, why))
        std::fprintf(stderr, "kiln: warning: attention table not saved: %s\n", why.c_str());
    return t;
}

std::string describe_attention_table(vk::Context& ctx) {
    if (!attention_table_decides(ctx)) return "rows (a CPU device: no table)";
    const std::string path = attention_table_path(ctx);
    if (path.empty()) return "no table file (pipeline cache off): measured in every process that plans attention";
    AttentionTable t;
    std::string status;
    if (!read_attention_table(ctx, path, t, status))
        return path + ": " + status + " (measured the first time a model's attention is planned)";
    std::vector<std::pair<int64_t, bool>> keys;
    for (const auto& r : t.rows)
        if (std::find(keys.begin(), keys.end(), std::pair{r.head_dim, r.f16}) == keys.end())
            keys.push_back({r.head_dim, r.f16});
    std::vector<int64_t> seqs;
    for (const auto& r : t.rows)
        if (std::find(seqs.begin(), seqs.end(), r.seq) == seqs.end()) seqs.push_back(r.seq);
    std::sort(keys.begin(), keys.end());
    std::sort(seqs.begin(), seqs.end());
    std::string picks;
    for (auto [d, f16] : keys)
        picks += (picks.empty() ? "" : "; ") + std::string("head size ") + std::to_string(d) +
                 (f16 ? " f16 " : " f32 ") + picks_of(t, d, f16, seqs);
    return path + " (loaded): " + picks;
}

void prepare_attention_table(vk::Context& ctx, const ir::Graph& g) {
    if (ctx.settings().exec.attention != "auto" || !attention_table_decides(ctx)) return;
    for (const ir::Node& n : g.nodes())
        if (n.op == ir::Op::attention) {
            const AttentionKey key = attention_key(g, n);
            // KILN_ACT_F16: the executor stores q, k, v f16 where a flash kernel reads them (planned_graph).
            const bool f16 =
                key.f16 || (ctx.settings().exec.act_f16 && attention_kernel_unsupported(ctx, "flash", g, n).empty());
            attention_table(ctx, key.head_dim, f16);
        }
}

uint64_t attention_table_measurements() { return g_measurements.load(); }

void set_attention_probe_hook(AttentionProbeHook hook) {
    std::lock_guard<std::mutex> l(g_mutex);
    g_probe_hook = std::move(hook);
}

void forget_attention_tables() {
    std::lock_guard<std::mutex> l(g_table_mutex);
    g_tables.clear();
    g_interrupted.clear();
}

}  // namespace kiln::exec
