#pragma once
// Helpers shared by the tests: data paths, random tensors, environment knobs for one scope.
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/platform.h"
#include "runtime/core/settings.h"
#include "runtime/core/tensor.h"

namespace kiln::test {
std::string data_path(const std::string& rel);  // tests/data/<rel>
std::vector<float> random_vec(size_t n, unsigned seed, float lo = -1.f, float hi = 1.f);
Tensor random_tensor(const Shape& s, unsigned seed, float lo = -1.f, float hi = 1.f);

// The settings of a test's vk::Context: the environment table (runtime/core/settings.h), with TestHooks::live set so
// that a KILN_* variable set later (ScopedEnv) reaches the executors made on a Context the tests share.
Settings settings();

// Work to do when the tests have run, before main returns (vk_context.h: destroy the Vulkan contexts). finish()
// runs it and returns `result`; where any hook ran, it ends the process there with std::_Exit(result): validation
// layer 1.4.309 crashes in its own exit-time destructors once a process has made and destroyed a second instance
// (rc 139 after every test passed; test_linear_tex's small-limit context), and nothing of Kiln's is left to destroy.
std::vector<void (*)()>& exit_hooks();
int finish(int result);
// The same, read once: later changes to the environment do not reach the Context.
Settings fixed_settings();

// Sets an environment variable (a KILN_* knob) for one scope, or unsets it (std::nullopt), then gives it back the
// value it had (unset where it had none).
struct ScopedEnv {
    std::string name;
    std::optional<std::string> saved;
    ScopedEnv(const char* n, const std::optional<std::string>& v) : name(n), saved(platform::env(n)) {
        platform::set_env(n, v);
    }
    ~ScopedEnv() { platform::set_env(name.c_str(), saved); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// KILN_MAX_BINDING_RANGE for one scope: ops whose buffers pass `bytes` run in row chunks.
struct BindingLimit : ScopedEnv {
    explicit BindingLimit(size_t bytes) : ScopedEnv("KILN_MAX_BINDING_RANGE", std::to_string(bytes)) {}
};

// A fresh folder under the system's temp folder (TAG_<pid>_<n>), removed with everything in it at scope exit.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& tag = "kiln_test");
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& rel) const { return (path / rel).string(); }
};
}  // namespace kiln::test
