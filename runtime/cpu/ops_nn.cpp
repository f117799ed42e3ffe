// CPU references: norms, softmax, linear/matmul, attention, modulate, rope, conv2d. f64 accumulation.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"
#include "runtime/ir/fuse.h"

namespace kiln::cpu {
namespace {
const std::vector<float>* opt(const ir::Node& n, size_t i, const Vals& v) {
    return n.in.size() > i && n.in[i] >= 0 ? &v[(size_t)n.in[i]] : nullptr;
}
}  // namespace

void softmax(const ir::Graph& g, const ir::Node& n, Vals& v) {
    int64_t C = g.value(n.out).shape.back();
    const auto& x = v[(size_t)n.in[0]];
    auto& y = v[(size_t)n.out];
    for (size_t r = 0; r < y.size() / (size_t)C; ++r) {
        const float* xr = &x[r * (size_t)C];
        double m = -std::numeric_limits<double>::infinity(), s = 0;
        for (int64_t c = 0; c < C; ++c) m = std::max(m, (double)xr[c]);
        for (int64_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
        for (int64_t c = 0; c < C; ++c) y[r * (size_t)C + (size_t)c] = (float)(std::exp(xr[c] - m) / s);
    }
}

void layer_norm(const ir::Graph& g, const ir::Node& n, Vals& v) {
    float eps = std::get<ir::NormAttrs>(n.attrs).eps;
    int64_t C = g.value(n.out).shape.back();
    const auto& x = v[(size_t)n.in[0]];
    auto *w = opt(n, 1, v), *b = opt(n, 2, v);
    auto& y = v[(size_t)n.out];
    for (size_t r = 0; r < y.size() / (size_t)C; ++r) {
        const float* xr = &x[r * (size_t)C];
        double m = 0, var = 0;
        for (int64_t c = 0; c < C; ++c) m += xr[c];
        m /= (double)C;
        for (int64_t c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
        var /= (double)C;
        double inv = 1.0 / std::sqrt(var + eps);
        for (int64_t c = 0; c < C; ++c) {
            double t = (xr[c] - m) * inv;
            if (w) t *= (*w)[(size_t)c];
            if (b) t += (*b)[(size_t)c];
            y[r * (size_t)C + (size_t)c] = (float)t;
        }
    }
}

// One row of rms_norm: xr[0, C) / sqrt(mean(x^2) + eps) (f64 sum), rounded to f32, then * w when given.
void rms_row(const float* xr, int64_t C, float eps, const std::vector<float>* w, float* y) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += (double)xr[c] * xr[c];
    double inv = 1.0 / std::sqrt(ss / (double)C + eps);
    for (int64_t c = 0; c < C; ++c) {
        float t = (float)(xr[c] * inv);  // diffusers: normalise in f32, then * weight
        y[c] = w ? t * (*w)[(size_t)c] : t;
    }
}

void rms_norm(const ir::Graph& g, const ir::Node& n, Vals& v) {
    float eps = std::get<ir::NormAttrs>(n.attrs).eps;
    int64_t C = g.value(n.out).shape.back();
    const auto& x = v[(size_t)n.in[0]];
    auto* w = opt(n, 1, v);
    auto& y = v[(size_t)n.out];
    for (size_t r = 0; r < y.size() / (size_t)C; ++r) rms_row(&x[r * (size_t)C], C, eps, w, &y[r * (size_t)C]);
}

void group_norm(const ir::Graph& g, const ir::Node& n, Vals& v) {
    auto a = std::get<ir::NormAttrs>(n.attrs);
    const Shape& s = g.value(n.out).shape;
    int64_t B = s[0], C = s[1], HW = shape_numel(s) / (B * C), G = a.groups, cg = C / G;
    const auto& x = v[(size_t)n.in[0]];
    auto *w = opt(n, 1, v), *b = opt(n, 2, v);
    auto& y = v[(size_t)n.out];
    for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t gi = 0; gi < G; ++gi) {
            size_t base = (size_t)((bi * C + gi * cg) * HW), cnt = (size_t)(cg * HW);
            double m = 0, var = 0;
            for (size_t i = 0; i < cnt; ++i) m += x[base + i];
            m /= (double)cnt;
            for (size_t i = 0; i < cnt; ++i) var += (x[base + i] - m) * (x[base + i] - m);
            var /= (double)cnt;
            double inv = 1.0 / std::sqrt(var + a.eps);
            for (size_t i = 0; i < cnt; ++i) {
                size_t c = (size_t)(gi * cg) + i / (size_t)HW;
                double t = (x[base + i] - m) * inv;
                if (w) t *= (*w)[c];
                if (b) t += (*b)[c];
                y[base + i] = (float)t;
            }
        }
}

namespace {
// y [M, N] = act(x [M, K] @ w [N, K]^T + b), accumulated in f64, rounded to f32, then activated.
void linear_into(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* b, int64_t N,
                 int64_t K, ir::Act act, std::vector<float>& y) {
    int64_t M = (int64_t)x.size() / K;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < N; ++j) {
            double acc = b ? (*b)[(size_t)j] : 0.0;
            for (int64_t k = 0; k < K; ++k) acc += (double)x[(size_t)(m * K + k)] * w[(size_t)(j * K + k)];
            y[(size_t)(m * N + j)] = activate(act, (float)acc);
        }
}
}  // namespace

