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
params::LinearParams params_of(const Dispatch& d) {
    params::LinearParams p;
    std::memcpy(&p, d.push.data(), sizeof p);
    return p;
}

bool act_f16(const ir::Graph& g, int v) { return g.value(v).dtype == DType::f16; }

bool is_gemm(const LinearKernel& k) {
    return k.caps.needs == LinearCaps::Needs::coopmat || k.caps.needs == LinearCaps::Needs::gemm_tile;
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

std::optional<Cm2Tile> choose_cm2_tile(const std::vector<Cm2Flex>& listed, uint32_t max_dim, uint32_t max_workgroup) {
    auto up = [](uint32_t v, uint32_t g) { return (v + g - 1) / g * g; };
    std::optional<Cm2Tile> best;
    for (const Cm2Flex& f : listed) {
        if (!f.mg || !f.ng || !f.kg || !f.invocations || f.invocations > 256) continue;
        if (max_workgroup && f.invocations > max_workgroup) continue;
        const Cm2Tile t{up(128, f.mg), up(128, f.ng), up(32, f.kg), f.invocations};
        if (max_dim && std::max({t.bm, t.bn, t.bk}) > max_dim) continue;
        if (!best || t.invocations > best->invocations) best = t;
    }
    return best;
}

namespace {
LinearCaps gemm_caps(LinearCaps::Needs needs, uint32_t wm, uint32_t wn, uint32_t fm, uint32_t fn, bool split = false) {
    return LinearCaps{.f32_w = false,
                      .k_multiple = 4,
                      .needs = needs,
                      .wm = wm,
                      .wn = wn,
                      .fm = fm,
                      .fn = fn,
                      .split = split,
                      .cpu_table = needs != LinearCaps::Needs::gemm_tile && !split};
}
Dispatch lower_gemv(const DeviceInfo&, const ir::Graph& g, const ir::Node& n) { return lower_linear_gemv(g, n); }
// The GEMM kernels' lowerings: kernel i of {coopmat, coopmat128, gemm, gemm128, coopmat_sk, gemm_sk}.
template <int i>
Dispatch lower_gemm(const DeviceInfo& d, const ir::Graph& g, const ir::Node& n) {
    static const char* const names[] = {"coopmat", "coopmat128", "gemm", "gemm128", "coopmat_sk", "gemm_sk"};
    return lower_linear_gemm(*find_linear_kernel(names[i]), d, g, n);
}
// The shader kernel of GEMM kernel k, split in S > 1 or not: coopmat, coopmat_sk, gemm or gemm_sk.
std::string gemm_shader(const LinearKernel& k, bool split) {
    return std::string(k.caps.needs == LinearCaps::Needs::coopmat ? "coopmat" : "gemm") + (split ? "_sk" : "");
}
}  // namespace

const std::vector<LinearKernel>& linear_kernels() {
    using N = LinearCaps::Needs;
    static const std::vector<LinearKernel> k = {
        {"reg", LinearCaps{}, lower_reg},
        {"smem64", LinearCaps{.k_multiple = 4}, lower_smem64},
        {"smem128", LinearCaps{.k_multiple = 4}, lower_smem128},
        {"coopmat", gemm_caps(N::coopmat, 2, 2, 2, 2), lower_gemm<0>},
        {"coopmat128", gemm_caps(N::coopmat, 4, 2, 2, 4), lower_gemm<1>},
        {"tex", LinearCaps{.k_multiple = 4, .needs = N::texel_formats}, lower_tex},
        {"gemm", gemm_caps(N::gemm_tile, 2, 2, 2, 2), lower_gemm<2>},
        {"gemm128", gemm_caps(N::gemm_tile, 4, 2, 2, 4), lower_gemm<3>},
        {"coopmat_sk", gemm_caps(N::coopmat, 2, 2, 2, 2, true), lower_gemm<4>},
        {"gemm_sk", gemm_caps(N::gemm_tile, 2, 2, 2, 2, true), lower_gemm<5>},
        {"gemv", LinearCaps{.k_multiple = 4, .cpu_table = false}, lower_gemv},
        {"coopmat2",
         LinearCaps{.f32_w = false,
                    .bf16_w = false,
                    .quant_w = false,
                    .k_multiple = 8,
                    .f32_x = false,
                    .needs = N::coopmat2,
                    .cpu_table = false},
         lower_linear_cm2},
    };
    return k;
}

const LinearKernel* find_linear_kernel(const std::string& name) {
    for (const LinearKernel& k : linear_kernels())
        if (k.name == name) return &k;
    return nullptr;
}

int linear_splits(const LinearKernel& k, DType dt) { return !is_gemm(k) ? 0 : dtype_is_quant(dt) ? 3 : 1; }

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
        if (!has_shader(ShaderKey::weights("linear", gemm_shader(k, c.split), dt).name()))
            return "this Kiln build has no cooperative-matrix shader (its glslang lacks GL_KHR_cooperative_matrix)";
    }
    if (c.needs == LinearCaps::Needs::coopmat2) {
        if (!d.coopmat_m || !d.cm2_bm)
            return "no VK_NV_cooperative_matrix2 as Kiln runs it (" +
                   (d.cm2_why.empty() ? std::string("not queried") : d.cm2_why) + ")";
        if (!has_shader("linear_cm2_f16"))
            return "this Kiln build has no VK_NV_cooperative_matrix2 shader (its glslang lacks "
                   "GL_NV_cooperative_matrix2)";
    }
    if (is_gemm(k) && !gemm_config(k, d, dt))
        return "shared memory too small (" + std::to_string(d.max_shared_memory) + " bytes; its tile's smallest " +
               "configuration needs more, or its staging does not divide among the subgroups)";
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
    if (!c.f32_x && !act_f16(g, n.in[0])) return "x stored f32 (f16 only: ir::store_f16, KILN_ACT_F16=1)";
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
    set_linear_tile_group(d, g, n);
    return d;
}

