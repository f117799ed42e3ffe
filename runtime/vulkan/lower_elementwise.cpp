// Lowering of the elementwise ops: scale, silu, relu, tanh, gelu (UnaryParams), modulate and rope.
#include <variant>

#include "runtime/core/error.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {
namespace {
Dispatch unary(const char* shader, const ir::Graph& g, const ir::Node& n, uint32_t mode, float alpha, float beta) {
    params::UnaryParams p{};
    uint64_t numel = (uint64_t)shape_numel(g.value(n.out).shape);
    KILN_CHECK(numel < (1ull << 32), shader, ": ", shape_str(g.value(n.out).shape), " has >= 2^32 elements");
    p.n = (params::uint)numel;
    p.mode = mode;
    p.alpha = alpha;
    p.beta = beta;
    Dispatch d;
    d.shader = ShaderKey(shader);
    d.set_push(p);
    groups_1d(d, p.n);
    return d;
}
}  // namespace

Dispatch lower_scale(const ir::Graph& g, const ir::Node& n) {
    auto a = std::get<ir::ScaleAttrs>(n.attrs);
    return unary("scale", g, n, 0, a.alpha, a.beta);
}
Dispatch lower_silu(const ir::Graph& g, const ir::Node& n) { return unary("silu", g, n, 0, 1.f, 0.f); }
Dispatch lower_relu(const ir::Graph& g, const ir::Node& n) { return unary("relu", g, n, 0, 1.f, 0.f); }
Dispatch lower_tanh(const ir::Graph& g, const ir::Node& n) { return unary("tanh", g, n, 0, 1.f, 0.f); }
Dispatch lower_gelu(const ir::Graph& g, const ir::Node& n) {
    return unary("gelu", g, n, std::get<ir::GeluAttrs>(n.attrs).tanh ? 1u : 0u, 1.f, 0.f);
}

Dispatch lower_modulate(const ir::Graph& g, const ir::Node& n) {
    const Shape& s = g.value(n.out).shape;  // [B, N, C]
    KILN_CHECK(shape_numel(s) < (1ll << 32), "modulate: ", shape_str(s), " has >= 2^32 elements");
    params::ModulateParams p{(params::uint)s[0], (params::uint)s[1], (params::uint)s[2]};
    modulate_rows(n, s[2], p.sh_off, p.sh_stride, p.sc_off, p.sc_stride);
    Dispatch d;
    d.shader = ShaderKey("modulate");
    d.set_push(p);
    d.spec = {g.value(n.out).dtype == DType::f16 ? 1u : 0u};  // YF16 (ir::store_f16)
    groups_1d(d, (uint64_t)shape_numel(s));
    return d;
}

Dispatch lower_rope(const ir::Graph& g, const ir::Node& n) {
    const Shape& s = g.value(n.out).shape;  // [B, S, H*D]
    int64_t half = g.value(n.in[1]).shape[1];
    KILN_CHECK(shape_numel(s) < (1ll << 32), "rope: ", shape_str(s), " has >= 2^32 elements");
    params::RopeParams p{(params::uint)s[0], (params::uint)s[1], (params::uint)(s[2] / (2 * half)), (params::uint)half};
    Dispatch d;
    d.shader = ShaderKey("rope");
    d.set_push(p);
    groups_1d(d, (uint64_t)shape_numel(s) / 2);  // one invocation per pair
    return d;
}

}  // namespace kiln::vk