void linear(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape& sw = g.value(n.in[1]).shape;
    auto& y = v[(size_t)n.out];
    linear_into(v[(size_t)n.in[0]], v[(size_t)n.in[1]], opt(n, 2, v), sw[0], sw[1],
                std::get<ir::LinearAttrs>(n.attrs).act, y);
    if (!ir::linear_gated(n)) return;
    // A gated linear (ir::fuse): y = res + gate * y, the product rounded to f32 first (as mul_add).
    const int64_t N = sw[0], span = ir::gate_row_span(g.value(n.in[3]).shape, g.value(n.out).shape);
    KILN_CHECK(span > 0, "linear: gate ", shape_str(g.value(n.in[3]).shape), " is not broadcast over rows of ",
               shape_str(g.value(n.out).shape));
    const auto &gate = v[(size_t)n.in[3]], &res = v[(size_t)n.in[4]];
    for (size_t i = 0; i < y.size(); ++i) {
        const int64_t m = (int64_t)i / N, j = (int64_t)i % N;
        const float t = gate[(size_t)(m / span * N + j)] * y[i];
        y[i] = t + res[i];
    }
}

void linear_multi(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const auto& a = std::get<ir::LinearMultiAttrs>(n.attrs);
    const auto outs = ir::node_outputs(n);
    for (size_t i = 0; i < (size_t)ir::kMultiLinear; ++i) {
        const int w = n.in[1 + 2 * i];
        if (w < 0) continue;
        const Shape& sw = g.value(w).shape;
        linear_into(v[(size_t)n.in[0]], v[(size_t)w], opt(n, 2 + 2 * i, v), sw[0], sw[1], a.act[i], v[(size_t)outs[i]]);
    }
}

void matmul(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape &sa = g.value(n.in[0]).shape, &sb = g.value(n.in[1]).shape;
    int64_t B = sa[0], M = sa[1], K = sa[2], N = sb[2];
    const auto &a = v[(size_t)n.in[0]], &b = v[(size_t)n.in[1]];
    auto& y = v[(size_t)n.out];
    for (int64_t bi = 0; bi < B; ++bi) {
        int64_t bb = sb[0] == 1 ? 0 : bi;
        for (int64_t m = 0; m < M; ++m)
            for (int64_t j = 0; j < N; ++j) {
                double acc = 0;
                for (int64_t k = 0; k < K; ++k)
                    acc += (double)a[(size_t)((bi * M + m) * K + k)] * b[(size_t)((bb * K + k) * N + j)];
                y[(size_t)((bi * M + m) * N + j)] = (float)acc;
            }
    }
}

