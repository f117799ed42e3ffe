// The linear kernels' declarations and lowerings (see linear_kernels.h). Each lowering checks what it needs itself,
// in its own words, rather than calling linear_kernel_unsupported: the declaration and the lowering are two
// statements of one fact, and tests/ops/test_linear_caps.cpp fails where they disagree.
#include "runtime/vulkan/linear_kernels.h"

#include <algorithm>
#include <variant>

#include "runtime/core/error.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/pipeline.h"

namespace kiln::vk {
namespace {
constexpr uint32_t kCoopmatLDS = 40;  // linear_coopmat.comp's shared row stride (halves; its K slice is 32)

params::LinearParams params_of(const Dispatch& d) {
    params::LinearParams p;
    std::memcpy(&p, d.push.data(), sizeof p);
    return p;
}

bool act_f16(const ir::Graph& g, int v) { return g.value(v).dtype == DType::f16; }

// Shared memory of linear_coopmat.comp at shape m x n for weights of dtype dt: x hi, x lo and W slices (double-
// buffered, f16; W lo too for ggml blocks), one f32 accumulator stage per subgroup, the slices' maxima (x; and W
// where it is not f16).
uint32_t coopmat_shared_bytes(uint32_t m, uint32_t n, DType dt) {
    const uint32_t w_parts = dtype_is_quant(dt) ? 2 : 1, maxima = dt == DType::f16 ? 3 : 6;
    return 2 * (4 * m + 4 * m + w_parts * 4 * n) * kCoopmatLDS * 2 + 4 * m * n * 4 + maxima * 4;
}

Dispatch lower_reg(const DeviceInfo&, const ir::Graph& g, const ir::Node& n) { return lower_linear(g, n); }
Dispatch lower_smem64(const DeviceInfo&, const ir::Graph& g, const ir::Node& n) {
    return lower_linear_smem(g, n, {4, 4});
}
Dispatch lower_smem128(const DeviceInfo&, const ir::Graph& g, const ir::Node& n) {
    return lower_linear_smem(g, n, {8, 4});
}
Dispatch lower_tex(const DeviceInfo& d, const ir::Graph& g, const ir::Node& n) {
    KILN_CHECK(d.texel_formats, "linear_tex: device '", d.name, "' has no uniform texel buffers of Kiln's formats");
    Dispatch r = lower_linear(g, n);
    auto t = texel_variant(r.shader);  // only the 4-vector kernel (K % 4 == 0) has a texel form
    KILN_CHECK(t.has_value(), "linear_tex: K = ", g.value(n.in[1]).shape[1], " is not a multiple of 4");
    r.shader = *t;
    return r;
}
}  // namespace

std::optional<CoopmatShape> choose_coopmat_shape(const std::vector<CoopmatShape>& listed, uint32_t subgroup) {
    std::optional<CoopmatShape> best;
    for (const CoopmatShape& s : listed) {
        const bool fits = (s.m == 8 || s.m == 16) && (s.n == 8 || s.n == 16) && s.k > 0 && s.k <= 32 && 32 % s.k == 0 &&
                          subgroup > 0 && (8 * s.m) % subgroup == 0 && (8 * s.n) % subgroup == 0;
        if (!fits) continue;
        if (s.m == 16 && s.n == 16 && s.k == 16) return s;
        if (!best || s.m * s.n * s.k > best->m * best->n * best->k) best = s;
    }
    return best;
}

const std::vector<LinearKernel>& linear_kernels() {
    using N = LinearCaps::Needs;
    static const std::vector<LinearKernel> k = {
        {"reg", LinearCaps{}, lower_reg},
        {"smem64", LinearCaps{.k_multiple = 4}, lower_smem64},
        {"smem128", LinearCaps{.k_multiple = 4}, lower_smem128},
        {"coopmat", LinearCaps{.f32_w = false, .k_multiple = 4, .needs = N::coopmat}, lower_linear_coopmat},
        {"tex", LinearCaps{.k_multiple = 4, .needs = N::texel_formats}, lower_tex},
        {"gemm", LinearCaps{.f32_w = false, .k_multiple = 4, .needs = N::gemm_tile}, lower_linear_gemm},
    };
    return k;
}

const LinearKernel* find_linear_kernel(const std::string& name) {
    for (const LinearKernel& k : linear_kernels())
        if (k.name == name) return &k;
    return nullptr;
}

std::string linear_kernel_unavailable(const LinearKernel& k, const DeviceInfo& d, DType dt) {
    const LinearCaps& c = k.caps;
    const bool w = dt == DType::f32    ? c.f32_w
                   : dt == DType::f16  ? c.f16_w
                   : dt == DType::bf16 ? c.bf16_w
                                       : dtype_is_quant(dt) && c.quant_w;
    if (!w) return std::string(dtype_name(dt)) + " weights";
    if (c.needs == LinearCaps::Needs::texel_formats && !d.texel_formats)
        return "no uniform texel buffers of the formats Kiln reads (RGBA32F, RGBA16F, RGBA16_UINT, R32F, R16F, "
               "R16_UINT)";
    if (c.needs == LinearCaps::Needs::coopmat) {
        if (!d.coopmat_m)
            return "no VK_KHR_cooperative_matrix shape Kiln runs (" +
                   (d.coopmat_why.empty() ? std::string("not queried") : d.coopmat_why) + ")";
        if (!has_shader(ShaderKey::weights("linear", "coopmat", dt).name()))
            return "this Kiln build has no cooperative-matrix shader (its glslang lacks GL_KHR_cooperative_matrix)";
        if (coopmat_shared_bytes(d.coopmat_m, d.coopmat_n, dt) > d.max_shared_memory) return "shared memory too small";
    }
    if (c.needs == LinearCaps::Needs::gemm_tile && !gemm_scalar_shape(d, dt))
        return "shared memory too small (" + std::to_string(coopmat_shared_bytes(8, 8, dt)) + " bytes at 8 x 8)";
    return "";
}

std::string linear_kernel_unsupported(const LinearKernel& k, const DeviceInfo& d, const ir::Graph& g,
                                      const ir::Node& n) {
    if (n.op != ir::Op::linear) return "not a linear";
    const ir::Value& w = g.value(n.in[1]);
    std::string why = linear_kernel_unavailable(k, d, w.dtype);
    if (!why.empty()) return why;
    const LinearCaps& c = k.caps;
    if (w.shape[1] % c.k_multiple != 0) return "K % " + std::to_string(c.k_multiple) + " != 0";
    if (!c.f16_x && act_f16(g, n.in[0])) return "f16 x";
    if (!c.f16_y && act_f16(g, n.out)) return "f16 y";
    if (!c.act && std::get<ir::LinearAttrs>(n.attrs).act != ir::Act::none) return "fused activation";
    return "";
}

// linear_smem.comp: spec {TM, TN, ACT, -, XF16, YF16} (linear_io.glsl's ids 2, 4, 5, as lower_linear's).
Dispatch lower_linear_smem(const ir::Graph& g, const ir::Node& n, SmemTile t) {
    KILN_CHECK(g.value(n.in[1]).shape[1] % 4 == 0, "linear_smem: K % 4 != 0 (it loads 4-vectors along K)");
    KILN_CHECK((t.tm == 4 || t.tm == 8) && (t.tn == 4 || t.tn == 8), "linear_smem: tile ", t.tm, " x ", t.tn,
               " (4 or 8 each)");
    Dispatch d = lower_linear(g, n);  // the checks, and LinearParams {M, N, K, has_bias}
    const params::LinearParams p = params_of(d);
    d.shader = ShaderKey::weights("linear", "smem", g.value(n.in[1]).dtype);
    d.shader.gated = ir::linear_gated(n);
    d.spec = {t.tm, t.tn, d.spec[2], 0u, d.spec[4], d.spec[5]};  // ACT, XF16, YF16 from lower_linear
    d.groups[0] = (p.N + 16 * t.tn - 1) / (16 * t.tn);
    d.groups[1] = (p.M + 16 * t.tm - 1) / (16 * t.tm);
    d.groups[2] = 1;
    KILN_CHECK(d.groups[1] <= 65535, "linear_smem: M = ", p.M, " rows exceed the dispatch limit");
    return d;
}

// linear_coopmat.comp: spec {CM, CN, ACT, CK, XF16, YF16, 4 x subgroup size}; a (4 CM) x (4 CN) tile per workgroup.
Dispatch lower_linear_coopmat(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n) {
    const ir::Value& w = g.value(n.in[1]);
    KILN_CHECK(w.dtype != DType::f32, "linear_coopmat: f32 weights (f16, bf16 or ggml blocks)");
    KILN_CHECK(w.shape[1] % 4 == 0, "linear_coopmat: K % 4 != 0 (it loads 4-vectors along K)");
    KILN_CHECK(dev.coopmat_m && dev.coopmat_n && dev.coopmat_k, "linear_coopmat: device '", dev.name,
               "' has no VK_KHR_cooperative_matrix shape Kiln runs (", dev.coopmat_why, ")");
    const ShaderKey key = ShaderKey::weights("linear", "coopmat", w.dtype);
    KILN_CHECK(has_shader(key.name()), "linear_coopmat: ", key.name(),
               " not in this build (glslang without GL_KHR_cooperative_matrix)");
    const uint32_t bytes = coopmat_shared_bytes(dev.coopmat_m, dev.coopmat_n, w.dtype);
    KILN_CHECK(bytes <= dev.max_shared_memory, "linear_coopmat: needs ", bytes,
               " bytes of shared memory; the device has ", dev.max_shared_memory);
    Dispatch d = lower_linear(g, n);  // the checks (ggml rows of whole blocks), and LinearParams {M, N, K, has_bias}
    const params::LinearParams p = params_of(d);
    d.shader = key;
    d.shader.gated = ir::linear_gated(n);
    d.spec = {dev.coopmat_m, dev.coopmat_n, d.spec[2], dev.coopmat_k, d.spec[4], d.spec[5], 4 * dev.subgroup_size};
    const uint32_t bm = 4 * dev.coopmat_m, bn = 4 * dev.coopmat_n;
    d.groups[0] = (p.N + bn - 1) / bn;
    d.groups[1] = (p.M + bm - 1) / bm;
    d.groups[2] = 1;
    KILN_CHECK(d.groups[1] <= 65535, "linear_coopmat: M = ", p.M, " rows exceed the dispatch limit");
    return d;
}

std::optional<CoopmatShape> gemm_scalar_shape(const DeviceInfo& d, DType dt) {
    for (uint32_t e : {16u, 8u})
        if (coopmat_shared_bytes(e, e, dt) <= d.max_shared_memory) return CoopmatShape{e, e, e};
    return std::nullopt;
}

// linear_gemm.comp: linear_coopmat.comp's spec with the scalar shape and 4 x (CM CN / 8) invocations (each holds 8
// elements of each accumulator).
Dispatch lower_linear_gemm(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n) {
    const ir::Value& w = g.value(n.in[1]);
    KILN_CHECK(w.dtype != DType::f32, "linear_gemm: f32 weights (f16, bf16 or ggml blocks)");
    KILN_CHECK(w.shape[1] % 4 == 0, "linear_gemm: K % 4 != 0 (it loads 4-vectors along K)");
    const auto s = gemm_scalar_shape(dev, w.dtype);
    KILN_CHECK(s.has_value(), "linear_gemm: needs ", coopmat_shared_bytes(8, 8, w.dtype),
               " bytes of shared memory; the device has ", dev.max_shared_memory);
    Dispatch d = lower_linear(g, n);  // the checks (ggml rows of whole blocks), and LinearParams {M, N, K, has_bias}
    const params::LinearParams p = params_of(d);
    d.shader = ShaderKey::weights("linear", "gemm", w.dtype);
    d.shader.gated = ir::linear_gated(n);
    d.spec = {s->m, s->n, d.spec[2], s->k, d.spec[4], d.spec[5], s->m * s->n / 2};
    const uint32_t bm = 4 * s->m, bn = 4 * s->n;
    d.groups[0] = (p.N + bn - 1) / bn;
    d.groups[1] = (p.M + bm - 1) / bm;
    d.groups[2] = 1;
    KILN_CHECK(d.groups[1] <= 65535, "linear_gemm: M = ", p.M, " rows exceed the dispatch limit");
    return d;
}

}  // namespace kiln::vk
