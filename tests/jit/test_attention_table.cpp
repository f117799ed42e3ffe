// The attention table (runtime/exec/attention_table.h): which kernel KILN_ATTENTION=auto runs on a GPU, measured.
// Here on lavapipe (flash and rows; lavapipe 26 adds coopmat and coopmat4) at test lengths
// (KILN_TEST_ATTENTION_TABLE_SEQS, which also lets a CPU device consult the table): every kernel the device runs is
// probed and timed, a kernel whose probe is off is never picked, the pick is the fastest admitted kernel at the nearest
// length, the file round-trips and a stale or corrupt one is not read, and auto plans the table's pick. The probe's
// bound is attention_table.cpp's (docs/attention.md); the kernels' own accuracy is tests/ops/test_attention.cpp's.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/exec/attention_select.h"
#include "runtime/exec/attention_table.h"
#include "runtime/vulkan/attention_flash.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;

namespace {
vk::Context& ctx_() {
    static vk::Context& c = test::exit_safe_context();
    return c;
}

// Test lengths (KILN_TEST_ATTENTION_TABLE_SEQS; "" unsets it), the probe hook and the tables in memory, restored at
// scope exit.
struct TableScope {
    test::ScopedEnv seqs;
    explicit TableScope(const char* lengths)
        : seqs("KILN_TEST_ATTENTION_TABLE_SEQS", *lengths ? std::optional<std::string>(lengths) : std::nullopt) {
        exec::forget_attention_tables();
    }
    ~TableScope() {
        exec::set_attention_probe_hook({});
        exec::forget_attention_tables();
    }
};

// The kernels ctx_() runs a self-attention of head size d on.
std::vector<std::string> runnable(int64_t d, bool f16) {
    ir::Graph g;
    auto q = g.input("q", {1, 40, 2 * d});
    if (f16) g.set_storage(q, DType::f16);
    g.output(g.attention(q, q, q, 2), "y");
    std::vector<std::string> out;
    for (const std::string& k : exec::attention_kernels())
        if (exec::attention_kernel_unsupported(ctx_(), k, g, g.nodes().back()).empty()) out.push_back(k);
    return out;
}

// The kernel auto plans for a self-attention of head size d, Sk keys.
std::string auto_kernel(int64_t d, int64_t sk) {
    ir::Graph g;
    auto q = g.input("q", {1, sk, 2 * d});
    g.output(g.attention(q, q, q, 2), "y");
    const ir::Node& n = g.nodes().back();
    vk::Dispatch disp = vk::lower(g, n);
    test::ScopedEnv env("KILN_ATTENTION", "auto");
    exec::choose_attention_flash(ctx_(), g, n, disp);
    return disp.shader.kernel == "flash" || disp.shader.kernel == "coopmat" || disp.shader.kernel == "coopmat4"
               ? disp.shader.kernel
               : "rows";
}
}  // namespace

TEST_CASE("the attention table probes and times every kernel the device runs", "[attention-table]") {
    TableScope scope("16,48");
    vk::Context& ctx = ctx_();
    for (bool f16 : {false, true}) {
        CAPTURE(f16);
        const auto t = exec::measure_attention_table(ctx, 16, f16, {16, 48}, 2, 1);
        const auto kernels = runnable(16, f16);
        CHECK(t.rows.size() == 2 * exec::attention_kernels().size());  // one row per kernel and length
        CHECK(std::count(kernels.begin(), kernels.end(), "flash") == 1);
        CHECK(std::count(kernels.begin(), kernels.end(), "rows") == (f16 ? 0 : 1));  // f32 q, k, v only
        if (vk::attention_coopmat4_unavailable(ctx.info()).empty())
            CHECK(std::count(kernels.begin(), kernels.end(), "coopmat4") == 1);
        for (const auto& r : t.rows) {
            CAPTURE(r.kernel, r.seq, r.note);
            const bool runs = std::count(kernels.begin(), kernels.end(), r.kernel) == 1;
            CHECK(r.admitted == runs);  // the others: a row that says why not, so the key is not measured again
            CHECK((runs ? r.ms > 0 : r.note.find("unsupported:") == 0));
        }
        // The pick: the fastest at the nearest measured length.
        for (int64_t seq : {10, 16, 30, 48, 4096}) {
            const int64_t nearest = seq <= 27 ? 16 : 48;  // 27.7 = sqrt(16 * 48)
            std::string best;
            double ms = INFINITY;
            for (const auto& r : t.rows)
                if (r.seq == nearest && r.admitted && r.ms < ms) best = r.kernel, ms = r.ms;
            CHECK(t.pick(16, f16, seq) == best);
        }
        CHECK(t.pick(32, f16, 16).empty());  // another head size: nothing measured
        CHECK(t.pick(16, f16, 16, [](const std::string&) { return false; }).empty());
    }
}

