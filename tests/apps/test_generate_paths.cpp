// kiln generate's two ways to run: through the C API (every run but --profile, --host-loop included) and, for
// --profile, the C++ pipelines on a vk::Context. Both give the same PNG and dump, on the device loop and on the host.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
struct Result {
    int rc = -1;
    std::string err;
};

// Runs `kiln generate ARGS` through /bin/sh; stderr captured.
Result generate(const test::TempDir& tmp, const std::string& args) {
    const std::string err_file = tmp / "stderr.txt";
    const std::string cmd = kiln::test::cli_binary("kiln") + " generate " + args + " 2>" + err_file;
    const int status = std::system(cmd.c_str());
    Result r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(err_file);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    return r;
}

std::string bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}
}  // namespace

TEST_CASE("kiln generate: C API and --profile's C++ pipeline, the same PNG and dump", "[apps][generate][vulkan]") {
    test::TempDir tmp("kiln_paths");
    const std::string sd3 = "--model " + test::data_path("fixtures/sd3_pipeline") +
                            " --prompt 'a cat' --prompt 'a dog' --negative-prompt blurry --steps 2 --grid ";
    for (const std::string loop : {"", "--host-loop "}) {
        for (const std::string& base : {sd3, std::string("--class-labels 1,7 --steps 2 --grid ")}) {
            INFO(base << loop);
            Result api =
                generate(tmp, base + loop + "--dump " + (tmp / "api.safetensors") + " -o " + (tmp / "api.png"));
            INFO(api.err);
            REQUIRE(api.rc == 0);
            Result cxx = generate(
                tmp, base + loop + "--profile --dump " + (tmp / "cxx.safetensors") + " -o " + (tmp / "cxx.png"));
            INFO(cxx.err);
            REQUIRE(cxx.rc == 0);
            CHECK(cxx.err.find("profile:") != std::string::npos);
            const char* where = loop.empty() ? "loop on the device" : "loop on the host";
            CHECK(api.err.find(where) != std::string::npos);
            CHECK(cxx.err.find(where) != std::string::npos);
            CHECK(bytes(tmp / "api.png") == bytes(tmp / "cxx.png"));
            auto a = SafeTensors::open(tmp / "api.safetensors"), c = SafeTensors::open(tmp / "cxx.safetensors");
            REQUIRE(a.tensors().size() == c.tensors().size());
            for (const auto& info : a.tensors()) {
                const std::string& name = info.name;
                INFO(name);
                REQUIRE(c.find(name));
                CHECK(a.read(name).bytes == c.read(name).bytes);
            }
        }
    }
}
