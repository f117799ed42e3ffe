#include "tests/support/test_support.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace kiln::test {

Settings settings() {
    Settings s = settings_from_env();
    s.test.live = &settings_from_env;
    return s;
}

Settings fixed_settings() { return settings_from_env(); }
std::string data_path(const std::string& rel) {
    const char* env = std::getenv("KILN_TEST_DATA");
    return std::string(env ? env : KILN_TEST_DATA) + "/" + rel;
}
std::vector<float> random_vec(size_t n, unsigned seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}
Tensor random_tensor(const Shape& s, unsigned seed, float lo, float hi) {
    return Tensor::from_f32(s, random_vec((size_t)shape_numel(s), seed, lo, hi));
}

TempDir::TempDir(const std::string& tag) {
    static std::atomic<int> n{0};
    path =
        std::filesystem::temp_directory_path() / (tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
}
std::vector<void (*)()>& exit_hooks() {
    static std::vector<void (*)()> v;
    return v;
}

int finish(int result) {
    if (exit_hooks().empty()) return result;
    for (auto it = exit_hooks().rbegin(); it != exit_hooks().rend(); ++it) (*it)();
    std::fflush(nullptr);
    std::_Exit(result);
}

}  // namespace kiln::test
