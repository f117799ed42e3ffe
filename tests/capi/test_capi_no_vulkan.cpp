// The C API without a Vulkan loader or without a device (runtime/vulkan/loader.h): each entry point returns
// KILN_NOT_FOUND with one line, the process goes on, and once the loader is there the same calls succeed. The loader
// is opened once per process, so these run in processes of their own (tests/CMakeLists.txt: capi_no_loader and
// capi_no_device, which set the variables); in the plain capi run they are hidden.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/capi/capi_test.h"

namespace {

// kiln_device_count says 0; kiln_device_get_info and kiln_context_create fail with `line`, twice (nothing is left
// half made by the first failure).
void check_unavailable(const std::string& line) {
    for (int round = 0; round < 2; ++round) {
        int n = -1;
        CHECK(kiln_device_count(&n) == KILN_OK);
        CHECK(n == 0);
        kiln_device_info d = KILN_DEVICE_INFO_INIT;
        CHECK(kiln_device_get_info(0, &d) == KILN_NOT_FOUND);
        CHECK(std::string(kiln_last_error()) == line);
        kiln_context* c = nullptr;
        CHECK(kiln_context_create(nullptr, &c) == KILN_NOT_FOUND);
        CHECK(c == nullptr);
        CHECK(std::string(kiln_last_error()) == line);
        CHECK(std::strchr(kiln_last_error(), '\n') == nullptr);
    }
}

// With `var` unset, the loader and its drivers are found: a device and a context.
void check_recovers(const char* var) {
    ::unsetenv(var);
    int n = 0;
    CHECK(kiln_device_count(&n) == KILN_OK);
    CHECK(n > 0);
    kiln::capi_test::make_context();
}

}  // namespace

TEST_CASE("C API: no Vulkan loader (KILN_VULKAN_LOADER names a missing file)", "[.no_loader]") {
    const char* path = std::getenv("KILN_VULKAN_LOADER");
    REQUIRE(path);  // set by the capi_no_loader test
    REQUIRE(std::string(path).find("/nonexistent/") == 0);
    check_unavailable("no Vulkan loader found (tried " + std::string(path) +
                      "; install one, e.g. Debian's libvulkan1, or set KILN_VULKAN_LOADER to its path)");
    check_recovers("KILN_VULKAN_LOADER");
}

TEST_CASE("C API: a Vulkan loader with no driver (VK_ICD_FILENAMES names a missing file)", "[.no_device]") {
    const char* icd = std::getenv("VK_ICD_FILENAMES");
    REQUIRE(icd);  // set by the capi_no_device test
    REQUIRE(std::string(icd) == "/nonexistent");
    check_unavailable(
        "no Vulkan device (the Vulkan loader found no Vulkan 1.2 driver; install your GPU's Vulkan driver, or Mesa's "
        "lavapipe for a CPU device: apt-get install mesa-vulkan-drivers)");
    check_recovers("VK_ICD_FILENAMES");
}
