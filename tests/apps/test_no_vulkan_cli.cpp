// Vulkan is loaded at run time (runtime/vulkan/loader.h): without a loader, or with a loader that finds no driver,
// `kiln devices` and `kiln generate` print one error line and exit 1, with no PNG. The loader is hidden through
// KILN_VULKAN_LOADER (a file that does not exist), the drivers through the loader's VK_ICD_FILENAMES.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;

TEST_CASE("kiln without a Vulkan loader or device: one error line, exit 1", "[apps][vulkan_loader]") {
    kiln::test::TempDir tmp("kiln_no_vulkan");
    const std::string png = tmp / "out.png", ef = tmp / "stderr.txt";
    auto run = [&](const std::string& env, const std::string& args, std::string* err) {
        const std::string cmd = env + " timeout 120 " + kiln::test::cli_binary("kiln") + " " + args + " 2>" + ef;
        const int st = std::system(cmd.c_str());
        std::ifstream f(ef);
        err->assign(std::istreambuf_iterator<char>(f), {});
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    const std::string generate = "generate --class-labels 3 --steps 2 -o " + png;
    const std::string no_loader = "KILN_VULKAN_LOADER=/nonexistent/libvulkan.so.1";
    const std::string loader_line =
        "kiln: error: no Vulkan loader found (tried /nonexistent/libvulkan.so.1; install one, e.g. Debian's "
        "libvulkan1, or set KILN_VULKAN_LOADER to its path)\n";
    const std::string device_line =
        "kiln: error: no Vulkan device (the Vulkan loader found no Vulkan 1.2 driver; install your GPU's Vulkan "
        "driver, or Mesa's lavapipe for a CPU device: apt-get install mesa-vulkan-drivers)\n";
    std::string err;
    for (const std::string& args : {std::string("devices"), generate}) {
        INFO(args);
        CHECK(run(no_loader, args, &err) == 1);
        CHECK(err == loader_line);
        CHECK(run("VK_ICD_FILENAMES=/nonexistent", args, &err) == 1);
        CHECK(err == device_line);
        CHECK(!fs::exists(png));
    }
    // The same commands with the loader and its drivers: the failures above came from hiding them.
    CHECK(run("", "devices", &err) == 0);
    CHECK(run("", generate, &err) == 0);
    CHECK(fs::exists(png));
}
