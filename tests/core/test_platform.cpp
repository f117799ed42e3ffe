// runtime/core/platform.h: the same answers on every system (these tests run on Linux and, cross-built, under wine).
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "runtime/core/file_io.h"
#include "runtime/core/platform.h"
#include "tests/support/test_support.h"

using namespace kiln;

TEST_CASE("platform: glob_match is fnmatch without flags", "[platform]") {
    struct Case {
        const char* pattern;
        const char* name;
        bool match;
    };
    const Case cases[] = {
        {"*", "", true},
        {"*", "a/b", true},  // '*' crosses '/' (no FNM_PATHNAME)
        {"*.weight", "blocks.0.attn.weight", true},
        {"*.weight", "blocks.0.attn.bias", false},
        {"blocks.?.attn*", "blocks.7.attn.qkv", true},
        {"blocks.?.attn*", "blocks.17.attn.qkv", false},
        {"a[0-9]b", "a5b", true},
        {"a[0-9]b", "axb", false},
        {"a[!0-9]b", "axb", true},
        {"a[!0-9]b", "a5b", false},
        {"a[]]b", "a]b", true},
        {"a[b", "a[b", true},  // an unclosed '[' is itself
        {"a\\*b", "a*b", true},
        {"a\\*b", "axb", false},
        {"**x", "yyx", true},
        {"x*y*z", "x__y__", false},
    };
    for (const Case& c : cases) {
        CAPTURE(c.pattern, c.name);
        CHECK(platform::glob_match_builtin(c.pattern, c.name) == c.match);
        CHECK(platform::glob_match(c.pattern, c.name) == c.match);  // fnmatch itself on POSIX
    }
}

TEST_CASE("platform: numbers parse in the C locale, whole strings only", "[platform]") {
    double v = 0;
    CHECK((platform::parse_double("0.5", &v) && v == 0.5));
    CHECK((platform::parse_double("-1e-3", &v) && v == -1e-3));
    CHECK((platform::parse_double("+2", &v) && v == 2));
    CHECK_FALSE(platform::parse_double("0,5", &v));
    CHECK_FALSE(platform::parse_double("1.5x", &v));
    CHECK_FALSE(platform::parse_double("", &v));
    CHECK_FALSE(platform::parse_double("+-1", &v));
}

