// Lowering of add/sub/mul: broadcasting strides into BinaryParams.
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
Dispatch binary(const char* shader, const ir::Graph& g, const ir::Node& n) {
    const Shape& out = g.value(n.out).shape;
    params::BinaryParams p{};
    p.n = (params::uint)shape_numel(out);
    p.rank = (params::uint)out.size();
    for (size_t i = 0; i < out.size(); ++i) p.shape[i] = (params::uint)out[i];
    bstrides(g.value(n.in[0]).shape, out, p.sa);
    bstrides(g.value(n.in[1]).shape, out, p.sb);
    Dispatch d;
    d.shader = shader;
    d.set_push(p);
    groups_1d(d, p.n);
    return d;
}
}  // namespace

Dispatch lower_add(const ir::Graph& g, const ir::Node& n) { return binary("add", g, n); }
Dispatch lower_sub(const ir::Graph& g, const ir::Node& n) { return binary("sub", g, n); }
Dispatch lower_mul(const ir::Graph& g, const ir::Node& n) { return binary("mul", g, n); }

}  // namespace kiln::vk
