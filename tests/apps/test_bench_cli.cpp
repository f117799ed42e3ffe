// `kiln bench` and `kiln generate --profile`, run as the binary: cold and warm compile, per-step figures
// (GPU, host, idle, submissions, barriers), memory peaks, and the pipeline cache a second run loads.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;

namespace {
struct Run {
    int rc = -1;
    std::string err;
};

// Runs `kiln ARGS` with XDG_CACHE_HOME=cache (and no other cache override); stdout dropped, stderr kept.
Run run_kiln(const fs::path& cache, const std::string& args) {
    const fs::path err = cache / "stderr.txt";
    const std::string cmd = "env -u KILN_CACHE_DIR -u KILN_PIPELINE_CACHE XDG_CACHE_HOME=" + cache.string() + " " +
                            kiln::test::cli_binary("kiln") + " " + args + " >/dev/null 2>" + err.string();
    int status = std::system(cmd.c_str());
    Run r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(err);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    return r;
}

// Runs `kiln bench ARGS --json DIR/NAME.json` (it must succeed) and returns the JSON it wrote.
nlohmann::json bench_json(const fs::path& dir, const std::string& args, const std::string& name) {
    const std::string json = (dir / (name + ".json")).string();
    Run r = run_kiln(dir, "bench " + args + " --json " + json);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    std::ifstream f(json);
    return nlohmann::json::parse(f);
}

struct TmpDir {
    fs::path path;
    explicit TmpDir(const std::string& tag) {
        path = fs::temp_directory_path() / ("kiln_bench_" + tag + "_" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TmpDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
}  // namespace

TEST_CASE("kiln bench: cold and warm compile, per-step figures, memory peaks", "[apps][bench][vulkan]") {
    TmpDir tmp("json");
    const std::string json = (tmp.path / "bench.json").string();
    const std::string args = "bench --synthetic dit-tiny --blocks 2 --mode all --steps 2 --json " + json;
    auto read = [&] {
        std::ifstream f(json);
        return nlohmann::json::parse(f);
    };
    Run r = run_kiln(tmp.path, args);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    auto j = read();
    CHECK(j["pipeline_cache"]["status"] == "missing");
    // When and where: Kiln's version, the UTC time, the host (results are compared across machines).
    int x = 0, y = 0, z = 0, n = 0;
    const std::string version = j["kiln_version"], date = j["date_utc"];
    CHECK((std::sscanf(version.c_str(), "%d.%d.%d%n", &x, &y, &z, &n) == 3 && n == (int)version.size()));
    int yy = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
    n = 0;
    CHECK((std::sscanf(date.c_str(), "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &yy, &mo, &d, &h, &mi, &se, &n) == 6 && n == 20 &&
           date.size() == 20 && yy >= 2024 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31));
    CHECK(j["host"]["hardware_threads"].get<int>() >= 1);
    CHECK(j["host"].contains("cpu"));
    REQUIRE(j["modes"].size() == 3);
    for (auto& m : j["modes"]) {
        INFO(m["mode"]);
        CHECK(m["pipeline_cold_ms"].get<double>() > 0);
        CHECK(m["pipeline_warm_ms"].get<double>() > 0);
        CHECK(m["cold_compile_ms"].get<double>() >= m["pipeline_cold_ms"].get<double>());
        CHECK(m["record_ms"].get<double>() >= 0);
        CHECK(m["record_again_ms"].get<double>() >= 0);
        auto again = m["record_again_runs_ms"].get<std::vector<double>>();  // nine recordings, their median reported
        REQUIRE(again.size() == 9);
        std::sort(again.begin(), again.end());
        CHECK(m["record_again_ms"].get<double>() == again[4]);
        const auto& s = m["steps"];
        for (const char* k : {"wall_ms", "gpu_ms", "host_ms", "host_cpu_ms", "idle_ms", "idle_before_ms", "submissions",
                              "barriers", "dispatches"})
            CHECK(s[k].size() == 2);
        CHECK(s["gpu_ms_median"].get<double>() > 0);  // lavapipe has timestamps
        CHECK(s["idle_before_ms_median"].get<double>() >= 0);
        CHECK(s["submissions_median"] == m["submissions_per_step"]);
        CHECK(s["barriers_median"] == m["barriers_per_step"]);
        // Every mode submits once per step (eager records its step op by op at run time).
        CHECK(m["submissions_per_step"] == 1);
        CHECK(s["idle_ms_median"].get<double>() == 0);  // one submission: no gap inside a step
        CHECK(m["barriers_per_step"].get<int>() > 0);
        // The cost model, under exactly these names (other checks read them).
        const auto& cost = m["cost"];
        CHECK(cost.size() == 7);
        for (const char* k : {"flops", "bytes", "bytes_min", "dispatches", "submits", "barriers", "floor_ms"})
            CHECK(cost.contains(k));
        CHECK(cost["dispatches"] == m["dispatches_per_step"]);
        CHECK(cost["submits"] == m["submissions_per_step"]);
        CHECK(cost["barriers"] == m["barriers_per_step"]);
        CHECK(cost["flops"].get<double>() > 0);
        // The floors' FLOPs: each kernel's matrix products per term (1 for every kernel lavapipe 22.3 picks here).
        CHECK(m["flops_executed_per_step"].get<double>() >= cost["flops"].get<double>());
        CHECK(cost["bytes"].get<double>() >= cost["bytes_min"].get<double>());
        CHECK(cost["bytes_min"].get<double>() > m["weight_bytes"].get<double>());  // weights and the blocks' values
        REQUIRE(cost["floor_ms"].size() == 5);
        for (const char* d : {"H100", "H200", "RTX 4090", "Apple M3 Max", "Adreno 750"})
            CHECK(cost["floor_ms"][d].get<double>() > 0);
        // Same FLOP rate, more bandwidth: the H200's floor is at most the H100's; the phone's is the highest.
        CHECK(cost["floor_ms"]["H200"].get<double>() <= cost["floor_ms"]["H100"].get<double>());
        CHECK(cost["floor_ms"]["Adreno 750"].get<double>() > cost["floor_ms"]["Apple M3 Max"].get<double>());
        CHECK(m["activation_bytes_planned"].get<uint64_t>() <= m["activation_bytes_naive"].get<uint64_t>());
        CHECK(m["split_ops"] == 0);  // every activation fits one binding
        CHECK(m["memory"]["device_peak_bytes"].get<uint64_t>() >= m["device_bytes"].get<uint64_t>());
        CHECK(m["memory"]["host_rss_peak_bytes"].get<uint64_t>() > (10u << 20));
        CHECK(m["gpu_ms_per_block"].empty());  // timed steps carry no per-replay timestamps
    }
    // --block-times: one extra regional step timing each replayed block (2 blocks).
    r = run_kiln(tmp.path,
                 "bench --synthetic dit-tiny --blocks 2 --mode regional --steps 1 --block-times --json " + json);
    REQUIRE(r.rc == 0);
    CHECK(read()["modes"][0]["gpu_ms_per_block"].size() == 2);
    // The second run finds the pipeline cache the first one saved.
    r = run_kiln(tmp.path, args);
    REQUIRE(r.rc == 0);
    CHECK(read()["pipeline_cache"]["status"] == "loaded");
    CHECK(fs::exists(read()["pipeline_cache"]["path"].get<std::string>()));
    // --no-pipeline-cache neither reads nor writes it.
    r = run_kiln(tmp.path, args + " --no-pipeline-cache");
    REQUIRE(r.rc == 0);
    CHECK(read()["pipeline_cache"]["status"] == "disabled");
}

TEST_CASE("kiln bench --cost: the cost model's table, labelled a model, plan only; --cost-by-shader",
          "[apps][bench][vulkan]") {
    TmpDir tmp("cost");
    const fs::path out = tmp.path / "stdout.txt";
    const std::string cmd = "env -u KILN_CACHE_DIR XDG_CACHE_HOME=" + tmp.path.string() + " " +
                            kiln::test::cli_binary("kiln") +
                            " bench --synthetic dit-tiny --blocks 2 --mode eager,regional --steps 0 "
                            "--warmup 0 --cost >" +
                            out.string() + " 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream f(out);
    const std::string text((std::istreambuf_iterator<char>(f)), {});
    INFO(text);
    CHECK(text.find("cost model") != std::string::npos);
    CHECK(text.find("not measured") != std::string::npos);
    CHECK(text.find("H200 ms") != std::string::npos);
    CHECK(text.find("Adreno 750 ms") != std::string::npos);
    // One cost row per mode after the header.
    CHECK(text.find("\neager ", text.find("cost model")) != std::string::npos);
    CHECK(text.find("\nregional ", text.find("cost model")) != std::string::npos);
    CHECK(text.find("  shader ") == std::string::npos);  // the per-shader tables only on request

    // --cost-by-shader (the pipeline cache the run above wrote makes it quick): under each mode a table of its
    // shaders, largest H200 floor first; in the JSON each shader's floor per device, which sum to the mode's.
    const fs::path out2 = tmp.path / "stdout2.txt", json = tmp.path / "cost.json";
    const std::string cmd2 = "env -u KILN_CACHE_DIR XDG_CACHE_HOME=" + tmp.path.string() + " " +
                             kiln::test::cli_binary("kiln") +
                             " bench --synthetic dit-tiny --blocks 2 --mode eager,regional --steps 0 --warmup 0 "
                             "--cost-by-shader --json " +
                             json.string() + " >" + out2.string() + " 2>&1";
    REQUIRE(std::system(cmd2.c_str()) == 0);
    std::ifstream f2(out2);
    const std::string text2((std::istreambuf_iterator<char>(f2)), {});
    INFO(text2);
    // Two tables (one per mode), each: the header, then rows whose H200 floor (column 7 of 10) never increases.
    size_t at = text2.find("cost model"), tables = 0;
    while ((at = text2.find("\n  shader ", at)) != std::string::npos) {
        ++tables;
        std::istringstream rows(text2.substr(text2.find('\n', at + 1) + 1));
        std::string line;
        double last = 1e300;
        int n = 0;
        while (std::getline(rows, line) && line.rfind("  ", 0) == 0 && line.rfind("  shader ", 0) != 0) {
            std::istringstream cols(line);
            std::vector<std::string> c;
            for (std::string w; cols >> w;) c.push_back(w);
            REQUIRE(c.size() == 10);  // shader GFLOP GB share count and five devices (no spaces in shader names)
            const double h200 = std::stod(c[6]);
            CHECK(h200 <= last);
            last = h200;
            ++n;
        }
        CHECK(n > 3);  // linears, attention, norms, ...
        at += 1;
    }
    CHECK(tables == 2);
    std::ifstream jf(json);
    const auto j = nlohmann::json::parse(jf);
    REQUIRE(j["modes"].size() == 2);
    for (const auto& m : j["modes"]) {
        const auto& by = m["cost_by_shader"];
        REQUIRE(by.size() > 3);
        double bytes = 0;
        int count = 0;
        std::map<std::string, double> floor;
        for (const auto& [name, e] : by.items()) {
            INFO(name);
            REQUIRE(e["floor_ms"].size() == 5);
            bytes += e["bytes"].get<double>();
            count += e["count"].get<int>();
            for (const auto& [d, ms] : e["floor_ms"].items()) floor[d] += ms.get<double>();
        }
        // The same per-dispatch terms summed in another order: equal within the sums' rounding, at most one part in
        // 2^53 per term (a few hundred terms here; 1e-12 allows about 9000).
        const auto near = [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::abs(b); };
        CHECK(near(bytes, m["cost"]["bytes"].get<double>()));
        for (const auto& [d, ms] : m["cost"]["floor_ms"].items()) {
            INFO(d);
            CHECK(near(floor[d], ms.get<double>()));
        }
        // Every execution is a shader's: the dispatches and the copies between them (shader "copy").
        CHECK(count == m["cost"]["dispatches"].get<int>() + m["copies_per_step"].get<int>());
    }
}

TEST_CASE("kiln bench --stream --vram-budget with activations over the binding limit: row chunks, bitwise",
          "[apps][bench][vulkan]") {
    // dit-tiny at 128 px, batch 1: the MLP hidden value [1, 64, 256] f32 is 64 KiB, the residual stream 16 KiB.
    TmpDir tmp("split");
    const std::string json = (tmp.path / "bench.json").string();
    setenv("KILN_MAX_BINDING_RANGE", "32768", 1);
    Run r = run_kiln(tmp.path,
                     "bench --synthetic dit-tiny --size 128 --blocks 3 --batch 1 --mode regional --steps 1 --warmup 0 "
                     "--stream --vram-budget 1M --json " +
                         json);
    unsetenv("KILN_MAX_BINDING_RANGE");
    INFO(r.err);
    REQUIRE(r.rc == 0);
    std::ifstream f(json);
    auto j = nlohmann::json::parse(f);
    REQUIRE(j["modes"].size() == 1);
    CHECK(j["modes"][0]["split_ops"].get<int>() > 0);
    CHECK(j["modes"][0]["split_dispatches"].get<int>() > j["modes"][0]["split_ops"].get<int>());
    CHECK(j["modes"][0]["activation_bytes_planned"].get<uint64_t>() > (64u << 10));
    REQUIRE(j["stream"].size() == 5);  // all, 1/2, 1/4, 2 blocks, and the given budget
    CHECK(j["stream"][4]["budget"] == "given");
    for (auto& row : j["stream"]) CHECK(row["bitwise_equal_to_all_resident"] == true);
}

TEST_CASE("kiln bench --block-layout: weight-major (one recording) or block-major windows past the binding limit",
          "[apps][bench][vulkan]") {
    // dit-tiny's 28 blocks hold 8.5 MiB of weights; the largest weight, each block's class-embedding table (read by
    // a storage-buffer shader), 3.4 MiB for all 28. A 4 MiB binding holds every weight's instances, whichever linear
    // variant this device's table picks, but not the kind.
    TmpDir tmp("layout");
    const std::string json = (tmp.path / "bench.json").string();
    auto bench = [&](const std::string& layout) {
        setenv("KILN_MAX_BINDING_RANGE", "4194304", 1);
        Run r = run_kiln(
            tmp.path, "bench --synthetic dit-tiny --mode regional --steps 1 --warmup 0 " + layout + " --json " + json);
        unsetenv("KILN_MAX_BINDING_RANGE");
        INFO(r.err);
        REQUIRE(r.rc == 0);
        std::ifstream f(json);
        return nlohmann::json::parse(f)["modes"][0];
    };
    auto weight = bench("");
    CHECK(weight["block_weights"].get<std::string>().find("weight-major") != std::string::npos);
    CHECK(weight["block_kinds_weight_major"] == 1);
    CHECK(weight["command_buffers_recorded"] == 3);  // the block at both parities + the step
    // Windows by offset, asked for: automatic selection takes them on a CPU device only (a GPU selects a kind over one
    // binding by device address, one recording).
    auto block = bench("--block-layout block --block-weights offset");
    CHECK(block["block_weights"].get<std::string>().find("bound windows") != std::string::npos);
    CHECK(block["block_kinds_weight_major"] == 0);
    CHECK(block["command_buffers_recorded"].get<int>() > 2);
    for (auto* m : {&weight, &block}) CHECK((*m)["copies_per_step"] == 0);
}

TEST_CASE("kiln bench --interleave: rounds of one step per mode, ratios to the first, outputs compared",
          "[apps][bench][vulkan]") {
    TmpDir tmp("interleave");
    auto j = bench_json(tmp.path,
                        "--synthetic dit-tiny --blocks 2 --mode eager,regional --steps 0 --warmup 0 --interleave 3",
                        "bench")["interleaved"];
    CHECK(j["rounds"] == 3);
    REQUIRE(j["modes"].size() == 2);
    CHECK(j["modes"][0]["mode"] == "eager");
    CHECK(j["modes"][1]["mode"] == "regional");
    for (auto& m : j["modes"]) {
        REQUIRE(m["step_ms"].size() == 3);
        REQUIRE(m["cpu_ms"].size() == 3);
        for (auto& t : m["step_ms"]) CHECK(t.get<double>() > 0);
        for (auto& t : m["cpu_ms"]) CHECK(t.get<double>() > 0);
        // Eager runs the graph as built, regional the fused one: fusion keeps every value bitwise.
        CHECK(m["bitwise_equal_to_first"] == true);
    }
    for (auto& x : j["modes"][0]["wall_ratio_to_first"]) CHECK(x.get<double>() == 1.0);
    const double ratio = j["modes"][1]["wall_ratio_to_first"][1];
    CHECK(ratio == j["modes"][1]["step_ms"][1].get<double>() / j["modes"][0]["step_ms"][1].get<double>());

    // The rounds run with the rows' fusion: unfused with --fuse off (the interleave's executors had read the
    // environment, so they ran fused while the rows above them did not).
    auto jo = bench_json(
        tmp.path, "--synthetic dit-tiny --blocks 2 --mode eager,full --steps 0 --warmup 0 --fuse off --interleave 1",
        "off");
    REQUIRE(jo["modes"].size() == 2);
    REQUIRE(jo["interleaved"]["modes"].size() == 2);
    const int eager_dispatches = jo["modes"][0]["dispatches_per_step"];
    for (int m = 0; m < 2; ++m) {
        CHECK(jo["interleaved"]["modes"][m]["dispatches_per_step"] == jo["modes"][m]["dispatches_per_step"]);
        CHECK(jo["modes"][m]["dispatches_per_step"] == eager_dispatches);  // nothing fused in either mode
    }
    Run both = run_kiln(tmp.path, "bench --synthetic dit-tiny --mode eager,full --fuse both --interleave 2");
    CHECK(both.rc != 0);
    CHECK(both.err.find("--interleave runs one fusion setting") != std::string::npos);

    Run one = run_kiln(tmp.path, "bench --synthetic dit-tiny --mode full --interleave 2");
    CHECK(one.rc != 0);
    CHECK(one.err.find("--interleave compares modes") != std::string::npos);
    Run bad = run_kiln(tmp.path, "bench --synthetic dit-tiny --mode full,fast");
    CHECK(bad.rc != 0);
    CHECK(bad.err.find("unknown mode 'fast'") != std::string::npos);
}

TEST_CASE("kiln generate --profile with the device loop prints step completions and memory peaks",
          "[apps][bench][vulkan]") {
    TmpDir tmp("profile_dev");
    Run r = run_kiln(tmp.path, "generate --class-labels 3 --steps 3 --profile -o " + (tmp.path / "out.png").string());
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("profile: loop on the device, 3 steps") != std::string::npos);
    CHECK(r.err.find("host RSS") != std::string::npos);
    // A new cache: the kernel table is measured first, and says so (seconds on a CPU device); then never again.
    CHECK(r.err.find("kiln: measuring the linear kernels for ") != std::string::npos);
    CHECK(r.err.find("kiln: linear kernels for ") != std::string::npos);
    Run again = run_kiln(tmp.path, "generate --class-labels 3 --steps 1 -o " + (tmp.path / "out2.png").string());
    REQUIRE(again.rc == 0);
    CHECK(again.err.find("measuring the linear kernels") == std::string::npos);
}

TEST_CASE("kiln generate --profile --host-loop prints the per-step figures and memory peaks", "[apps][bench][vulkan]") {
    TmpDir tmp("profile");
    Run r = run_kiln(tmp.path,
                     "generate --class-labels 3 --steps 3 --profile --host-loop -o " + (tmp.path / "out.png").string());
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("idle_pre") != std::string::npos);
    CHECK(r.err.find("barriers") != std::string::npos);
    CHECK(r.err.find("host RSS") != std::string::npos);
    int rows = 0;
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);)
        for (const char* step : {"      0 ", "      1 ", "      2 "})
            if (line.rfind(step, 0) == 0) rows++;
    CHECK(rows == 3);
}