Dispatch lower_linear_gemv(const ir::Graph& g, const ir::Node& n) {
    KILN_CHECK(g.value(n.in[1]).shape[1] % 4 == 0, "linear_gemv: K % 4 != 0 (it loads 4-vectors along K)");
    Dispatch d = lower_linear(g, n);  // the checks, and LinearParams {M, N, K, has_bias}
    const params::LinearParams p = params_of(d);
    d.shader = ShaderKey::weights("linear", "gemv", g.value(n.in[1]).dtype);
    d.shader.gated = ir::linear_gated(n);
    constexpr uint32_t kCols = 4, kInvocations = 128;
    const uint32_t rows = std::clamp<uint32_t>(p.M, 1, 8);
    d.spec = {rows, kCols, d.spec[2], 0u, d.spec[4], d.spec[5], kInvocations};  // ACT, XF16, YF16 from lower_linear
    d.groups[0] = (p.N + kCols - 1) / kCols;
    d.groups[1] = (p.M + rows - 1) / rows;
    d.groups[2] = 1;
    KILN_CHECK(d.groups[0] <= 65535 && d.groups[1] <= 65535, "linear_gemv: N = ", p.N, ", M = ", p.M,
               " exceed the dispatch limit");
    set_linear_tile_group(d, g, n);
    return d;
}

uint32_t gemm_shared_bytes(const GemmConfig& c, DType dt) {
    const uint32_t w_parts = dtype_is_quant(dt) ? 2 : 1, maxima = dt == DType::f16 ? 3 : 6, lds = c.bk + 8;
    const uint32_t tiles = c.nbuf * (2 * c.bm() + w_parts * c.bn()) * lds * 2;
    return tiles + (c.coopmat ? c.wm * c.wn * c.shape.m * c.shape.n * 4 : 0) + maxima * 4;
}