TEST_CASE("the attention table measures at exact precision whatever KILN_PRECISION says", "[attention-table]") {
    // At fast the cooperative-matrix kernels round every operand to one f16 (docs/precision.md): ~1e-3, past the
    // probe's bound. A table first measured by a run at fast must still admit them.
    TableScope scope("16");
    test::ScopedEnv prec("KILN_PRECISION", "fast");
    const auto t = exec::measure_attention_table(ctx_(), 16, false, {16}, 2, 1);
    for (const auto& r : t.rows) {
        CAPTURE(r.kernel, r.note);
        CHECK((r.admitted || r.note.find("unsupported:") == 0));
    }
}

TEST_CASE("a kernel whose probe is off is never picked", "[attention-table]") {
    TableScope scope("16");
    exec::set_attention_probe_hook([](const std::string& k, std::vector<float>& out) {
        if (k == "flash") out[5] += 1e-3f;  // past the bound (2e-5 + 3e-6 sqrt(D))
    });
    const auto t = exec::measure_attention_table(ctx_(), 16, false, {16}, 2, 1);
    bool seen = false;
    for (const auto& r : t.rows)
        if (r.kernel == "flash") {
            seen = true;
            CHECK_FALSE(r.admitted);
            CHECK(r.note.find("probe_mismatch") == 0);
        } else {
            CHECK((r.admitted || r.note.find("unsupported:") == 0));
        }
    CHECK(seen);
    CHECK(t.pick(16, false, 16) != "flash");
    CHECK_FALSE(t.pick(16, false, 16).empty());  // rows (and the cooperative-matrix kernels) remain
}

TEST_CASE("the attention table file round-trips; a stale or corrupt one is not read", "[attention-table]") {
    vk::Context& ctx = ctx_();
    test::TempDir dir("kiln_attention_table");
    exec::AttentionTable t;
    t.rows = {{72, false, 256, "flash", 0.5, true, ""},
              {72, false, 256, "rows", 0.25, true, ""},
              {72, true, 2048, "coopmat4", 0, false, "probe_mismatch:max_abs=1"}};
    const std::string path = dir / "attention.txt";
    std::string why, status;
    REQUIRE(exec::write_attention_table(ctx, path, t, why));
    exec::AttentionTable back;
    REQUIRE(exec::read_attention_table(ctx, path, back, status));
    CHECK(status == "loaded");
    REQUIRE(back.rows.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
        CHECK(back.rows[i].head_dim == t.rows[i].head_dim);
        CHECK(back.rows[i].f16 == t.rows[i].f16);
        CHECK(back.rows[i].seq == t.rows[i].seq);
        CHECK(back.rows[i].kernel == t.rows[i].kernel);
        CHECK(back.rows[i].ms == t.rows[i].ms);
        CHECK(back.rows[i].admitted == t.rows[i].admitted);
        CHECK(back.rows[i].note == t.rows[i].note);
    }
    CHECK(back.pick(72, false, 300) == "rows");
    CHECK(back.pick(72, true, 300).empty());  // its only row is not admitted
    auto rewrite = [&](const std::string& text) { std::ofstream(path) << text; };
    std::string key;
    {
        std::ifstream f(path);
        std::getline(f, key), std::getline(f, key);
    }
    rewrite("kiln-attention-table 1\nkey 0000 0000 0 0 other-device\n72 f32 256 flash 0.5 1 -\n");
    CHECK_FALSE(exec::read_attention_table(ctx, path, back, status));
    CHECK(status == "stale");
    rewrite("kiln-attention-table 1\n" + key + "\n72 f32 256 warp 0.5 1 -\n");
    CHECK_FALSE(exec::read_attention_table(ctx, path, back, status));
    CHECK(status.find("corrupt: bad row") == 0);
    rewrite("kiln-attention-table 1\n" + key + "\n72 f64 256 flash 0.5 1 -\n");
    CHECK_FALSE(exec::read_attention_table(ctx, path, back, status));
    rewrite("kiln-linear-table 1\n" + key + "\n");
    CHECK_FALSE(exec::read_attention_table(ctx, path, back, status));
    CHECK(status == "corrupt: bad first line");
    CHECK_FALSE(exec::read_attention_table(ctx, dir / "none.txt", back, status));
    CHECK(status == "missing");
}

