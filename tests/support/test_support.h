#pragma once
// Helpers shared by the tests: data paths and random tensors.
#include <string>
#include <vector>

#include "runtime/core/tensor.h"

namespace kiln::test {
std::string data_path(const std::string& rel);  // tests/data/<rel>
std::vector<float> random_vec(size_t n, unsigned seed, float lo = -1.f, float hi = 1.f);
Tensor random_tensor(const Shape& s, unsigned seed, float lo = -1.f, float hi = 1.f);
}  // namespace kiln::test