// The math of ir::AttentionAttrs in f64: s = q.k * scale, soft-capped, + mask; causal keys past i + Sk - Sq are
// left out (a row without keys gives 0); q head h reads k/v head h / (H / Hkv).
void attention(const ir::Graph& g, const ir::Node& n, Vals& v) {
    auto a = std::get<ir::AttentionAttrs>(n.attrs);
    const Shape &sq = g.value(n.in[0]).shape, &sk = g.value(n.in[1]).shape;
    int64_t B = sq[0], Sq = sq[1], Sk = sk[1], W = sq[2], H = a.heads, D = W / H;
    int64_t Hkv = a.kv_heads > 0 ? a.kv_heads : H, Wk = Hkv * D, rep = H / Hkv;
    double scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt((double)D), cap = a.softcap;
    const auto &q = v[(size_t)n.in[0]], &k = v[(size_t)n.in[1]], &vv = v[(size_t)n.in[2]];
    auto* mask = opt(n, 3, v);
    Shape sm = mask ? g.value(n.in[3]).shape : Shape{};
    auto& y = v[(size_t)n.out];
    std::vector<double> p((size_t)Sk);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Sq; ++i) {
                const int64_t hk = h / rep, nk = a.causal ? std::clamp<int64_t>(i + Sk - Sq + 1, 0, Sk) : Sk;
                double mx = -std::numeric_limits<double>::infinity();
                for (int64_t j = 0; j < nk; ++j) {
                    double s = 0;
                    for (int64_t d = 0; d < D; ++d)
                        s += (double)q[(size_t)((b * Sq + i) * W + h * D + d)] *
                             k[(size_t)((b * Sk + j) * Wk + hk * D + d)];
                    s *= scale;
                    if (cap > 0) s = cap * std::tanh(s / cap);
                    if (mask) {
                        int64_t mb = sm[0] == 1 ? 0 : b, mi = sm[1] == 1 ? 0 : i;
                        s += (*mask)[(size_t)((mb * sm[1] + mi) * Sk + j)];
                    }
                    p[(size_t)j] = s;
                    mx = std::max(mx, s);
                }
                double sum = 0;
                for (int64_t j = 0; j < nk; ++j) sum += (p[(size_t)j] = std::exp(p[(size_t)j] - mx));
                for (int64_t d = 0; d < D; ++d) {
                    double acc = 0;
                    for (int64_t j = 0; j < nk; ++j) acc += p[(size_t)j] * vv[(size_t)((b * Sk + j) * Wk + hk * D + d)];
                    y[(size_t)((b * Sq + i) * W + h * D + d)] = nk > 0 ? (float)(acc / sum) : 0.f;
                }
            }
}

void modulate(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape& s = g.value(n.out).shape;
    int64_t B = s[0], N = s[1], C = s[2];
    const auto &x = v[(size_t)n.in[0]], &shift = v[(size_t)n.in[1]], &sc = v[(size_t)n.in[2]];
    auto& y = v[(size_t)n.out];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < N; ++i)
            for (int64_t c = 0; c < C; ++c) {
                size_t o = (size_t)((b * N + i) * C + c), bc = (size_t)(b * C + c);
                y[o] = x[o] * (1.f + sc[bc]) + shift[bc];
            }
}

void norm_modulate(const ir::Graph& g, const ir::Node& n, Vals& v) {
    // layer_norm without affine into a temporary, then modulate: the two references composed.
    ir::Node ln{ir::Op::layer_norm, {n.in[0], -1, -1}, n.out, {}, n.attrs};
    layer_norm(g, ln, v);
    const std::vector<float> t = v[(size_t)n.out];
    const Shape& s = g.value(n.out).shape;
    int64_t B = s[0], N = s[1], C = s[2];
    const auto &shift = v[(size_t)n.in[1]], &sc = v[(size_t)n.in[2]];
    auto& y = v[(size_t)n.out];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < N; ++i)
            for (int64_t c = 0; c < C; ++c) {
                size_t o = (size_t)((b * N + i) * C + c), bc = (size_t)(b * C + c);
                y[o] = t[o] * (1.f + sc[bc]) + shift[bc];
            }
}