std::optional<GemmConfig> gemm_config(const LinearKernel& k, const DeviceInfo& d, DType dt) {
    const LinearCaps& c = k.caps;
    KILN_CHECK(is_gemm(k), "internal: gemm_config of linear kernel '", k.name, "'");
    const bool cm = c.needs == LinearCaps::Needs::coopmat;
    std::vector<CoopmatShape> shapes;
    if (cm && d.coopmat_m) shapes.push_back({d.coopmat_m, d.coopmat_n, d.coopmat_k});
    if (!cm) shapes = {{16, 16, 16}, {8, 8, 8}};
    for (const CoopmatShape& s : shapes)
        for (auto [bk, nbuf] : {std::pair{32u, 2u}, {16u, 2u}, {32u, 1u}, {16u, 1u}}) {
            GemmConfig g{s, c.wm, c.wn, c.fm, c.fn, bk, nbuf, 0, cm};
            const uint32_t sg = cm ? d.subgroup_size : s.m * s.n / 8;  // the scalar form's "subgroups" (EPT 8)
            g.invocations = c.wm * c.wn * sg;
            const uint32_t q = bk / 4;  // staged 4-vectors per row
            const bool even = sg > 0 && (q * g.bm()) % g.invocations == 0 && (q * g.bn()) % g.invocations == 0;
            if (s.k > 0 && bk % s.k == 0 && even && gemm_shared_bytes(g, dt) <= d.max_shared_memory) return g;
        }
    return std::nullopt;
}

// A tile of (wm fm M) x (wn fn N) per workgroup: groups (column tiles, row tiles, 1).
Dispatch lower_linear_gemm(const LinearKernel& k, const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n) {
    const std::string what = "linear " + k.name;
    KILN_CHECK(is_gemm(k), "internal: ", what, " is not a tiled GEMM");
    const ir::Value& w = g.value(n.in[1]);
    KILN_CHECK(w.dtype != DType::f32, what, ": f32 weights (f16, bf16 or ggml blocks)");
    KILN_CHECK(w.shape[1] % 4 == 0, what, ": K % 4 != 0 (it loads 4-vectors along K)");
    const bool cm = k.caps.needs == LinearCaps::Needs::coopmat;
    if (cm) {
        KILN_CHECK(dev.coopmat_m && dev.coopmat_n && dev.coopmat_k, what, ": device '", dev.name,
                   "' has no VK_KHR_cooperative_matrix shape Kiln runs (", dev.coopmat_why, ")");
        KILN_CHECK(has_shader(ShaderKey::weights("linear", gemm_shader(k, k.caps.split), w.dtype).name()), what,
                   ": linear_", gemm_shader(k, k.caps.split), "_", dtype_name(w.dtype),
                   " not in this build (glslang without GL_KHR_cooperative_matrix)");
    }
    const std::optional<GemmConfig> c = gemm_config(k, dev, w.dtype);
    if (!c) {
        const GemmConfig least{cm ? CoopmatShape{dev.coopmat_m, dev.coopmat_n, dev.coopmat_k} : CoopmatShape{8, 8, 8},
                               k.caps.wm,
                               k.caps.wn,
                               k.caps.fm,
                               k.caps.fn,
                               16,
                               1,
                               0,
                               cm};
        KILN_CHECK(false, what, ": no tile configuration fits ", dev.max_shared_memory,
                   " bytes of shared memory (the smallest, 16-value slices in one buffer, needs ",
                   gemm_shared_bytes(least, w.dtype), ", or its staging does not divide among the subgroups)");
    }
    Dispatch d = lower_linear(g, n);  // the checks (ggml rows of whole blocks), and LinearParams {M, N, K, has_bias}
    const params::LinearParams p = params_of(d);
    const uint32_t S = k.caps.split ? splitk_factor(*c, dev, p.M, p.N, p.K) : 1;
    d.shader = ShaderKey::weights("linear", gemm_shader(k, S > 1), w.dtype);
    d.shader.gated = ir::linear_gated(n);
    d.spec = {c->shape.m, c->shape.n, d.spec[2], c->shape.k, d.spec[4], d.spec[5], c->invocations,
              c->wm,      c->wn,      c->fm,     c->fn,      c->bk,     c->nbuf};
    d.groups[0] = (p.N + c->bn() - 1) / c->bn();
    d.groups[1] = (p.M + c->bm() - 1) / c->bm();
    d.groups[2] = S;
    KILN_CHECK(d.groups[1] <= 65535, what, ": M = ", p.M, " rows exceed the dispatch limit");
    set_linear_tile_group(d, g, n);  // the partial pass's order (the reduce walks its own grid)
    if (S > 1) {  // linear_splitk.glsl: partial sums (PHASE 0), then the reduce (PHASE 1) on the same grid
        d.spec.insert(d.spec.end(), {0u, 0u});
        d.then_spec = d.spec;
        d.then_spec.back() = 1u;
        std::copy(d.groups, d.groups + 3, d.then_groups);
        d.scratch = (uint64_t)S * p.M * p.N * 4;
    }
    return d;
}

