// The linear selection table (runtime/exec/linear_select.h): measured on this device, a probe mismatch (injected
// through the test hook) excludes the variant and the pick never returns it; the file round-trips, and a file of
// another device, driver or build is stale; linear_table() writes it where the pipeline cache lives.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "runtime/exec/executor.h"
#include "runtime/exec/linear_select.h"
#include "runtime/vulkan/context.h"
#include "runtime/vulkan/pipeline_cache.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
vk::Context& ctx() {
    static vk::Context& c = test::exit_safe_context();
    return c;
}

struct TempCacheDir {
    fs::path dir;
    std::string saved;
    bool had = false;
    // The process keeps tables in memory by file path: a test that must see a new file takes a tag of its own.
    explicit TempCacheDir(const std::string& tag = "") {
        dir = fs::temp_directory_path() / ("kiln-linear-table-" + tag + std::to_string(::getpid()));
        fs::remove_all(dir);
        if (const char* v = std::getenv("KILN_CACHE_DIR")) had = true, saved = v;
        ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
    }
    ~TempCacheDir() {
        had ? (void)::setenv("KILN_CACHE_DIR", saved.c_str(), 1) : (void)::unsetenv("KILN_CACHE_DIR");
        fs::remove_all(dir);
    }
};

// Small shapes: the test checks the bookkeeping, not the speed.
const std::vector<exec::LinearShape> kShapes = {{2, 96, 64}, {96, 72, 64}};
}  // namespace

TEST_CASE("a probe mismatch excludes a linear variant from the table", "[linear_select]") {
    exec::set_linear_probe_hook([](const std::string& v, DType, std::vector<float>& out) {
        if (v == "smem128") out[out.size() / 2] += 1e-3f;  // one element off by far more than the bound
    });
    exec::LinearTable t = exec::measure_linear_table(ctx(), kShapes, {DType::f32, DType::f16}, 1);
    exec::set_linear_probe_hook(nullptr);
    size_t variants = 0;  // per dtype: reg, smem64, smem128, + tex (texel buffers), + coopmat, gemm (not for f32)
    for (DType dt : {DType::f32, DType::f16})
        for (const auto& v : exec::linear_variants()) variants += exec::linear_variant_timed(ctx(), v, dt);
    REQUIRE(t.rows.size() == variants * kShapes.size());  // dtypes x variants x shapes
    for (const auto& r : t.rows) {
        CAPTURE(dtype_name(r.dtype), r.variant, r.shape.M, r.note);
        if (r.variant == "smem128") {
            CHECK(!r.admitted);
            CHECK(r.note.find("probe_mismatch") == 0);
            CHECK(r.gflops == 0);
        } else if (r.variant == "coopmat" && !r.admitted) {
            // Admitted only at f32-grade accuracy: a device whose MulAdd keeps less precision than f32 is excluded by
            // its probe, as it should be (lavapipe 26 keeps f32 since the split of x stopped being folded away).
            CHECK(r.note.find("probe_mismatch") == 0);
            CHECK(r.gflops == 0);
        } else {
            CHECK(r.admitted);  // the others agree with the CPU here
            CHECK(r.gflops > 0);
        }
    }
    for (DType dt : {DType::f32, DType::f16})
        for (int64_t m : {1, 2, 50, 96, 4096}) CHECK(t.pick(dt, m) != "smem128");
    CHECK(t.pick(DType::bf16, 96) == "reg");  // no rows: the register path

    // A table where smem64 is fastest at M = 96 picks it there and only there.
    exec::LinearTable u = t;
    for (auto& r : u.rows) r.gflops = r.variant == "smem64" && r.shape.M == 96 ? 1e9 : r.gflops;
    CHECK(u.pick(DType::f32, 96) == "smem64");
    CHECK(u.pick(DType::f32, 200) == "smem64");  // nearest measured M (log scale)
    CHECK(u.pick(DType::f32, 2) != "smem64");
}

