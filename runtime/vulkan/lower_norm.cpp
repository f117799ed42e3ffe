// Lowering of the row ops (softmax, layer_norm, rms_norm: one workgroup per row of the last dim)
// and group_norm (one workgroup per (batch, group)); norm_modulate (layer_norm + modulate, one workgroup per row).
#include <variant>

#include "runtime/core/error.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {
namespace {
bool present(const ir::Node& n, size_t i) { return n.in.size() > i && n.in[i] >= 0; }

Dispatch row(const char* shader, const ir::Graph& g, const ir::Node& n, float eps) {
    const Shape& s = g.value(n.out).shape;
    int64_t cols = s.back(), rows = shape_numel(s) / cols;
    KILN_CHECK(shape_numel(s) < (1ll << 32), shader, ": ", shape_str(s), " has >= 2^32 elements");
    params::RowParams p{};
    p.rows = (params::uint)rows;
    p.cols = (params::uint)cols;
    p.has_w = present(n, 1);
    p.has_b = present(n, 2);
    p.eps = eps;
    Dispatch d;
    d.shader = ShaderKey(shader);
    d.set_push(p);
    groups_1d(d, (uint64_t)rows, 1);  // one workgroup per row
    return d;
}
}  // namespace

Dispatch lower_softmax(const ir::Graph& g, const ir::Node& n) { return row("softmax", g, n, 0.f); }
Dispatch lower_layer_norm(const ir::Graph& g, const ir::Node& n) {
    return row("layer_norm", g, n, std::get<ir::NormAttrs>(n.attrs).eps);
}
Dispatch lower_rms_norm(const ir::Graph& g, const ir::Node& n) {
    return row("rms_norm", g, n, std::get<ir::NormAttrs>(n.attrs).eps);
}

Dispatch lower_rms_norm_rope(const ir::Graph& g, const ir::Node& n) {
    const Shape& s = g.value(n.out).shape;  // [B, S, H*D]
    const int64_t half = g.value(n.in[2]).shape[1], D = 2 * half;
    KILN_CHECK(shape_numel(s) < (1ll << 32), "rms_norm_rope: ", shape_str(s), " has >= 2^32 elements");
    params::RmsRopeParams p{};
    p.rows = (params::uint)(shape_numel(s) / D);
    p.D = (params::uint)D;
    p.H = (params::uint)(s[2] / D);
    p.S = (params::uint)s[1];
    p.has_w = present(n, 1);
    p.eps = std::get<ir::NormAttrs>(n.attrs).eps;
    Dispatch d;
    d.shader = ShaderKey("rms_norm_rope");
    d.set_push(p);
    groups_1d(d, (uint64_t)p.rows, 1);  // one workgroup per head row
    return d;
}

Dispatch lower_group_norm(const ir::Graph& g, const ir::Node& n) {
    auto a = std::get<ir::NormAttrs>(n.attrs);
    const Shape& s = g.value(n.out).shape;
    KILN_CHECK(shape_numel(s) < (1ll << 32), "group_norm: ", shape_str(s), " has >= 2^32 elements");
    params::GroupNormParams p{};
    p.B = (params::uint)s[0];
    p.C = (params::uint)s[1];
    p.HW = (params::uint)(shape_numel(s) / (s[0] * s[1]));
    p.G = (params::uint)a.groups;
    p.has_w = present(n, 1);
    p.has_b = present(n, 2);
    p.eps = a.eps;
    Dispatch d;
    d.shader = ShaderKey("group_norm");
    d.set_push(p);
    groups_1d(d, (uint64_t)p.B * p.G, 1);  // one workgroup per (batch, group)
    return d;
}

}  // namespace kiln::vk

namespace kiln::vk {
Dispatch lower_norm_modulate(const ir::Graph& g, const ir::Node& n) {
    const Shape& s = g.value(n.out).shape;  // [B, N, C]
    KILN_CHECK(shape_numel(s) < (1ll << 32), "norm_modulate: ", shape_str(s), " has >= 2^32 elements");
    params::NormModulateParams p{(params::uint)(s[0] * s[1]), (params::uint)s[2], (params::uint)s[1],
                                 std::get<ir::NormAttrs>(n.attrs).eps};
    modulate_rows(n, s[2], p.sh_off, p.sh_stride, p.sc_off, p.sc_stride);
    Dispatch d;
    d.shader = ShaderKey("norm_modulate");
    d.set_push(p);
    d.spec = {g.value(n.out).dtype == DType::f16 ? 1u : 0u};  // YF16 (ir::store_f16)
    groups_1d(d, (uint64_t)p.rows, 1);                        // one workgroup per row
    return d;
}
}  // namespace kiln::vk
