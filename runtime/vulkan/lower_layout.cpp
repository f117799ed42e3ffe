// Lowering of the data-movement ops: upsample_nearest2x, permute, concat, slice.
#include <variant>

#include "runtime/core/error.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {
namespace {
// Splits s around axis: outer = prod(s[:axis]), inner = prod(s[axis+1:]).
void outer_inner(const Shape& s, int axis, int64_t& outer, int64_t& inner) {
    outer = inner = 1;
    for (int i = 0; i < axis; ++i) outer *= s[(size_t)i];
    for (size_t i = (size_t)axis + 1; i < s.size(); ++i) inner *= s[i];
}
void check_size(const char* op, const Shape& s) {
    KILN_CHECK(shape_numel(s) < (1ll << 32), op, ": ", shape_str(s), " has >= 2^32 elements");
}
}  // namespace

Dispatch lower_upsample_nearest2x(const ir::Graph& g, const ir::Node& n) {
    const Shape& s = g.value(n.in[0]).shape;
    check_size("upsample_nearest2x", g.value(n.out).shape);
    params::UpsampleParams p{(params::uint)(s[0] * s[1]), (params::uint)s[2], (params::uint)s[3]};
    Dispatch d;
    d.shader = ShaderKey("upsample_nearest2x");
    d.set_push(p);
    groups_1d(d, (uint64_t)shape_numel(g.value(n.out).shape));
    return d;
}

Dispatch lower_permute(const ir::Graph& g, const ir::Node& n) {
    const Shape &in = g.value(n.in[0]).shape, &out = g.value(n.out).shape;
    check_size("permute", out);
    auto perm = std::get<ir::PermuteAttrs>(n.attrs).perm;
    std::vector<int64_t> st(in.size(), 1);
    for (size_t i = in.size(); i-- > 1;) st[i - 1] = st[i] * in[i];
    params::PermuteParams p{};
    p.n = (params::uint)shape_numel(out);
    p.rank = (params::uint)out.size();
    for (size_t d = 0; d < out.size(); ++d) {
        p.out_shape[d] = (params::uint)out[d];
        p.in_stride[d] = (params::uint)st[(size_t)perm[d]];
    }
    Dispatch d;
    d.shader = ShaderKey("permute");
    d.set_push(p);
    groups_1d(d, p.n);
    return d;
}

Dispatch lower_concat(const ir::Graph& g, const ir::Node& n) {
    int ax = std::get<ir::AxisAttrs>(n.attrs).axis;
    const Shape &sa = g.value(n.in[0]).shape, &sb = g.value(n.in[1]).shape;
    check_size("concat", g.value(n.out).shape);
    int64_t outer, inner;
    outer_inner(sa, ax, outer, inner);
    params::ConcatParams p{(params::uint)outer, (params::uint)(sa[(size_t)ax] * inner),
                           (params::uint)(sb[(size_t)ax] * inner)};
    Dispatch d;
    d.shader = ShaderKey("concat");
    d.set_push(p);
    auto f16 = [&](int v) { return g.value(v).dtype == DType::f16 ? 1u : 0u; };  // ir::store_f16
    d.spec = {f16(n.in[0]), f16(n.in[1]), f16(n.out)};
    groups_1d(d, (uint64_t)shape_numel(g.value(n.out).shape));
    return d;
}

Dispatch lower_slice(const ir::Graph& g, const ir::Node& n) {
    auto a = std::get<ir::AxisAttrs>(n.attrs);
    const Shape& s = g.value(n.in[0]).shape;
    check_size("slice", s);
    int64_t outer, inner;
    outer_inner(s, a.axis, outer, inner);
    params::SliceParams p{(params::uint)outer, (params::uint)(s[(size_t)a.axis] * inner),
                          (params::uint)(a.start * inner), (params::uint)(a.length * inner)};
    Dispatch d;
    d.shader = ShaderKey("slice");
    d.set_push(p);
    auto f16 = [&](int v) { return g.value(v).dtype == DType::f16 ? 1u : 0u; };  // ir::store_f16
    d.spec = {f16(n.in[0]), f16(n.out)};
    groups_1d(d, (uint64_t)p.outer * p.out_row);
    return d;
}

}  // namespace kiln::vk
