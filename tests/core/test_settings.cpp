// The settings table (runtime/core/settings.h): every variable parses its valid values into the field it documents,
// a bad value is one error line naming the variable, and unset (or empty) variables leave the defaults.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/settings.h"

using namespace kiln;

namespace {
Settings parse(const std::map<std::string, std::string>& env) {
    return settings_from([&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
    });
}
}  // namespace

TEST_CASE("settings: unset variables leave the defaults", "[settings]") {
    const Settings s = parse({});
    CHECK(s.context.device == -1);
    CHECK(!s.context.validation);
    CHECK(s.context.validation_sync);
    CHECK(!s.context.validation_gpu);
    CHECK(s.context.transfer_queue == "0");
    CHECK(s.context.pipeline_cache);
    CHECK(!s.context.skip_pipeline_cache_file);
    CHECK(s.context.cache_dir.empty());
    CHECK(s.context.pipeline_threads == 0);
    CHECK(s.exec.fuse == "1");
    CHECK(!s.exec.act_f16);
    CHECK(s.exec.block_weights == "auto");
    CHECK(s.exec.block_layout == "auto");
    CHECK(s.exec.stream_in_place == -1);
    CHECK(s.exec.select_advance);
    CHECK(s.exec.linear == "auto");
    CHECK(s.exec.conv2d == "auto");
    CHECK(s.exec.attention == "auto");
    CHECK(s.device_loop);
    CHECK(s.default_model.empty());
    CHECK(s.hf_home.empty());
    CHECK(s.test.device_memory_limit == 0);
    CHECK(s.test.device_lost_after == -1);
    CHECK(s.test.max_storage_buffers == 0);
    CHECK(s.test.max_texel_elements == 0);
    CHECK(s.test.max_shared_memory == 0);
    CHECK(s.test.max_binding_range == 0);
    CHECK(!s.test.discrete);
    CHECK(s.test.convert_delay_ms == 0);
    CHECK(s.test.live == nullptr);
    // An empty value is unset.
    CHECK(parse({{"KILN_FUSE", ""}, {"KILN_STREAM_IN_PLACE", ""}}).exec.fuse == "1");
}

TEST_CASE("settings: every variable parses into its field", "[settings]") {
    const Settings s = parse({{"KILN_DEVICE", "2"},
                              {"KILN_VALIDATION", "1"},
                              {"KILN_VALIDATION_SYNC", "0"},
                              {"KILN_VALIDATION_GPU", "1"},
                              {"KILN_TRANSFER_QUEUE", "split"},
                              {"KILN_PIPELINE_CACHE", "0"},
                              {"KILN_CACHE_DIR", "/tmp/c"},
                              {"KILN_PIPELINE_THREADS", "3"},
                              {"KILN_FUSE", "all"},
                              {"KILN_ACT_F16", "1"},
                              {"KILN_BLOCK_WEIGHTS", "copy"},
                              {"KILN_BLOCK_LAYOUT", "weight"},
                              {"KILN_STREAM_IN_PLACE", "0"},
                              {"KILN_SELECT_ADVANCE", "0"},
                              {"KILN_LINEAR", "smem128"},
                              {"KILN_CONV2D", "tex"},
                              {"KILN_ATTENTION", "buf"},
                              {"KILN_DEVICE_LOOP", "0"},
                              {"KILN_DEFAULT_MODEL", "/m/sd3.kiln"},
                              {"KILN_MAX_BINDING_RANGE", "4096"},
                              {"KILN_TEST_MAX_STORAGE_BUFFERS", "8"},
                              {"KILN_TEST_MAX_TEXEL_ELEMENTS", "1000"},
                              {"KILN_TEST_MAX_SHARED_MEMORY", "8192"},
                              {"KILN_TEST_DISCRETE", "1"},
                              {"KILN_TEST_DEVICE_MEMORY_LIMIT", "1048576"},
                              {"KILN_TEST_DEVICE_LOST_AFTER", "5"},
                              {"KILN_TEST_CONVERT_DELAY_MS", "20"}});
    CHECK(s.context.device == 2);
    CHECK(s.context.validation);
    CHECK(!s.context.validation_sync);
    CHECK(s.context.validation_gpu);
    CHECK(s.context.transfer_queue == "split");
    CHECK(!s.context.pipeline_cache);
    CHECK(s.context.cache_dir == "/tmp/c");
    CHECK(s.context.pipeline_threads == 3);
    CHECK(s.exec.fuse == "all");
    CHECK(s.exec.act_f16);
    CHECK(s.exec.block_weights == "copy");
    CHECK(s.exec.block_layout == "weight");
    CHECK(s.exec.stream_in_place == 0);
    CHECK(!s.exec.select_advance);
    CHECK(s.exec.linear == "smem128");
    CHECK(s.exec.conv2d == "tex");
    CHECK(s.exec.attention == "buf");
    CHECK(!s.device_loop);
    CHECK(s.default_model == "/m/sd3.kiln");
    CHECK(s.test.max_binding_range == 4096);
    CHECK(s.test.max_storage_buffers == 8);
    CHECK(s.test.max_texel_elements == 1000);
    CHECK(s.test.max_shared_memory == 8192);
    CHECK(s.test.discrete);
    CHECK(s.test.device_memory_limit == 1048576);
    CHECK(s.test.device_lost_after == 5);
    CHECK(s.test.convert_delay_ms == 20);
    CHECK(parse({{"KILN_STREAM_IN_PLACE", "1"}}).exec.stream_in_place == 1);
    CHECK(parse({{"KILN_VALIDATION", "yes"}}).context.validation);  // any value but 0
    CHECK(!parse({{"KILN_VALIDATION", "0"}}).context.validation);
    CHECK(parse({{"KILN_TEST_DEVICE_LOST_AFTER", "-1"}}).test.device_lost_after == -1);
}

