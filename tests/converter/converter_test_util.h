#pragma once
// Helpers for the converter tests: temp folders, raw safetensors writing, and the round-trip check.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "converter/convert.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

namespace kiln::test {

namespace fs = std::filesystem;

inline std::string repo_path(const std::string& rel) { return data_path("../../" + rel); }
inline std::string fixture(const std::string& name) { return data_path("fixtures/" + name); }

inline std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
inline void spit(const std::string& p, const std::string& s) {
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(s.data(), (std::streamsize)s.size());
}

// Writes a safetensors file from a header JSON text and a data blob, exactly as given.
inline void write_raw_safetensors(const std::string& p, const std::string& header, const std::string& data) {
    std::string s(8, '\0');
    uint64_t n = header.size();
    std::memcpy(s.data(), &n, 8);
    spit(p, s + header + data);
}

// Header (as JSON) and data blob of a safetensors file.
inline std::pair<nlohmann::json, std::string> read_raw_safetensors(const std::string& p) {
    std::string s = slurp(p);
    uint64_t n;
    std::memcpy(&n, s.data(), 8);
    return {nlohmann::json::parse(s.substr(8, n)), s.substr(8 + n)};
}

// The dtype the converter must produce for a source tensor (see converter/convert.cpp).
inline DType policy_dtype(const SafeTensorInfo& t, DType want) {
    if (t.dtype == DType::i32 || t.dtype == DType::i64) return t.dtype;
    return t.shape.size() >= 2 ? want : DType::f32;
}

}  // namespace kiln::test