TEST_CASE("kiln bench --kernels prints GFLOP/s of every linear variant and the pick", "[apps][bench][kernels]") {
    TmpDir d("kernels");
    auto kiln = [&](const std::string& args, int& rc) {
        const std::string cmd =
            "env -u KILN_CACHE_DIR -u KILN_PIPELINE_CACHE -u KILN_LINEAR XDG_CACHE_HOME=" + d.path.string() + " " +
            kiln::test::cli_binary("kiln") + " " + args + " 2>&1";
        FILE* p = ::popen(cmd.c_str(), "r");
        REQUIRE(p);
        std::string out;
        char buf[4096];
        for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
        int status = ::pclose(p);
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return out;
    };
    int rc = -1;
    std::string out = kiln("bench --kernels --shape 70x96x64 --shape 2x96x64 --kernel-dtypes f32,f16 --steps 1", rc);
    INFO(out);
    CHECK(rc == 0);
    for (const char* s : {"reg", "smem64", "smem128", "coopmat", "tex", "pick", "f32", "f16", "70x96x64", "2x96x64"})
        CHECK(out.find(s) != std::string::npos);
    // Custom shapes are printed, not saved as the device's table.
    bool saved = false;
    if (fs::exists(d.path / "kiln"))
        for (auto& e : fs::directory_iterator(d.path / "kiln"))
            saved |= e.path().filename().string().rfind("linear-", 0) == 0;
    CHECK(!saved);
    out = kiln("bench --kernels --shape 3x4x5", rc);
    CHECK(rc != 0);
    CHECK(out.find("--shape '3x4x5'") != std::string::npos);
}

TEST_CASE("kiln bench --fuse both: every mode unfused, then fused, with fewer dispatches", "[apps][bench][vulkan]") {
    TmpDir tmp("fuse");
    const std::string json = (tmp.path / "bench.json").string();
    Run r = run_kiln(
        tmp.path, "bench --synthetic dit-tiny --blocks 2 --mode all --steps 1 --warmup 0 --fuse both --json " + json);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    std::ifstream f(json);
    auto j = nlohmann::json::parse(f);
    REQUIRE(j["modes"].size() == 6);
    for (size_t i = 0; i < 6; i += 2) {
        const auto &plain = j["modes"][i], &fused = j["modes"][i + 1];
        CAPTURE(plain["mode"].get<std::string>());
        CHECK(plain["mode"] == fused["mode"]);
        CHECK(plain["nodes_fused"] == 0);
        CHECK(fused["nodes_fused"].get<int>() > 0);
        CHECK(fused["dispatches_per_step"].get<int>() < plain["dispatches_per_step"].get<int>());
    }
    CHECK(run_kiln(tmp.path, "bench --synthetic dit-tiny --blocks 2 --fuse sometimes").rc != 0);
}
