// `kiln generate` under injected device faults (the test hooks KILN_TEST_DEVICE_MEMORY_LIMIT and
// KILN_TEST_DEVICE_LOST_AFTER): one clear error line, a non-zero exit, no PNG, no hang.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

TEST_CASE("kiln generate: out of device memory and a lost device are one clear error", "[apps][generate][faults]") {
    const fs::path tmp = fs::temp_directory_path() / ("kiln_faults_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    const fs::path png = tmp / "out.png", ef = tmp / "stderr.txt";
    auto run = [&](const std::string& env, std::string* err) {
        const std::string cmd = env + " timeout 300 " + std::string(KILN_BUILD_DIR) +
                                "/apps/kiln generate --class-labels 1,2 --grid --steps 3 -o " + png.string() + " 2>" +
                                ef.string();
        int st = std::system(cmd.c_str());
        std::ifstream f(ef);
        err->assign(std::istreambuf_iterator<char>(f), {});
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    std::string err;
    CHECK(run("KILN_TEST_DEVICE_MEMORY_LIMIT=1048576", &err) == 1);
    INFO(err);
    CHECK(err.find("kiln: error: out of GPU memory") != std::string::npos);
    CHECK(!fs::exists(png));
    for (const char* after : {"0", "2"}) {
        CHECK(run(std::string("KILN_TEST_DEVICE_LOST_AFTER=") + after, &err) == 1);
        INFO(err);
        CHECK(err.find("kiln: error: ") != std::string::npos);
        CHECK(err.find("VK_ERROR_DEVICE_LOST") != std::string::npos);
        CHECK(!fs::exists(png));
    }
    CHECK(run("", &err) == 0);  // the same command without the hooks
    CHECK(fs::exists(png));
    std::error_code ec;
    fs::remove_all(tmp, ec);
}
