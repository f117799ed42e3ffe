// CPU references: broadcasting binary ops, unary activations, data movement.
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"

namespace kiln::cpu {
namespace {

// Strides of `s` seen through broadcasting into `out` (0 on broadcast dims).
std::vector<int64_t> bstrides(const Shape& s, const Shape& out) {
    std::vector<int64_t> st(out.size(), 0);
    int64_t acc = 1;
    for (size_t k = 0; k < s.size(); ++k) {
        size_t i = s.size() - 1 - k, o = out.size() - 1 - k;
        st[o] = s[i] == 1 ? 0 : acc;
        acc *= s[i];
    }
    return st;
}

template <class F>
void binary(const ir::Graph& g, const ir::Node& n, Vals& vals, F f) {
    const Shape& out = g.value(n.out).shape;
    auto sa = bstrides(g.value(n.in[0]).shape, out), sb = bstrides(g.value(n.in[1]).shape, out);
    const auto &a = vals[(size_t)n.in[0]], &b = vals[(size_t)n.in[1]];
    auto& y = vals[(size_t)n.out];
    const auto* fused = std::get_if<ir::ActAttrs>(&n.attrs);  // an activation ir::fuse folded in
    const ir::Act act = fused ? fused->act : ir::Act::none;
    std::vector<int64_t> idx(out.size(), 0);
    for (size_t i = 0; i < y.size(); ++i) {
        int64_t ia = 0, ib = 0;
        for (size_t d = 0; d < out.size(); ++d) ia += idx[d] * sa[d], ib += idx[d] * sb[d];
        y[i] = activate(act, f(a[(size_t)ia], b[(size_t)ib]));
        for (size_t d = out.size(); d-- > 0;) {
            if (++idx[d] < out[d]) break;
            idx[d] = 0;
        }
    }
}

std::vector<int64_t> strides_of(const Shape& s) {
    std::vector<int64_t> st(s.size(), 1);
    for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
    return st;
}

}  // namespace

void add(const ir::Graph& g, const ir::Node& n, Vals& v) {
    binary(g, n, v, [](float a, float b) { return a + b; });
}
void sub(const ir::Graph& g, const ir::Node& n, Vals& v) {
    binary(g, n, v, [](float a, float b) { return a - b; });
}
void mul(const ir::Graph& g, const ir::Node& n, Vals& v) {
    binary(g, n, v, [](float a, float b) { return a * b; });
}
void div(const ir::Graph& g, const ir::Node& n, Vals& v) {
    binary(g, n, v, [](float a, float b) { return a / b; });
}

void mul_add(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape& out = g.value(n.out).shape;
    std::vector<int64_t> st[3];
    for (size_t k = 0; k < 3; ++k) st[k] = bstrides(g.value(n.in[k]).shape, out);
    const auto &a = v[(size_t)n.in[0]], &b = v[(size_t)n.in[1]], &c = v[(size_t)n.in[2]];
    auto& y = v[(size_t)n.out];
    std::vector<int64_t> idx(out.size(), 0);
    for (size_t i = 0; i < y.size(); ++i) {
        int64_t o[3] = {0, 0, 0};
        for (size_t d = 0; d < out.size(); ++d)
            for (size_t k = 0; k < 3; ++k) o[k] += idx[d] * st[k][d];
        const float t = a[(size_t)o[0]] * b[(size_t)o[1]];  // rounded to f32, then the sum
        y[i] = t + c[(size_t)o[2]];
        for (size_t d = out.size(); d-- > 0;) {
            if (++idx[d] < out[d]) break;
            idx[d] = 0;
        }
    }
}

void scale(const ir::Graph& g, const ir::Node& n, Vals& v) {
    auto a = std::get<ir::ScaleAttrs>(n.attrs);
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (size_t i = 0; i < y.size(); ++i) y[i] = a.alpha * x[i] + a.beta;
}

float activate(ir::Act act, float x) {
    double z = x;
    switch (act) {
        case ir::Act::none:
            return x;
        case ir::Act::gelu:
            return (float)(0.5 * z * (1 + std::erf(z / std::sqrt(2.0))));
        case ir::Act::gelu_tanh:
            return (float)(0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))));
        case ir::Act::silu:
            return (float)(z / (1.0 + std::exp(-z)));
    }
    return x;
}

void silu(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (size_t i = 0; i < y.size(); ++i) y[i] = activate(ir::Act::silu, x[i]);
}

