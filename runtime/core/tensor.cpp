#include "runtime/core/tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "runtime/core/error.h"

namespace kiln {

int64_t shape_numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

std::string shape_str(const Shape& s) {
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
    os << "]";
    return os.str();
}

Tensor::Tensor(DType t, Shape s) : dtype(t), shape(std::move(s)) {
    for (int64_t d : shape) KILN_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    bytes.assign(dtype_nbytes(t, numel()), 0);
}

Tensor Tensor::from_f32(Shape s, const std::vector<float>& v) {
    Tensor t(DType::f32, std::move(s));
    KILN_CHECK((int64_t)v.size() == t.numel(), "Tensor::from_f32: ", v.size(), " values for shape ",
               shape_str(t.shape));
    std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
    return t;
}

std::vector<float> Tensor::to_f32() const {
    std::vector<float> out((size_t)numel());
    convert(bytes.data(), dtype, out.data(), DType::f32, out.size());
    return out;
}

Tensor Tensor::astype(DType t) const {
    Tensor out(t, shape);
    convert(bytes.data(), dtype, out.bytes.data(), t, (size_t)numel());
    return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
    KILN_CHECK(a.size() == ref.size(), "rel_l2: sizes differ (", a.size(), " vs ", ref.size(), ")");
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (den == 0) return std::sqrt(num);
    return std::sqrt(num / den);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    KILN_CHECK(a.size() == b.size(), "max_abs_diff: sizes differ");
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        double d = std::fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;  // NaN propagates as the max
    }
    return m;
}

}  // namespace kiln
