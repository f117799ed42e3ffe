#pragma once
// A host tensor: dtype, shape (outermost first, like PyTorch) and owned contiguous bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 4, 8, 8]"

struct Tensor {
    DType dtype = DType::f32;
    Shape shape;
    std::vector<uint8_t> bytes;

    Tensor() = default;
    Tensor(DType t, Shape s);  // zero-filled
    static Tensor from_f32(Shape s, const std::vector<float>& v);

    int64_t numel() const { return shape_numel(shape); }
    size_t nbytes() const { return bytes.size(); }
    template <class T>
    T* data() {
        return reinterpret_cast<T*>(bytes.data());
    }
    template <class T>
    const T* data() const {
        return reinterpret_cast<const T*>(bytes.data());
    }

    std::vector<float> to_f32() const;  // any float or int dtype, converted
    Tensor astype(DType t) const;
};

// Relative L2 error ||a-b|| / ||b|| (b is the reference); shapes must match.
double rel_l2(const std::vector<float>& a, const std::vector<float>& ref);
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace kiln
