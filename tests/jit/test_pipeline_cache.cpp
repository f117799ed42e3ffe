// The pipeline cache file: a second run loads what the first saved; corrupt, foreign and stale files are
// ignored (the run goes on and the file is rewritten); an unwritable folder or KILN_PIPELINE_CACHE=0 fails nothing.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/vulkan/context.h"
#include "runtime/vulkan/pipeline.h"
#include "runtime/vulkan/pipeline_cache.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
// A context that neither reads nor writes the pipeline cache file (kiln bench --no-pipeline-cache).
Settings no_cache_file() {
    Settings s = test::settings();
    s.context.skip_pipeline_cache_file = true;
    return s;
}

// Points the cache at a fresh temporary XDG_CACHE_HOME for one test; restores the environment after.
struct TempCacheHome {
    fs::path dir;
    std::vector<std::pair<std::string, std::string>> saved;
    explicit TempCacheHome(const std::string& tag) {
        dir = fs::temp_directory_path() / ("kiln-pipeline-cache-" + tag + "-" + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
        for (const char* name : {"XDG_CACHE_HOME", "KILN_CACHE_DIR", "KILN_PIPELINE_CACHE"}) {
            const char* v = std::getenv(name);
            saved.push_back({name, v ? v : std::string("\x01")});
            ::unsetenv(name);
        }
        ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
    }
    ~TempCacheHome() {
        for (auto& [name, v] : saved) v == "\x01" ? ::unsetenv(name.c_str()) : ::setenv(name.c_str(), v.c_str(), 1);
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

// Creates a handful of pipelines (none shared with an earlier Kernels); returns the milliseconds it took.
double create_pipelines(vk::Context& ctx) {
    ctx.set_pipeline_reuse(false);
    auto t0 = std::chrono::steady_clock::now();
    vk::Kernels k(ctx);
    for (const char* name : {"gelu", "silu", "add", "softmax", "layer_norm", "linear_f32"}) k.get(name);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<char> read_all(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), {});
}
void write_all(const std::string& p, const std::vector<char>& b) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(b.data(), (std::streamsize)b.size());
}
}  // namespace

TEST_CASE("pipeline cache: the second run loads what the first saved", "[pipeline_cache]") {
    TempCacheHome home("warm");
    const int errors = vk::Context::validation_errors();
    std::string path;
    double cold = 0, warm = 0;
    const fs::path legacy = home.dir / "kiln" / "pipelines-0123456789abcdef0123456789abcdef.bin";  // earlier naming
    fs::create_directories(legacy.parent_path());
    write_all(legacy.string(), {'x'});
    {
        vk::Context ctx{test::settings()};
        path = ctx.pipeline_cache_info().path;
        CHECK(path.rfind(home.dir.string() + "/kiln/pipelines-", 0) == 0);
        CHECK(ctx.pipeline_cache_info().status == "missing");
        cold = create_pipelines(ctx);
    }
    REQUIRE(fs::exists(path));
    CHECK(!fs::exists(legacy));
    const auto file = read_all(path);
    REQUIRE(file.size() >= 64 + sizeof(VkPipelineCacheHeaderVersionOne));
    CHECK(std::memcmp(file.data(), "KILNPC01", 8) == 0);
    for (auto& e : fs::directory_iterator(home.dir / "kiln"))  // the temporary file was renamed
        CHECK(e.path().string().find(".tmp") == std::string::npos);
    {
        vk::Context ctx{test::settings()};
        CHECK(ctx.pipeline_cache_info().status == "loaded");
        CHECK(ctx.pipeline_cache_info().loaded_bytes == file.size() - 64);
        warm = create_pipelines(ctx);
    }
    // Whether warm is faster is up to the driver: Mesa 22.3's lavapipe stores only the 32-byte header.
    std::printf("pipeline cache: 6 pipelines cold %.1f ms, warm %.1f ms (%zu bytes of driver data)\n", cold, warm,
                file.size() - 64);
    CHECK(vk::Context::validation_errors() == errors);
}

