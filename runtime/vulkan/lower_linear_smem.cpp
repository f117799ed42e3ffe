// Lowering of linear to linear_smem.comp and linear_coopmat.comp: (16 tm) x (16 tn) output tiles, shapes in
// LinearParams as lower_linear.
#include <variant>

#include "runtime/core/error.h"
#include "runtime/vulkan/linear_smem.h"

namespace kiln::vk {

std::string linear_smem_unsupported(const ir::Graph& g, const ir::Node& n) {
    if (n.op != ir::Op::linear) return "not a linear";
    if (g.value(n.in[1]).shape[1] % 4 != 0) return "K % 4 != 0";
    if (g.value(n.in[0]).dtype != DType::f32 || g.value(n.out).dtype != DType::f32)
        return "f16 activation storage (register path only)";
    return "";
}

Dispatch lower_linear_smem(const ir::Graph& g, const ir::Node& n, SmemTile t) {
    const std::string why = linear_smem_unsupported(g, n);
    KILN_CHECK(why.empty(), "linear_smem: ", why);
    KILN_CHECK((t.tm == 4 || t.tm == 8) && (t.tn == 4 || t.tn == 8), "linear_smem: tile ", t.tm, " x ", t.tn,
               " (4 or 8 each)");
    Dispatch d = lower_linear(g, n);  // the checks, and LinearParams {M, N, K, has_bias}
    params::LinearParams p;
    std::memcpy(&p, d.push.data(), sizeof p);
    const ir::Value& w = g.value(n.in[1]);
    d.shader = ShaderKey::weights("linear", "smem", w.dtype);
    d.spec = {t.tm, t.tn, d.spec.size() > 2 ? d.spec[2] : 0u};  // ACT from lower_linear: the fused activation
    d.groups[0] = (p.N + 16 * t.tn - 1) / (16 * t.tn);
    d.groups[1] = (p.M + 16 * t.tm - 1) / (16 * t.tm);
    d.groups[2] = 1;
    KILN_CHECK(d.groups[1] <= 65535, "linear_smem: M = ", p.M, " rows exceed the dispatch limit");
    return d;
}

std::string linear_coopmat_unsupported(const ir::Graph& g, const ir::Node& n) {
    std::string why = linear_smem_unsupported(g, n);
    if (why.empty() && g.value(n.in[1]).dtype != DType::f16) why = "weights not f16";
    if (const auto* a = std::get_if<ir::LinearAttrs>(&n.attrs); why.empty() && a && a->act != ir::Act::none)
        why = "fused activation not implemented";
    return why;
}

Dispatch lower_linear_coopmat(const ir::Graph& g, const ir::Node& n) {
    const std::string why = linear_coopmat_unsupported(g, n);
    KILN_CHECK(why.empty(), "linear_coopmat: ", why);
    Dispatch d = lower_linear(g, n);
    params::LinearParams p;
    std::memcpy(&p, d.push.data(), sizeof p);
    d.shader = ShaderKey("linear", "coopmat", "f16");
    d.spec = {};
    d.groups[0] = (p.N + 63) / 64;
    d.groups[1] = (p.M + 63) / 64;
    d.groups[2] = 1;
    KILN_CHECK(d.groups[1] <= 65535, "linear_coopmat: M = ", p.M, " rows exceed the dispatch limit");
    return d;
}

}  // namespace kiln::vk
