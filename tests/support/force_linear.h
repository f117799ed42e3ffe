#pragma once
// Forces KILN_LINEAR's kernel on this thread while alive (exec::set_linear_override): for tests that compare two
// runs bitwise where the linear table could pick different kernels for their different row counts.
#include <string>

#include "runtime/exec/linear_select.h"

namespace kiln::test {
struct ForceLinear {
    explicit ForceLinear(const std::string& v) { exec::set_linear_override(v); }
    ~ForceLinear() { exec::set_linear_override(""); }
    ForceLinear(const ForceLinear&) = delete;
    ForceLinear& operator=(const ForceLinear&) = delete;
};
}  // namespace kiln::test