TEST_CASE("the linear table file round-trips and is keyed by device, driver and build", "[linear_select]") {
    TempCacheDir tmp;
    const std::string path = exec::linear_table_path(ctx());
    REQUIRE(path.rfind(tmp.dir.string(), 0) == 0);
    exec::set_linear_probe_hook([](const std::string& v, DType, std::vector<float>& out) {
        if (v == "smem64") out[0] = NAN;
    });
    exec::LinearTable t = exec::measure_linear_table(ctx(), kShapes, {DType::bf16}, 1);
    exec::set_linear_probe_hook(nullptr);
    std::string why, status;
    REQUIRE(exec::write_linear_table(ctx(), path, t, why));
    exec::LinearTable back;
    REQUIRE(exec::read_linear_table(ctx(), path, back, status));
    CHECK(status == "loaded");
    REQUIRE(back.rows.size() == t.rows.size());
    for (size_t i = 0; i < t.rows.size(); ++i) {
        CHECK(back.rows[i].dtype == t.rows[i].dtype);
        CHECK(back.rows[i].variant == t.rows[i].variant);
        CHECK(back.rows[i].shape.M == t.rows[i].shape.M);
        CHECK(back.rows[i].shape.N == t.rows[i].shape.N);
        CHECK(back.rows[i].shape.K == t.rows[i].shape.K);
        CHECK(back.rows[i].gflops == Approx(t.rows[i].gflops).epsilon(1e-5));
        CHECK(back.rows[i].admitted == t.rows[i].admitted);
        CHECK(back.rows[i].note == t.rows[i].note);
    }
    for (int64_t m : {2, 96}) CHECK(back.pick(DType::bf16, m) == t.pick(DType::bf16, m));
    CHECK(back.pick(DType::bf16, 96) != "smem64");

    // Another driver version in the key line: stale. A damaged row: corrupt.
    std::ifstream in(path);
    std::string head, key, rest, line;
    std::getline(in, head), std::getline(in, key);
    while (std::getline(in, line)) rest += line + "\n";
    in.close();
    std::ofstream(path) << head << "\n" << key << "0\n" << rest;
    CHECK(!exec::read_linear_table(ctx(), path, back, status));
    CHECK(status == "stale");
    std::ofstream(path) << head << "\n" << key << "\nf32 fastest 1 2 3 4 1 -\n";
    CHECK(!exec::read_linear_table(ctx(), path, back, status));
    CHECK(status.rfind("corrupt", 0) == 0);
    fs::remove(path);
    CHECK(!exec::read_linear_table(ctx(), path, back, status));
    CHECK(status == "missing");
}

TEST_CASE("linear_table measures a dtype once and writes it next to the pipeline cache", "[linear_select]") {
    TempCacheDir tmp;
    const std::string path = exec::linear_table_path(ctx());
    CHECK(fs::path(path).parent_path() == fs::path(vk::pipeline_cache_path(vk::pipeline_cache_key(ctx().physical()),
                                                                           ctx().settings().context.cache_dir))
                                              .parent_path());
    REQUIRE(!fs::exists(path));
    // f32 rows another process measured (made up here): kept, every one of them, when bf16 is added.
    exec::LinearTable other;
    for (const auto& v : {"reg", "smem64", "smem128"})
        for (const auto& s : exec::linear_table_shapes()) other.rows.push_back({DType::f32, v, s, 1.5, true, ""});
    std::string why;
    REQUIRE(exec::write_linear_table(ctx(), path, other, why));
    exec::LinearTable t = exec::linear_table(ctx(), DType::bf16);  // no bf16 rows yet: measured (seconds on lavapipe)
    CHECK(t.source == "measured");
    std::string status;
    exec::LinearTable back;
    REQUIRE(fs::exists(path));
    REQUIRE(exec::read_linear_table(ctx(), path, back, status));
    CHECK(back.rows.size() == t.rows.size());
    auto count = [](const exec::LinearTable& x, DType dt) {
        return std::count_if(x.rows.begin(), x.rows.end(), [&](const auto& r) { return r.dtype == dt; });
    };
    long variants = 0;  // reg, smem64, smem128, gemm, and tex and coopmat where the device has them
    for (const auto& v : exec::linear_variants()) variants += exec::linear_variant_timed(ctx(), v, DType::bf16);
    const long n = variants * (long)exec::linear_table_shapes().size(),
               n_f32 = 3 * (long)exec::linear_table_shapes().size();
    CHECK(count(back, DType::f32) == n_f32);
    CHECK(count(back, DType::bf16) == n);
    auto written = fs::last_write_time(path);
    exec::LinearTable again = exec::linear_table(ctx(), DType::bf16);  // from memory: not measured, not rewritten
    CHECK(again.rows.size() == t.rows.size());
    CHECK(fs::last_write_time(path) == written);
    CHECK(count(t, DType::bf16) == n);
    CHECK(count(t, DType::f32) == n_f32);
    // Where this table has smem admitted the pick may choose it; "reg" is always admitted on a working device.
    for (const auto& r : t.rows)
        if (r.variant == "reg") CHECK(r.admitted);
}

TEST_CASE("a linear table measurement out of device memory keeps and writes nothing", "[linear_select]") {
    TempCacheDir tmp("oom");
    const std::string path = exec::linear_table_path(ctx());
    REQUIRE(!fs::exists(path));
    struct Cap {
        vk::Context& c;
        ~Cap() { c.faults().memory_limit = 0; }
    } cap{ctx()};
    ctx().faults().memory_limit = ctx().memory_bytes() + 1;  // the next allocation is refused (the probe's)
    exec::LinearTable t = exec::linear_table(ctx(), DType::bf16);
    for (const auto& r : t.rows) CHECK(r.dtype != DType::bf16);  // nothing kept: reg in this process
    CHECK(!fs::exists(path));                                    // nor written: not every variant "not admitted"
    ctx().faults().memory_limit = 0;
    t = exec::linear_table(ctx(), DType::bf16);  // not measured again in this process
    for (const auto& r : t.rows) CHECK(r.dtype != DType::bf16);
    CHECK(!fs::exists(path));
}