TEST_CASE("pipeline cache: corrupt, foreign and stale files are ignored and replaced", "[pipeline_cache]") {
    TempCacheHome home("bad");
    std::string path;
    {
        vk::Context ctx{test::settings()};
        path = ctx.pipeline_cache_info().path;
        create_pipelines(ctx);
    }
    const auto good = read_all(path);
    REQUIRE(good.size() > 64);
    vk::PipelineCacheKey key;
    {
        vk::Context ctx{no_cache_file()};
        key = vk::pipeline_cache_key(ctx.physical());
    }
    const std::vector<char> driver_data(good.begin() + 64, good.end());
    auto with = [&](const vk::PipelineCacheKey& k, const std::vector<char>& data) {
        std::string why;
        REQUIRE(vk::write_pipeline_cache(path, k, data, why));
    };
    auto status_of_next_run = [&] {
        vk::Context ctx{test::settings()};
        std::string s = ctx.pipeline_cache_info().status;
        CHECK(ctx.pipeline_cache_info().loaded_bytes == 0);
        create_pipelines(ctx);  // runs normally on an empty cache
        return s;
    };

    SECTION("garbage") { write_all(path, std::vector<char>(1000, 'x')); }
    SECTION("truncated") { write_all(path, std::vector<char>(good.begin(), good.end() - 1)); }
    SECTION("empty") { write_all(path, {}); }
    SECTION("flipped data byte") {
        auto b = good;
        b.back() ^= 0x5a;
        write_all(path, b);
    }
    SECTION("foreign device in Kiln's header") {
        auto k = key;
        k.device_id ^= 0x1234;
        with(k, driver_data);
    }
    SECTION("foreign device in the driver's header") {
        auto d = driver_data;
        VkPipelineCacheHeaderVersionOne vh;
        std::memcpy(&vh, d.data(), sizeof vh);
        vh.vendorID ^= 0xffff;
        vh.pipelineCacheUUID[0] ^= 1;
        std::memcpy(d.data(), &vh, sizeof vh);
        with(key, d);
    }
    SECTION("stale: another build's shaders") {
        auto k = key;
        k.spirv_hash ^= 1;
        with(k, driver_data);
        CHECK(status_of_next_run() == "stale");
        CHECK(vk::Context(test::settings()).pipeline_cache_info().status ==
              "loaded");  // replaced by this build's cache
        return;
    }
    SECTION("stale: another driver version") {
        auto k = key;
        k.driver_version ^= 1;
        with(k, driver_data);
        CHECK(status_of_next_run() == "stale");
        CHECK(vk::Context(test::settings()).pipeline_cache_info().status == "loaded");
        return;
    }
    const std::string s = status_of_next_run();
    INFO(s);
    CHECK((s.rfind("corrupt: ", 0) == 0 || s.rfind("foreign: ", 0) == 0));
    CHECK(vk::Context(test::settings()).pipeline_cache_info().status ==
          "loaded");  // rewritten, and loaded by the run after
}

