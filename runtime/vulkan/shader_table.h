#pragma once
// The SPIR-V of every shader, embedded at build time (see shaders/CMakeLists.txt).
#include <cstddef>
#include <cstdint>

namespace kiln::vk {
struct ShaderBlob {
    const char* name;  // "<op>" or "<op>_<weight dtype>", e.g. "linear_f16"
    const uint32_t* code;
    size_t words;
};
extern const ShaderBlob kShaderTable[];
extern const size_t kShaderCount;
}  // namespace kiln::vk