TEST_CASE("linear timing: early exit needs two slow runs in a row, one preempted run does not decide",
          "[linear_select]") {
    auto runs = [](exec::LinearTiming t, std::vector<double> times) {
        size_t n = 0;
        while (n < times.size() && t.add(times[n++])) {
        }
        return std::make_pair(n, t.best);
    };
    // A warm-up slowed 30x by a preemption, then normal runs: timed like any other (1 warm-up + 3 timed).
    auto [n1, best1] = runs({1.0, 3, true}, {30, 1.1, 0.9, 1.0, 99});
    CHECK(n1 == 4);
    CHECK(best1 == 0.9);
    // Slow in the warm-up and the first timed run: stops after two, with the timed run's figure.
    auto [n2, best2] = runs({1.0, 3, true}, {30, 4, 1, 1});
    CHECK(n2 == 2);
    CHECK(best2 == 4);
    // A slow first timed run after a normal warm-up: every run is taken.
    auto [n3, best3] = runs({1.0, 3, true}, {1, 30, 2, 0.8});
    CHECK(n3 == 4);
    CHECK(best3 == 0.8);
    // No early exit (benchmarks), and no fastest variant yet: every run.
    CHECK(runs({1.0, 3, false}, {30, 30, 30, 30, 30}).first == 4);
    CHECK(runs({INFINITY, 3, true}, {30, 30, 30, 30, 30}).first == 4);
    // reps 0: the one run is the figure.
    auto [n4, best4] = runs({1.0, 0, true}, {5, 5});
    CHECK(n4 == 1);
    CHECK(best4 == 5);
}

TEST_CASE("prepare_linear_table loads the f32 table a graph's attention follows, even with no linear",
          "[linear_select]") {
    TempCacheDir tmp("attention-");  // a new cache: whatever prepare needs is measured now, and written
    const std::string path = exec::linear_table_path(ctx());
    ir::Graph g;
    ir::Val q = g.input("q", {1, 8, 16}), k = g.input("k", {1, 8, 16}), v = g.input("v", {1, 8, 16});
    g.output(g.attention(q, k, v, 2), "y");
    test::ScopedEnv linear("KILN_LINEAR", "auto");  // the table decides (a forced variant skips it)
    exec::prepare_linear_table(ctx(), g);  // attention picks its texel shader from the f32 table (choose_texel_op)
    exec::LinearTable back;
    std::string status;
    REQUIRE(exec::read_linear_table(ctx(), path, back, status));
    CHECK(std::any_of(back.rows.begin(), back.rows.end(), [](const auto& r) { return r.dtype == DType::f32; }));
}

TEST_CASE("a graph whose linears are f16 measures only the f16 table, its attention following it", "[linear_select]") {
    TempCacheDir tmp("f16-only-");  // a new cache: what planning needs is measured now, and written
    const std::string path = exec::linear_table_path(ctx());
    ir::Graph g;
    ir::Val x = g.input("x", {1, 8, 16});
    ir::Val q = g.linear(x, g.weight("wq", {16, 16}, DType::f16), {});
    g.output(g.attention(q, x, x, 2), "y");
    test::ScopedEnv linear("KILN_LINEAR", "auto");  // the table decides (a forced variant skips it)
    CHECK(exec::texel_table_dtype(ctx(), g) == DType::f16);
    const Tensor w = test::random_tensor({16, 16}, 3).astype(DType::f16);
    exec::WeightBytesFn bytes = [&](const ir::Value&, void* dst, size_t n) { std::memcpy(dst, w.bytes.data(), n); };
    exec::Executor ex(ctx(), g, bytes, exec::Mode::full);  // lowering consults the table: the f16 rows only
    CHECK(exec::known_linear_dtypes(ctx()) == std::set<DType>{DType::f16});
    exec::LinearTable back;
    std::string status;
    REQUIRE(exec::read_linear_table(ctx(), path, back, status));
    CHECK(std::all_of(back.rows.begin(), back.rows.end(), [](const auto& r) { return r.dtype == DType::f16; }));
    // A table that has f32 rows decides as before: f32.
    CHECK(exec::texel_table_dtype(ctx(), g) == DType::f16);
    exec::linear_table(ctx(), DType::f32);
    CHECK(exec::texel_table_dtype(ctx(), g) == DType::f32);
}
