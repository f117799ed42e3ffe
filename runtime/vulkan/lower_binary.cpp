// Lowering of add/sub/mul/div and the fused mul_add: broadcasting strides into BinaryParams / MulAddParams. An operand
// read as a slice (ir::InputView) gets its source's row stride and the slice's start as offset.
#include "runtime/core/error.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {
namespace {
void bstrides(const Shape& s, const Shape& out, params::uint* st) {
    int64_t acc = 1;
    for (size_t k = 0; k < out.size(); ++k) {
        size_t o = out.size() - 1 - k;
        if (k < s.size()) {
            int64_t d = s[s.size() - 1 - k];
            st[o] = d == 1 ? 0 : (params::uint)acc;
            acc *= d;
        } else {
            st[o] = 0;
        }
    }
}
// Strides and offset of input i of n into the output's index space.
params::uint operand(const ir::Graph& g, const ir::Node& n, size_t i, const Shape& out, params::uint* st) {
    bstrides(ir::input_shape(g.values(), n, i), out, st);
    const ir::InputView* v = ir::input_view(n, i);
    if (!v) return 0;
    // The view's rows are len-element runs of the source's width-element rows: every stride but the last dim's
    // (a multiple of len) scales by width / len.
    const int64_t len = v->shape.back();
    KILN_CHECK(v->start + len <= v->width && v->width * shape_numel(v->shape) / len < (1ll << 32), "internal: view of ",
               shape_str(v->shape), " at ", v->start, " in rows of ", v->width);
    for (size_t o = 0; o + 1 < out.size(); ++o) st[o] = (params::uint)(st[o] / len * v->width);
    return (params::uint)v->start;
}
// The output's extent (n, rank, shape) of BinaryParams / MulAddParams, and the dispatch over its elements.
template <class P>
Dispatch elementwise(const char* shader, const Shape& out, P& p, const std::vector<params::uint*>& strides,
                     const std::vector<params::uint*>& offsets, const ir::Graph& g, const ir::Node& n) {
    KILN_CHECK(shape_numel(out) < (1ll << 32), shader, ": ", shape_str(out), " has >= 2^32 elements");
    p.n = (params::uint)shape_numel(out);
    p.rank = (params::uint)out.size();
    for (size_t i = 0; i < out.size(); ++i) p.shape[i] = (params::uint)out[i];
    for (size_t i = 0; i < strides.size(); ++i) *offsets[i] = operand(g, n, i, out, strides[i]);
    Dispatch d;
    d.shader = ShaderKey(shader);
    d.set_push(p);
    groups_1d(d, p.n);
    return d;
}
Dispatch binary(const char* shader, const ir::Graph& g, const ir::Node& n) {
    params::BinaryParams p{};
    if (const auto* a = std::get_if<ir::ActAttrs>(&n.attrs)) p.act = (params::uint)a->act;  // fused (ir::fuse)
    return elementwise(shader, g.value(n.out).shape, p, {p.sa, p.sb}, {&p.oa, &p.ob}, g, n);
}
}  // namespace

Dispatch lower_add(const ir::Graph& g, const ir::Node& n) { return binary("add", g, n); }
Dispatch lower_sub(const ir::Graph& g, const ir::Node& n) { return binary("sub", g, n); }
Dispatch lower_div(const ir::Graph& g, const ir::Node& n) { return binary("div", g, n); }
Dispatch lower_mul(const ir::Graph& g, const ir::Node& n) { return binary("mul", g, n); }

Dispatch lower_mul_add(const ir::Graph& g, const ir::Node& n) {
    params::MulAddParams p{};
    return elementwise("mul_add", g.value(n.out).shape, p, {p.sa, p.sb, p.sc}, {&p.oa, &p.ob, &p.oc}, g, n);
}

}  // namespace kiln::vk