TEST_CASE("pipeline cache: an unwritable folder or KILN_PIPELINE_CACHE=0 fails nothing", "[pipeline_cache]") {
    TempCacheHome home("ro");
    SECTION("cache folder under a regular file") {
        write_all((home.dir / "file").string(), {'x'});
        ::setenv("XDG_CACHE_HOME", (home.dir / "file" / "sub").c_str(), 1);
        {
            vk::Context ctx{test::settings()};
            CHECK(ctx.pipeline_cache_info().status == "missing");
            create_pipelines(ctx);
        }  // the save fails with a warning, not an exception
        CHECK(!fs::exists(home.dir / "file" / "sub"));
    }
    SECTION("KILN_PIPELINE_CACHE=0") {
        ::setenv("KILN_PIPELINE_CACHE", "0", 1);
        {
            vk::Context ctx{test::settings()};
            CHECK(ctx.pipeline_cache_info().status == "disabled");
            CHECK(ctx.pipeline_cache_info().path.empty());
            create_pipelines(ctx);
        }
        CHECK(!fs::exists(home.dir / "kiln"));
    }
    SECTION("Context(..., pipeline_cache = 0)") {
        {
            vk::Context ctx{no_cache_file()};
            CHECK(ctx.pipeline_cache_info().status == "disabled");
            create_pipelines(ctx);
        }
        CHECK(!fs::exists(home.dir / "kiln"));
    }
    SECTION("cold start through an empty cache, merged after") {
        vk::Context ctx{test::settings()};
        ctx.set_cold_pipeline_cache(true);
        VkPipelineCache cold = ctx.pipeline_cache();
        create_pipelines(ctx);
        ctx.set_cold_pipeline_cache(false);
        CHECK(ctx.pipeline_cache() != cold);
        create_pipelines(ctx);
    }
    SECTION("pipelines shared by the Kernels of one context, unless reuse is off or the start is cold") {
        vk::Context ctx{test::settings()};
        VkPipeline p;
        {
            vk::Kernels a(ctx);
            p = a.get("gelu").pipeline;
            CHECK(a.created() == 1);
        }
        vk::Kernels b(ctx);  // a is gone; the context keeps the pipeline
        CHECK(b.get("gelu").pipeline == p);
        CHECK(b.created() == 0);
        CHECK(b.used() == 1);
        ctx.set_cold_pipeline_cache(true);
        vk::Kernels c(ctx);
        CHECK(c.get("gelu").pipeline != p);
        CHECK(c.created() == 1);
        ctx.set_cold_pipeline_cache(false);
        ctx.set_pipeline_reuse(false);
        vk::Kernels d(ctx);
        d.get("gelu");
        CHECK(d.created() == 1);
    }
}

TEST_CASE("deferred pipelines: compiled together on several threads, none left half-made after an error",
          "[pipeline_cache]") {
    vk::Context ctx{test::settings()};
    const std::vector<std::string> names = {"add", "mul", "silu", "gelu", "layer_norm", "select_advance"};
    {
        vk::Kernels k(ctx);
        k.defer(true);
        std::vector<const vk::Kernel*> got;
        for (auto& n : names) got.push_back(&k.get(n));
        for (auto* g : got) {
            CHECK(g->pipeline == VK_NULL_HANDLE);  // layouts only, until create_pending()
            CHECK(g->layout != VK_NULL_HANDLE);
        }
        CHECK(k.created() == (int)names.size());
        k.create_pending();
        for (auto* g : got) CHECK(g->pipeline != VK_NULL_HANDLE);
        CHECK(&k.get("add") == got[0]);  // the same kernel, not created again
    }
    // The context's pool now holds them: another Kernels finds them made.
    {
        vk::Kernels k(ctx);
        CHECK(k.get("mul").pipeline != VK_NULL_HANDLE);
        CHECK(k.created() == 0);
    }
    // A Kernels that dies with pipelines pending (an error between get() and create_pending()) takes them out of
    // the pool: the next one creates them rather than finding a kernel with no pipeline.
    {
        vk::Kernels k(ctx);
        k.defer(true);
        CHECK(k.get("scale").pipeline == VK_NULL_HANDLE);
    }
    {
        vk::Kernels k(ctx);
        CHECK(k.get("scale").pipeline != VK_NULL_HANDLE);
        CHECK(k.created() == 1);
    }
    // KILN_PIPELINE_THREADS: a bad value is an error naming it (the pending pipeline then leaves the pool), one
    // thread compiles everything in turn.
    {
        ::setenv("KILN_PIPELINE_THREADS", "two", 1);
        vk::Kernels k(ctx);
        k.defer(true);
        k.get("sub");
        CHECK_THROWS_WITH(k.create_pending(), Catch::Contains("KILN_PIPELINE_THREADS='two'"));
        ::setenv("KILN_PIPELINE_THREADS", "1", 1);
    }
    vk::Kernels k(ctx);
    k.defer(true);
    const vk::Kernel& sub = k.get("sub");
    CHECK(k.created() == 1);  // created anew: the failed one did not stay in the pool
    k.create_pending();
    ::unsetenv("KILN_PIPELINE_THREADS");
    CHECK(sub.pipeline != VK_NULL_HANDLE);
    CHECK(vk::Context::validation_errors() == 0);
}