TEST_CASE("settings: the cache folder is KILN_CACHE_DIR, else XDG_CACHE_HOME/kiln, else HOME/.cache/kiln",
          "[settings]") {
    CHECK(parse({{"HOME", "/h"}}).context.cache_dir == "/h/.cache/kiln");
    CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}}).context.cache_dir == "/x/kiln");
    CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"KILN_CACHE_DIR", "/k"}}).context.cache_dir == "/k");
    CHECK(parse({{"KILN_CACHE_DIR", "/k"}}).context.cache_dir == "/k");
}

TEST_CASE("settings: the Hugging Face folder is HF_HOME, else XDG_CACHE_HOME/huggingface, else ~/.cache/...",
          "[settings]") {
    CHECK(parse({{"HOME", "/h"}}).hf_home == "/h/.cache/huggingface");
    CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}}).hf_home == "/x/huggingface");
    CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"HF_HOME", "/f"}}).hf_home == "/f");
    CHECK(parse({{"HF_HOME", "/f"}}).hf_home == "/f");
    // KILN_CACHE_DIR moves Kiln's cache only; HF_HOME moves the Hugging Face folder only.
    const Settings s = parse({{"HOME", "/h"}, {"KILN_CACHE_DIR", "/k"}, {"HF_HOME", "/f"}});
    CHECK(s.context.cache_dir == "/k");
    CHECK(s.hf_home == "/f");
    CHECK(parse({{"HOME", "/h"}, {"HF_HOME", "/f"}}).context.cache_dir == "/h/.cache/kiln");
}