TEST_CASE("platform: files under a non-ASCII name: read at offsets, mapped, identified", "[platform]") {
    test::TempDir tmp("kiln_platform");
    const std::string dir = platform::utf8_string(tmp.path);
    const std::string path = dir + "/gr\xC3\xBC\xC3\x9F \xE6\x97\xA5.bin";  // "grüß 日.bin" in UTF-8
    std::string bytes(10000, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (char)(i * 7 + 3);
    {
        std::FILE* f = platform::fopen(path, "wb");
        REQUIRE(f);
        REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
        CHECK(platform::sync_file(f) == 0);
        std::fclose(f);
    }
    CHECK(std::filesystem::file_size(platform::utf8_path(path)) == bytes.size());

    const int fd = platform::open_read(path);
    REQUIRE(fd >= 0);
    char buf[100];
    CHECK(platform::pread(fd, buf, sizeof buf, 5000) == (int64_t)sizeof buf);
    CHECK(std::memcmp(buf, bytes.data() + 5000, sizeof buf) == 0);
    CHECK(platform::pread(fd, buf, sizeof buf, bytes.size()) == 0);  // at the end
    platform::FileInfo by_fd, by_path;
    REQUIRE(platform::file_info(fd, &by_fd));
    REQUIRE(platform::file_info(path, &by_path));
    CHECK(by_fd.size == bytes.size());
    CHECK(by_fd.regular);
    CHECK((by_fd.ino == by_path.ino && by_fd.dev == by_path.dev && by_fd.mtime_ns == by_path.mtime_ns));
    platform::close_file(fd);

    auto m = MappedFile::open(path);
    REQUIRE(m->size() == bytes.size());
    CHECK(std::memcmp(m->data(), bytes.data(), bytes.size()) == 0);
    std::string copy(300, '\0');
    m->read(copy.data(), copy.size(), 4090);  // across a page boundary; the pages are then dropped
    CHECK(copy == bytes.substr(4090, 300));
    CHECK(std::memcmp(m->data() + 4090, bytes.data() + 4090, 300) == 0);  // and read back from the file

    const FileStamp s = FileStamp::of(path);
    CHECK(s.size == bytes.size());
    s.check(path);
    platform::FileInfo missing;
    CHECK_FALSE(platform::file_info(dir + "/none", &missing));
    CHECK(platform::open_read(dir + "/none") < 0);
    CHECK(platform::writable_dir(tmp.path));
}

TEST_CASE("platform: environment variables round-trip as UTF-8", "[platform]") {
    const std::string v = "C:/caf\xC3\xA9/kiln";  // "C:/café/kiln"
    platform::set_env("KILN_PLATFORM_TEST_VAR", v);
    CHECK(platform::env("KILN_PLATFORM_TEST_VAR") == v);
    platform::set_env("KILN_PLATFORM_TEST_VAR", std::nullopt);
    CHECK_FALSE(platform::env("KILN_PLATFORM_TEST_VAR").has_value());
    CHECK(platform::physical_memory() > 0);
    CHECK(platform::page_size() >= 4096);
    CHECK(platform::peak_rss() > 0);
}

// The advice that ends "no Vulkan device (...)" and "no Vulkan loader found (...)", for every system (the function
// takes the system, so Linux tests Windows' text too). tests/apps/test_no_vulkan_cli.cpp and
// tests/capi/test_capi_no_vulkan.cpp check the whole lines as the CLI and the C API print them on Linux.
TEST_CASE("platform: what to install for Vulkan, per system", "[platform]") {
    using platform::Os;
    SECTION("Debian-like Linux: the packages") {
        CHECK(platform::vulkan_driver_advice(Os::gnu_linux) ==
              "install your GPU's Vulkan driver, or Mesa's lavapipe for a CPU device: apt-get install "
              "mesa-vulkan-drivers");
        CHECK(platform::vulkan_loader_advice(Os::gnu_linux) ==
              "install one, e.g. Debian's libvulkan1, or set KILN_VULKAN_LOADER to its path");
    }
    SECTION("Windows: the GPU vendor's driver, which brings vulkan-1.dll") {
        CHECK(platform::vulkan_driver_advice(Os::windows) ==
              "install or update your GPU vendor's graphics driver (NVIDIA, AMD or Intel), which includes its Vulkan "
              "driver");
        CHECK(platform::vulkan_loader_advice(Os::windows) ==
              "install or update your GPU vendor's graphics driver (NVIDIA, AMD or Intel), which installs "
              "vulkan-1.dll, or set KILN_VULKAN_LOADER to its path");
    }
    SECTION("macOS and iOS: MoltenVK") {
        CHECK(platform::vulkan_driver_advice(Os::apple) ==
              "install MoltenVK (the LunarG Vulkan SDK, or Homebrew's molten-vk)");
        CHECK(platform::vulkan_loader_advice(Os::apple) ==
              "install the LunarG Vulkan SDK, or Homebrew's vulkan-loader and molten-vk, or set KILN_VULKAN_LOADER "
              "to its path");
    }
    SECTION("Android: the system's") {
        CHECK(platform::vulkan_driver_advice(Os::android) == "this device's GPU driver does not offer Vulkan 1.2");
        CHECK(platform::vulkan_loader_advice(Os::android) ==
              "Android 7.0 and later have one in the system image; or set KILN_VULKAN_LOADER to its path");
    }
    SECTION("only Linux's text names a Linux package tool or distribution") {
        for (Os os : {Os::windows, Os::apple, Os::android}) {
            CAPTURE((int)os);
            for (const std::string& s : {platform::vulkan_driver_advice(os), platform::vulkan_loader_advice(os)}) {
                CHECK(s.find("apt-get") == std::string::npos);
                CHECK(s.find("Debian") == std::string::npos);
                CHECK(s.find("lavapipe") == std::string::npos);
            }
        }
    }
    SECTION("the default is the system this test was built for") {
#if defined(_WIN32)
        const Os built_for = Os::windows;  // the windows preset (mingw-w64), run under wine
#elif defined(__APPLE__)
        const Os built_for = Os::apple;
#elif defined(__ANDROID__)
        const Os built_for = Os::android;
#else
        const Os built_for = Os::gnu_linux;
#endif
        STATIC_REQUIRE(platform::this_os() == built_for);
        CHECK(platform::vulkan_driver_advice() == platform::vulkan_driver_advice(built_for));
        CHECK(platform::vulkan_loader_advice() == platform::vulkan_loader_advice(built_for));
    }
}

#if !defined(_WIN32) && !defined(__APPLE__)  // macOS caps the soft limit at OPEN_MAX
#include <sys/resource.h>
TEST_CASE("platform: the soft limit on open files is raised to the hard limit", "[platform]") {
    // As a default shell leaves it (1024 under a higher hard limit): lowered here, then raised by the call.
    rlimit rl{};
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max <= 64) {
        WARN("hard limit on open files " << rl.rlim_max << ": nothing to lower");
        return;
    }
    rlimit low = rl;
    low.rlim_cur = 64;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    const uint64_t after = platform::raise_open_file_limit();
    rlimit now{};
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
    CHECK(now.rlim_cur == rl.rlim_max);
    CHECK(after == (now.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)now.rlim_cur));
    if (now.rlim_cur != RLIM_INFINITY)
        CHECK(platform::open_files().find(" of " + std::to_string((unsigned long long)now.rlim_cur)) !=
              std::string::npos);
}
#endif