void relu(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (size_t i = 0; i < y.size(); ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void tanh(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (size_t i = 0; i < y.size(); ++i) y[i] = (float)std::tanh((double)x[i]);
}

void gelu(const ir::Graph& g, const ir::Node& n, Vals& v) {
    ir::Act act = std::get<ir::GeluAttrs>(n.attrs).tanh ? ir::Act::gelu_tanh : ir::Act::gelu;
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (size_t i = 0; i < y.size(); ++i) y[i] = activate(act, x[i]);
}

void permute(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape &in = g.value(n.in[0]).shape, &out = g.value(n.out).shape;
    auto perm = std::get<ir::PermuteAttrs>(n.attrs).perm;
    auto sin = strides_of(in);
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    std::vector<int64_t> idx(out.size(), 0);
    for (size_t i = 0; i < y.size(); ++i) {
        int64_t src = 0;
        for (size_t d = 0; d < out.size(); ++d) src += idx[d] * sin[(size_t)perm[d]];
        y[i] = x[(size_t)src];
        for (size_t d = out.size(); d-- > 0;) {
            if (++idx[d] < out[d]) break;
            idx[d] = 0;
        }
    }
}

void concat(const ir::Graph& g, const ir::Node& n, Vals& v) {
    int ax = std::get<ir::AxisAttrs>(n.attrs).axis;
    const Shape &sa = g.value(n.in[0]).shape, &sb = g.value(n.in[1]).shape;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= sa[(size_t)i];
    for (size_t i = (size_t)ax + 1; i < sa.size(); ++i) inner *= sa[i];
    int64_t na = sa[(size_t)ax] * inner, nb = sb[(size_t)ax] * inner;
    const auto &a = v[(size_t)n.in[0]], &b = v[(size_t)n.in[1]];
    auto& y = v[(size_t)n.out];
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < na; ++i) y[(size_t)(o * (na + nb) + i)] = a[(size_t)(o * na + i)];
        for (int64_t i = 0; i < nb; ++i) y[(size_t)(o * (na + nb) + na + i)] = b[(size_t)(o * nb + i)];
    }
}

void slice(const ir::Graph& g, const ir::Node& n, Vals& v) {
    auto a = std::get<ir::AxisAttrs>(n.attrs);
    const Shape& s = g.value(n.in[0]).shape;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < a.axis; ++i) outer *= s[(size_t)i];
    for (size_t i = (size_t)a.axis + 1; i < s.size(); ++i) inner *= s[i];
    int64_t d = s[(size_t)a.axis];
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < a.length * inner; ++i)
            y[(size_t)(o * a.length * inner + i)] = x[(size_t)(o * d * inner + a.start * inner + i)];
}

void reshape(const ir::Graph& g, const ir::Node& n, Vals& v) { v[(size_t)n.out] = v[(size_t)n.in[0]]; }

void upsample_nearest2x(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape& s = g.value(n.in[0]).shape;
    int64_t BC = s[0] * s[1], H = s[2], W = s[3];
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (int64_t c = 0; c < BC; ++c)
        for (int64_t i = 0; i < 2 * H; ++i)
            for (int64_t j = 0; j < 2 * W; ++j)
                y[(size_t)((c * 2 * H + i) * 2 * W + j)] = x[(size_t)((c * H + i / 2) * W + j / 2)];
}

void embedding(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape& st = g.value(n.in[0]).shape;
    const auto &table = v[(size_t)n.in[0]], &ids = v[(size_t)n.in[1]];
    auto& y = v[(size_t)n.out];
    int64_t D = st[1];
    for (size_t i = 0; i < ids.size(); ++i) {
        int64_t id = (int64_t)ids[i];
        KILN_CHECK(id >= 0 && id < st[0], "embedding: id ", id, " out of range [0, ", st[0], ") for table '",
                   g.value(n.in[0]).name, "'");
        for (int64_t d = 0; d < D; ++d) y[(size_t)((int64_t)i * D + d)] = table[(size_t)(id * D + d)];
    }
}

void timestep_embedding(const ir::Graph& g, const ir::Node& n, Vals& v) {
    // diffusers get_timestep_embedding: exponent = -ln(max_period) * arange(half) / (half - shift);
    // emb = scale * t * exp(exponent); [sin, cos] (or [cos, sin] when flip); zero pad when dim is odd.
    auto a = std::get<ir::TimestepAttrs>(n.attrs);
    const auto& t = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    int half = a.dim / 2;
    for (size_t i = 0; i < t.size(); ++i) {
        for (int k = 0; k < half; ++k) {
            // torch computes these in f32: exponent, exp, product, then sin/cos.
            float expo = -std::log(a.max_period) * (float)k / ((float)half - a.downscale_freq_shift);
            float freq = std::exp(expo);
            float arg = a.scale * (t[i] * freq);
            float s = std::sin(arg), c = std::cos(arg);
            float* row = &y[i * (size_t)a.dim];
            row[k] = a.flip_sin_to_cos ? c : s;
            row[half + k] = a.flip_sin_to_cos ? s : c;
        }
    }
}

}  // namespace kiln::cpu