TEST_CASE("settings: a bad value is one error line naming the variable and what it accepts", "[settings]") {
    const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
        {"KILN_DEVICE", "gpu", "KILN_DEVICE='gpu' (a device index, or -1 for the best)"},
        {"KILN_TRANSFER_QUEUE", "2", "KILN_TRANSFER_QUEUE='2' (0, 1 or split)"},
        {"KILN_PIPELINE_THREADS", "two", "KILN_PIPELINE_THREADS='two' (a thread count, 1 to 256)"},
        {"KILN_PIPELINE_THREADS", "0", "KILN_PIPELINE_THREADS='0' (a thread count, 1 to 256)"},
        {"KILN_FUSE", "2", "KILN_FUSE='2' (0, 1 or all)"},
        {"KILN_ACT_F16", "yes", "KILN_ACT_F16='yes' (0 or 1)"},
        {"KILN_BLOCK_WEIGHTS", "fast", "KILN_BLOCK_WEIGHTS='fast' (auto, offset, device or copy)"},
        {"KILN_BLOCK_LAYOUT", "rows", "KILN_BLOCK_LAYOUT='rows' (auto, block or weight)"},
        {"KILN_STREAM_IN_PLACE", "2", "KILN_STREAM_IN_PLACE='2' (0 or 1)"},
        {"KILN_SELECT_ADVANCE", "on", "KILN_SELECT_ADVANCE='on' (0 or 1)"},
        {"KILN_LINEAR", "fast",
         "KILN_LINEAR='fast' (auto, reg, smem, smem64, smem128, coopmat, coopmat128, tex, gemm, gemm128, coopmat_sk, "
         "gemm_sk, gemv or coopmat2)"},
        {"KILN_CONV2D", "img", "KILN_CONV2D='img' (auto, buf or tex)"},
        {"KILN_ATTENTION", "fast", "KILN_ATTENTION='fast' (auto, coopmat4, coopmat, flash, rows, buf or tex)"},
        {"KILN_MAX_BINDING_RANGE", "4K", "KILN_MAX_BINDING_RANGE='4K' (a whole number, 0 or more)"},
        {"KILN_TEST_MAX_STORAGE_BUFFERS", "-3", "KILN_TEST_MAX_STORAGE_BUFFERS='-3' (a whole number, 0 or more)"},
        {"KILN_TEST_MAX_TEXEL_ELEMENTS", "x", "KILN_TEST_MAX_TEXEL_ELEMENTS='x' (a whole number, 0 or more)"},
        {"KILN_TEST_DISCRETE", "yes", "KILN_TEST_DISCRETE='yes' (0 or 1)"},
        {"KILN_TEST_DEVICE_MEMORY_LIMIT", "-1", "KILN_TEST_DEVICE_MEMORY_LIMIT='-1' (a whole number, 0 or more)"},
        {"KILN_TEST_DEVICE_LOST_AFTER", "-2", "KILN_TEST_DEVICE_LOST_AFTER='-2' (a count, or -1 for never)"},
        {"KILN_TEST_CONVERT_DELAY_MS", "1s", "KILN_TEST_CONVERT_DELAY_MS='1s' (milliseconds, 0 or more)"},
    };
    for (const auto& [name, value, message] : bad) {
        CAPTURE(name, value);
        try {
            parse({{name, value}});
            FAIL("no error");
        } catch (const Error& e) {
            const std::string what = e.what();
            CHECK(what == message);
            CHECK(what.find('\n') == std::string::npos);
        }
    }
}

TEST_CASE("settings: the table names each variable once, documented, KILN_TEST_* marked test-only", "[settings]") {
    std::set<std::string> names;
    for (const SettingInfo& row : settings_table()) {
        CAPTURE(row.name);
        CHECK(names.insert(row.name).second);
        CHECK(*row.type);
        CHECK(*row.effect);
        CHECK(row.apply != nullptr);
        if (std::string(row.name).rfind("KILN_TEST_", 0) == 0) CHECK(row.test_only);
    }
    // Every KILN_* variable Kiln's product code read before the table, each now a row.
    for (const char* n : {"KILN_DEVICE",
                          "KILN_VALIDATION",
                          "KILN_VALIDATION_SYNC",
                          "KILN_TRANSFER_QUEUE",
                          "KILN_PIPELINE_CACHE",
                          "KILN_CACHE_DIR",
                          "KILN_PIPELINE_THREADS",
                          "KILN_FUSE",
                          "KILN_ACT_F16",
                          "KILN_BLOCK_WEIGHTS",
                          "KILN_BLOCK_LAYOUT",
                          "KILN_STREAM_IN_PLACE",
                          "KILN_SELECT_ADVANCE",
                          "KILN_LINEAR",
                          "KILN_CONV2D",
                          "KILN_ATTENTION",
                          "KILN_DEVICE_LOOP",
                          "KILN_DEFAULT_MODEL",
                          "HF_HOME",
                          "KILN_MAX_BINDING_RANGE",
                          "KILN_TEST_MAX_STORAGE_BUFFERS",
                          "KILN_TEST_MAX_TEXEL_ELEMENTS",
                          "KILN_TEST_MAX_SHARED_MEMORY",
                          "KILN_TEST_DEVICE_MEMORY_LIMIT",
                          "KILN_TEST_DEVICE_LOST_AFTER",
                          "KILN_TEST_CONVERT_DELAY_MS"})
        CHECK(names.count(n) == 1);
}