TEST_CASE("auto runs the table's pick, measured once per device and key", "[attention-table]") {
    vk::Context& ctx = ctx_();
    {  // Without test lengths a CPU device keeps the rows kernel and measures nothing.
        TableScope none("");
        if (ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU || ctx.presented_discrete()) {
            CHECK_FALSE(exec::attention_table_decides(ctx));
            const uint64_t before = exec::attention_table_measurements();
            CHECK(auto_kernel(16, 40) == (ctx.presented_discrete() ? "flash" : "rows"));
            CHECK(exec::attention_table_measurements() == before);
            if (!ctx.presented_discrete()) CHECK(exec::describe_attention_table(ctx).find("rows (a CPU device") == 0);
        }
    }
    TableScope scope("16,48");
    REQUIRE(exec::attention_table_decides(ctx));
    // The test cache's table file (KILN_CACHE_DIR: only tests write one there), removed so that this run measures;
    // not another cache folder, whose empty pipeline cache and linear table (the rows kernel's texel choice reads
    // it) would be measured and compiled anew.
    const std::string path = exec::attention_table_path(ctx);
    REQUIRE_FALSE(path.empty());
    std::filesystem::remove(path);
    // First use: measured (head size 16, f32), written, then taken from memory.
    const uint64_t before = exec::attention_table_measurements();
    const std::string first = auto_kernel(16, 40);
    CHECK(exec::attention_table_measurements() == before + 1);
    CHECK(std::filesystem::exists(path));
    const exec::AttentionTable measured = exec::attention_table(ctx, 16, false);
    CHECK(first == measured.pick(16, false, 40));
    CHECK(auto_kernel(16, 12) == measured.pick(16, false, 12));
    CHECK(exec::attention_table_measurements() == before + 1);
    // What `kiln devices` prints: the file and its picks per head size, storage and length.
    const std::string described = exec::describe_attention_table(ctx);
    CHECK(described.find(path + " (loaded): head size 16 f32 16 rows: " + measured.pick(16, false, 16) +
                         ", 48 rows: " + measured.pick(16, false, 48)) == 0);
    // Out of device memory while measuring (here the context's test cap): nothing kept or written, a warning, the
    // fallback in this process, and no second attempt; a table another run measured before is not touched.
    {
        const std::string kept = path + ".kept";
        std::filesystem::copy_file(path, kept, std::filesystem::copy_options::overwrite_existing);
        std::filesystem::remove(path);
        struct Cap {
            vk::Context& c;
            ~Cap() { c.faults().memory_limit = 0; }
        } cap{ctx};
        ctx.faults().memory_limit = ctx.memory_bytes() + 1;  // the next allocation is refused
        const uint64_t n = exec::attention_table_measurements();
        CHECK(auto_kernel(24, 40) == (ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU ? "rows" : "flash"));
        CHECK(exec::attention_table_measurements() == n + 1);
        CHECK_FALSE(std::filesystem::exists(path));
        CHECK(exec::attention_table(ctx, 24, false).pick(24, false, 40).empty());
        ctx.faults().memory_limit = 0;
        CHECK(auto_kernel(24, 40) == (ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU ? "rows" : "flash"));
        CHECK(exec::attention_table_measurements() == n + 1);  // not measured again in this process
        std::filesystem::rename(kept, path);
    }
    // A head size the cooperative-matrix kernels do not take (384 > 256): their rows say so, and the key is
    // measured once.
    const std::string k384 = auto_kernel(384, 8);
    CHECK(auto_kernel(384, 8) == k384);
    CHECK(exec::attention_table_measurements() == before + 3);
    CHECK(k384 == exec::attention_table(ctx, 384, false).pick(384, false, 8));
    for (const auto& r : exec::attention_table(ctx, 384, false).rows)
        if (r.head_dim == 384 && (r.kernel == "coopmat" || r.kernel == "coopmat4")) {
            CHECK_FALSE(r.admitted);
            CHECK(r.note.find("unsupported:") == 0);
        }
    // Another process's table, read from the file: auto follows whatever it says is fastest.
    for (const std::string& k : runnable(16, false)) {
        CAPTURE(k);
        exec::AttentionTable t;
        for (const std::string& other : runnable(16, false))
            t.rows.push_back({16, false, 48, other, other == k ? 1.0 : 2.0, true, ""});
        t.rows.push_back({16, false, 48, "coopmat4", 0.5, false, "probe_mismatch"});  // fastest, not admitted
        std::string why;
        REQUIRE(exec::write_attention_table(ctx, path, t, why));
        exec::forget_attention_tables();
        CHECK(auto_kernel(16, 40) == k);
    }
    CHECK(exec::attention_table_measurements() == before + 3);
}