void rope(const ir::Graph& g, const ir::Node& n, Vals& v) {
    const Shape& s = g.value(n.out).shape;
    int64_t B = s[0], S = s[1], half = g.value(n.in[1]).shape[1], H = s[2] / (2 * half);
    const auto &x = v[(size_t)n.in[0]], &c = v[(size_t)n.in[1]], &sn = v[(size_t)n.in[2]];
    auto& y = v[(size_t)n.out];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < S; ++t)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < half; ++i) {
                    size_t o = (size_t)(((b * S + t) * H + h) * 2 * half + 2 * i), ti = (size_t)(t * half + i);
                    double re = x[o], im = x[o + 1], cs = c[ti], sv = sn[ti];
                    y[o] = (float)(re * cs - im * sv);
                    y[o + 1] = (float)(im * cs + re * sv);
                }
}

void rms_norm_rope(const ir::Graph& g, const ir::Node& n, Vals& v) {
    // rms_norm over each head (f64 sum, normalised in f32, then * weight), then rope as rope() computes it.
    float eps = std::get<ir::NormAttrs>(n.attrs).eps;
    const Shape& s = g.value(n.out).shape;
    const int64_t S = s[1], half = g.value(n.in[2]).shape[1], D = 2 * half, H = s[2] / D;
    const auto &x = v[(size_t)n.in[0]], &c = v[(size_t)n.in[2]], &sn = v[(size_t)n.in[3]];
    auto* w = opt(n, 1, v);
    auto& y = v[(size_t)n.out];
    std::vector<float> t((size_t)D);
    for (size_t r = 0; r < y.size() / (size_t)D; ++r) {
        rms_row(&x[r * (size_t)D], D, eps, w, t.data());
        const int64_t pos = ((int64_t)r / H) % S;
        for (int64_t i = 0; i < half; ++i) {
            size_t ti = (size_t)(pos * half + i);
            double re = t[(size_t)(2 * i)], im = t[(size_t)(2 * i + 1)], cs = c[ti], sv = sn[ti];
            y[r * (size_t)D + (size_t)(2 * i)] = (float)(re * cs - im * sv);
            y[r * (size_t)D + (size_t)(2 * i + 1)] = (float)(im * cs + re * sv);
        }
    }
}

void conv2d(const ir::Graph& g, const ir::Node& n, Vals& v) {
    auto a = std::get<ir::Conv2dAttrs>(n.attrs);
    const Shape &sx = g.value(n.in[0]).shape, &sw = g.value(n.in[1]).shape, &so = g.value(n.out).shape;
    // Grouped: output channel o reads the input channels of its group, c0 + [0, Cg), weight [O, Cg, kh, kw].
    int64_t B = sx[0], H = sx[2], W = sx[3], O = sw[0], KH = sw[2], KW = sw[3], HO = so[2], WO = so[3];
    int64_t Cx = sx[1], C = sw[1], Og = O / a.groups;
    const auto &x = v[(size_t)n.in[0]], &w = v[(size_t)n.in[1]];
    auto* bias = opt(n, 2, v);
    auto& y = v[(size_t)n.out];
    for (int64_t b = 0; b < B; ++b)
        for (int64_t o = 0; o < O; ++o)
            for (int64_t i = 0; i < HO; ++i)
                for (int64_t j = 0; j < WO; ++j) {
                    double acc = bias ? (*bias)[(size_t)o] : 0.0;
                    const int64_t c0 = (o / Og) * C;
                    for (int64_t c = 0; c < C; ++c)
                        for (int64_t ky = 0; ky < KH; ++ky) {
                            int64_t yy = i * a.stride_h - a.pad_h + ky;
                            if (yy < 0 || yy >= H) continue;
                            for (int64_t kx = 0; kx < KW; ++kx) {
                                int64_t xx = j * a.stride_w - a.pad_w + kx;
                                if (xx < 0 || xx >= W) continue;
                                acc += (double)x[(size_t)(((b * Cx + c0 + c) * H + yy) * W + xx)] *
                                       w[(size_t)(((o * C + c) * KH + ky) * KW + kx)];
                            }
                        }
                    y[(size_t)(((b * O + o) * HO + i) * WO + j)] = (float)acc;
                }
}

}  // namespace kiln::cpu