// One workgroup per BM x BN block of y (linear_cm2.comp). Its tensor loads clamp at M, N and K, so any shape runs;
// K % 8 == 0 keeps every row of x and W 16-byte aligned (the others' K % 4 gives 8 bytes for f16), the alignment
// the tensor loads' vector path wants (llama.cpp's mul_mm_cm2 takes its aligned path at strides % 8 == 0 only).
Dispatch lower_linear_cm2(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n) {
    const ir::Value& w = g.value(n.in[1]);
    KILN_CHECK(w.dtype == DType::f16, "linear coopmat2: ", dtype_name(w.dtype), " weights (f16 only)");
    KILN_CHECK(w.shape[1] % 8 == 0, "linear coopmat2: K = ", w.shape[1], " is not a multiple of 8 (16-byte rows)");
    KILN_CHECK(act_f16(g, n.in[0]), "linear coopmat2: x stored f32 (f16 only: ir::store_f16)");
    KILN_CHECK(dev.coopmat_m && dev.cm2_bm && dev.cm2_bn && dev.cm2_bk && dev.cm2_invocations,
               "linear coopmat2: device '", dev.name, "' has no VK_NV_cooperative_matrix2 as Kiln runs it (",
               dev.cm2_why, ")");
    KILN_CHECK(has_shader("linear_cm2_f16"),
               "linear coopmat2: linear_cm2_f16 not in this build (glslang without GL_NV_cooperative_matrix2)");
    Dispatch d = lower_linear(g, n);  // the checks, and LinearParams {M, N, K, has_bias} (and the gate's)
    const params::LinearParams p = params_of(d);
    d.shader = ShaderKey::weights("linear", "cm2", w.dtype);
    d.shader.gated = ir::linear_gated(n);
    d.spec = {dev.cm2_bm, dev.cm2_bn, d.spec[2], dev.cm2_bk, d.spec[4], d.spec[5], dev.cm2_invocations};
    d.groups[0] = (p.N + dev.cm2_bn - 1) / dev.cm2_bn;
    d.groups[1] = (p.M + dev.cm2_bm - 1) / dev.cm2_bm;
    d.groups[2] = 1;
    KILN_CHECK(d.groups[1] <= 65535, "linear coopmat2: M = ", p.M, " rows exceed the dispatch limit");
    set_linear_tile_group(d, g, n);
    return d;
}

uint32_t splitk_factor(const GemmConfig& c, const DeviceInfo& d, uint32_t M, uint32_t N, uint32_t K) {
    const uint64_t tiles = (uint64_t)((N + c.bn() - 1) / c.bn()) * ((M + c.bm() - 1) / c.bm());
    const uint64_t target = (uint64_t)kSplitWaves * (d.compute_units ? d.compute_units : kDefaultComputeUnits);
    const uint64_t T = (K + c.bk - 1) / c.bk, bytes = (uint64_t)M * N * 4;
    uint64_t S = std::min<uint64_t>((target + tiles - 1) / tiles, T / kSplitMinSlices);
    S = std::min<uint64_t>({S, bytes ? d.max_storage_buffer_range / bytes : 1, 65535});
    if (S < 2) return 1;
    return (uint32_t)((T + (T + S - 1) / S - 1) / ((T + S - 1) / S));
}

}  // namespace kiln::vk
