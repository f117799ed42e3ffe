// Lowering of embedding, timestep_embedding and conv2d.
#include <cmath>
#include <variant>

#include "runtime/core/error.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {

Dispatch lower_embedding(const ir::Graph& g, const ir::Node& n) {
    const ir::Value& t = g.value(n.in[0]);
    const Shape& si = g.value(n.in[1]).shape;
    KILN_CHECK(t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16, "embedding: table '", t.name,
               "' ", shape_str(t.shape), " has dtype ", dtype_name(t.dtype), " (f32, f16 or bf16 only)");
    KILN_CHECK(si[0] * t.shape[1] < (1ll << 32) && t.shape[0] < (1ll << 31), "embedding: table ", shape_str(t.shape),
               ", ids ", shape_str(si), " too large");
    params::EmbeddingParams p{(params::uint)si[0], (params::uint)t.shape[1], (params::uint)t.shape[0]};
    Dispatch d;
    d.shader = ShaderKey::weights("embedding", "", t.dtype);
    d.set_push(p);
    groups_1d(d, (uint64_t)p.N * p.D);
    return d;
}

Dispatch lower_timestep_embedding(const ir::Graph& g, const ir::Node& n) {
    auto a = std::get<ir::TimestepAttrs>(n.attrs);
    params::TimestepParams p{};
    p.N = (params::uint)g.value(n.in[0]).shape[0];
    p.dim = (params::uint)a.dim;
    p.half_dim = (params::uint)(a.dim / 2);
    p.flip = a.flip_sin_to_cos;
    p.shift = a.downscale_freq_shift;
    p.scale = a.scale;
    p.log_max_period = std::log(a.max_period);  // f32 log, as the reference
    KILN_CHECK((float)p.half_dim != p.shift, "timestep_embedding: downscale_freq_shift ", p.shift,
               " equals half of dim ", a.dim, " (division by zero)");
    Dispatch d;
    d.shader = ShaderKey("timestep_embedding");
    d.set_push(p);
    groups_1d(d, (uint64_t)p.N * p.dim);
    return d;
}

Dispatch lower_conv2d(const ir::Graph& g, const ir::Node& n) {
    auto a = std::get<ir::Conv2dAttrs>(n.attrs);
    const ir::Value& w = g.value(n.in[1]);
    const Shape &sx = g.value(n.in[0]).shape, &so = g.value(n.out).shape;
    KILN_CHECK(w.dtype == DType::f32 || w.dtype == DType::f16 || w.dtype == DType::bf16, "conv2d: weight '", w.name,
               "' ", shape_str(w.shape), " has dtype ", dtype_name(w.dtype), " (f32, f16 or bf16 only)");
    KILN_CHECK(shape_numel(sx) < (1ll << 31) && shape_numel(so) < (1ll << 31), "conv2d: x ", shape_str(sx), " -> ",
               shape_str(so), " too large");
    params::Conv2dParams p{};
    p.B = (params::uint)sx[0];
    p.C = (params::uint)sx[1];
    p.H = (params::uint)sx[2];
    p.W = (params::uint)sx[3];
    p.O = (params::uint)w.shape[0];
    p.KH = (params::uint)w.shape[2];
    p.KW = (params::uint)w.shape[3];
    p.HO = (params::uint)so[2];
    p.WO = (params::uint)so[3];
    p.stride_h = (params::uint)a.stride_h;
    p.stride_w = (params::uint)a.stride_w;
    p.pad_h = (params::uint)a.pad_h;
    p.pad_w = (params::uint)a.pad_w;
    p.has_bias = n.in[2] >= 0;
    p.groups = (params::uint)a.groups;
    if (a.groups > 1) {  // conv2d_grouped.comp: one output per invocation
        Dispatch d;
        d.shader = ShaderKey::weights("conv2d_grouped", "", w.dtype);
        d.set_push(p);
        groups_1d(d, (uint64_t)shape_numel(so), 64);
        return d;
    }
    constexpr uint32_t kTO = 8, kTC = 8;  // conv2d.comp: output channels x columns per invocation
    uint64_t blocks = (uint64_t)p.B * p.HO * ((p.WO + kTC - 1) / kTC);  // invocations on x: (b, row, block)
    Dispatch d;
    d.shader = ShaderKey::weights("conv2d", "", w.dtype);
    d.set_push(p);
    d.groups[0] = (uint32_t)((blocks + 63) / 64);
    d.groups[1] = (p.O + kTO - 1) / kTO;
    KILN_CHECK(d.groups[0] <= 65535 && d.groups[1] <= 65535, "conv2d: x ", shape_str(sx), " -> ", shape_str(so),
               " exceeds the dispatch limits");
    return d;
}

}  // namespace kiln::vk
