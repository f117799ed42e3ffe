// Lowering of attention: the rows kernel (attention.glsl: 1-4 query rows per invocation, head_dim and rows as
// specialization constants) and the flash kernel (attention_flash.glsl: query tiles against K/V tiles in shared
// memory). Both take the same bindings and push constants (params::AttentionParams).
#include <algorithm>
#include <cmath>
#include <variant>

#include "runtime/core/error.h"
#include "runtime/vulkan/attention_flash.h"
#include "runtime/vulkan/lower.h"
#include "runtime/vulkan/pipeline.h"

namespace kiln::vk {
namespace {
struct AttnShape {
    int64_t B, Sq, Sk, H, Hkv, D;
};
AttnShape attn_shape(const ir::Graph& g, const ir::Node& n) {
    auto a = std::get<ir::AttentionAttrs>(n.attrs);
    const Shape &sq = g.value(n.in[0]).shape, &sk = g.value(n.in[1]).shape;
    const int64_t H = a.heads, Hkv = a.kv_heads > 0 ? a.kv_heads : a.heads;
    return {sq[0], sq[1], sk[1], H, Hkv, sq[2] / H};
}

// The push constants both kernels read. With soft-capping, scale is pre-divided by softcap: the kernels compute
// softcap * tanh(q.k * scale / softcap) as softcap * tanh(q'.k), q' = q * (scale / softcap).
params::AttentionParams attn_params(const ir::Graph& g, const ir::Node& n) {
    auto a = std::get<ir::AttentionAttrs>(n.attrs);
    const AttnShape s = attn_shape(g, n);
    const Shape &sq = g.value(n.in[0]).shape, &sk = g.value(n.in[1]).shape;
    KILN_CHECK(s.B <= 65535 && s.H <= 65535 && s.B * std::max(s.Sq, s.Sk) * sq[2] < (1ll << 32), "attention: q ",
               shape_str(sq), ", k ", shape_str(sk), " exceed the dispatch limits");
    params::AttentionParams p{};
    p.B = (params::uint)s.B;
    p.Sq = (params::uint)s.Sq;
    p.Sk = (params::uint)s.Sk;
    p.H = (params::uint)s.H;
    p.D = (params::uint)s.D;
    p.Hkv = (params::uint)s.Hkv;
    p.causal = a.causal ? 1 : 0;
    const double scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt((double)s.D);
    p.scale = (float)scale;  // as before soft-capping existed: bitwise the same scale
    if (a.softcap > 0) {
        p.softcap = a.softcap;
        p.scale = (float)(scale / a.softcap);
    }
    if (n.in.size() > 3 && n.in[3] >= 0) {
        const Shape& sm = g.value(n.in[3]).shape;  // [B|1, Sq|1, Sk]
        p.has_mask = 1;
        p.mask_sq = sm[1] == 1 ? 0 : (params::uint)s.Sk;
        p.mask_sb = sm[0] == 1 ? 0 : (params::uint)(sm[1] * s.Sk);
    }
    return p;
}

// Shared memory of attention_flash.glsl for tile t and head_dim d: the q tile and one K/V tile (rows padded to
// d + 1 floats, 64 / br floats past the K/V tile), the scores, and two floats per invocation (64).
uint64_t flash_shared_bytes(FlashTile t, int64_t d) {
    return 4ull * ((uint64_t)(t.br + t.bc) * (uint64_t)(d + 1) + 64 / t.br + (uint64_t)t.br * t.bc + 128);
}

// Bit i: input i (q, k, v) stored f16; bit 4 (16): the output (the flash kernels' F16 constant).
uint32_t f16_bits(const ir::Graph& g, const ir::Node& n) {
    uint32_t f16 = 0;
    for (uint32_t i = 0; i < 3; ++i)
        if (g.value(n.in[i]).dtype == DType::f16) f16 |= 1u << i;
    if (g.value(n.out).dtype == DType::f16) f16 |= 16u;
    return f16;
}

// D rounded up to whole fragments of the cooperative-matrix variant (a multiple of its K and N).
uint32_t coopmat_cols(int64_t d, const DeviceInfo& dev) {
    const uint32_t a = std::max(dev.coopmat_k, dev.coopmat_n);
    return (uint32_t)((d + a - 1) / a * a);
}

// Shared memory of attention_flash_cm.glsl: q and K/V tiles as f16 hi + lo (rows of DL + 8), P likewise (rows of
// bc + 8), the f32 scores, two floats per invocation, a br x n row scaling and one m x n fragment per subgroup.
uint64_t coopmat_shared_bytes(FlashTile t, int64_t d, const DeviceInfo& dev) {
    const uint64_t lq = coopmat_cols(d, dev) + 8, lp = t.bc + 8, nsg = 64 / dev.subgroup_size;
    return 4ull * ((t.br + t.bc) * lq + t.br * lp + (uint64_t)t.br * t.bc + 128 + t.br * dev.coopmat_n +
                   nsg * dev.coopmat_m * dev.coopmat_n);
}

// Shared memory of attention_coopmat4.comp: the q tile (br rows) and the K and V tiles as f16 hi + lo (rows of
// DL + 8), P likewise (rows of bc + 8), the f32 scores, and each subgroup's partial max and sum per row and lane
// (rs x lr lanes per row).
uint64_t coopmat4_shared_bytes(Coopmat4Tile t, int64_t d, const DeviceInfo& dev, uint32_t lr) {
    const uint64_t lq = coopmat_cols(d, dev) + 8, br = t.br();
    return 4 * br * lq + 8ull * t.bc * lq + 4 * br * (t.bc + 8) + 4 * br * t.bc + 8ull * t.nsg * t.rs * lr;
}

// Lanes per row of coopmat4's softmax: `lanes` where set (KILN_TEST_ATTENTION_LANES), else max(1, subgroup / rs).
uint32_t coopmat4_lanes(uint32_t rs, const DeviceInfo& dev, uint32_t lanes) {
    return lanes ? lanes : std::max(1u, dev.subgroup_size / rs);
}

// The cooperative-matrix kernels stage q as q * scale * 2^qsh with 2^qsh ~ 1 / scale (within a factor sqrt 2): about
// q's own magnitude (attention_flash_cm.glsl; scale here is the kernel's, divided by softcap where set).
uint32_t q_shift(const params::AttentionParams& p) {
    return (uint32_t)std::clamp<long>(std::lround(-std::log2((double)p.scale)), 0, 30);
}
}  // namespace

Dispatch lower_attention(const ir::Graph& g, const ir::Node& n) {
    const AttnShape s = attn_shape(g, n);
    const Shape& sq = g.value(n.in[0]).shape;
    // 512: the single-head mid-block attention of the Stable Diffusion / Flux VAEs (registers: 2 x 512 floats).
    KILN_CHECK(s.D <= 512, "attention: head_dim ", s.D, " (q ", shape_str(sq), ", ", s.H, " heads) exceeds 512");
    // q/k/v or the output stored f16: only the flash kernels read and write them; here with the shared memory every
    // device has (Vulkan's 16 KiB minimum), exec::choose_attention_flash re-lowers for the device's.
    if (f16_bits(g, n) != 0) return lower_attention_flash(g, n, 16384);
    Dispatch d;
    // D % 4 == 0: rows of q/k/v start 16-byte aligned, the 4-vector variant applies; the spec constant
    // is the head width in the shader's vector units.
    bool vec4 = s.D % 4 == 0;
    d.shader = ShaderKey("attention", vec4 ? "vec4" : "");
    d.set_push(attn_params(g, n));
    // Query rows per invocation: the q and accumulator registers (2 QR D floats) stay within ~512.
    uint32_t qr = (uint32_t)std::clamp<int64_t>(256 / s.D, 1, 4);
    d.spec = {(uint32_t)(vec4 ? s.D / 4 : s.D), qr};
    d.groups[0] = (uint32_t)((s.Sq + 32 * qr - 1) / (32 * qr));
    d.groups[1] = (uint32_t)s.H;
    d.groups[2] = (uint32_t)s.B;
    return d;
}

FlashTile flash_tile(int64_t d, uint32_t max_shared) {
    // Largest first: 16 x 32 fits 16 KiB (Vulkan's minimum) up to head_dim 70, 32 KiB (lavapipe) up to 156.
    for (FlashTile t : {FlashTile{16, 32}, FlashTile{16, 16}, FlashTile{8, 16}, FlashTile{8, 8}, FlashTile{4, 8}})
        if (flash_shared_bytes(t, d) <= max_shared) return t;
    return {0, 0};
}

std::string attention_flash_unsupported(const ir::Graph& g, const ir::Node& n, uint32_t max_shared) {
    const AttnShape s = attn_shape(g, n);
    if (s.D > 512) return "head_dim " + std::to_string(s.D) + " exceeds 512";
    if (flash_tile(s.D, max_shared).br == 0)
        return "no tile fits " + std::to_string(max_shared) + " bytes of shared memory at head_dim " +
               std::to_string(s.D);
    return "";
}

Dispatch lower_attention_flash(const ir::Graph& g, const ir::Node& n, uint32_t max_shared) {
    const std::string why = attention_flash_unsupported(g, n, max_shared);
    KILN_CHECK(why.empty(), "attention (flash kernel): ", why);
    const AttnShape s = attn_shape(g, n);
    const FlashTile t = flash_tile(s.D, max_shared);
    Dispatch d;
    d.shader = ShaderKey("attention", "flash");
    d.set_push(attn_params(g, n));
    d.spec = {(uint32_t)s.D, t.br, t.bc, f16_bits(g, n)};
    d.groups[0] = (uint32_t)((s.Sq + t.br - 1) / t.br);
    d.groups[1] = (uint32_t)s.H;
    d.groups[2] = (uint32_t)s.B;
    return d;
}

FlashTile flash_coopmat_tile(int64_t d, const DeviceInfo& dev, uint32_t max_shared) {
    if (dev.coopmat_m == 0 || dev.subgroup_size == 0 || 64 % dev.subgroup_size != 0) return {0, 0};
    for (FlashTile t : {FlashTile{16, 32}, FlashTile{16, 16}, FlashTile{8, 16}, FlashTile{8, 8}})
        if (t.br % dev.coopmat_m == 0 && t.bc % dev.coopmat_n == 0 && t.bc % dev.coopmat_k == 0 &&
            coopmat_shared_bytes(t, d, dev) <= max_shared)
            return t;
    return {0, 0};
}

std::string attention_coopmat_unavailable(const DeviceInfo& dev) {
    if (dev.coopmat_m == 0) return "no cooperative matrices: " + dev.coopmat_why;
    if (!has_shader("attention_coopmat"))
        return "attention_coopmat is not in this build (glslang without GL_KHR_cooperative_matrix)";
    if (dev.subgroup_size == 0 || dev.subgroup_size > 64 || 64 % dev.subgroup_size != 0)
        return "subgroup size " + std::to_string(dev.subgroup_size) + " does not divide the 64 invocations";
    return "";
}

std::string attention_coopmat_unsupported(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n,
                                          uint32_t max_shared) {
    if (std::string why = attention_coopmat_unavailable(dev); !why.empty()) return why;
    const AttnShape s = attn_shape(g, n);
    // 256: the families' largest head (Gemma-2); the output fragments hold br * D / 64 floats per invocation.
    if (s.D > 256) return "head_dim " + std::to_string(s.D) + " exceeds 256";
    if (flash_coopmat_tile(s.D, dev, max_shared).br == 0)
        return "no tile fits " + std::to_string(max_shared) + " bytes of shared memory at head_dim " +
               std::to_string(s.D);
    return "";
}

Dispatch lower_attention_coopmat(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n, uint32_t max_shared,
                                 bool fast) {
    const std::string why = attention_coopmat_unsupported(dev, g, n, max_shared);
    KILN_CHECK(why.empty(), "attention (cooperative-matrix kernel): ", why);
    const AttnShape s = attn_shape(g, n);
    const FlashTile t = flash_coopmat_tile(s.D, dev, max_shared);
    const params::AttentionParams p = attn_params(g, n);
    Dispatch d;
    d.shader = ShaderKey("attention", "coopmat");
    d.set_push(p);
    d.spec = {(uint32_t)s.D,          t.br,          t.bc,          f16_bits(g, n) | (fast ? 8u : 0u),
              dev.coopmat_m,          dev.coopmat_n, dev.coopmat_k, dev.subgroup_size,
              coopmat_cols(s.D, dev), q_shift(p)};
    d.groups[0] = (uint32_t)((s.Sq + t.br - 1) / t.br);
    d.groups[1] = (uint32_t)s.H;
    d.groups[2] = (uint32_t)s.B;
    return d;
}

Coopmat4Tile flash_coopmat4_tile(int64_t d, const DeviceInfo& dev, uint32_t max_shared, uint32_t lanes) {
    const uint32_t m = dev.coopmat_m, sg = dev.subgroup_size;
    if (m == 0 || sg == 0 || (sg & (sg - 1)) != 0 || sg > 128) return {};
    // Rows per subgroup: 16 (one 16-row fragment on NVIDIA, two of lavapipe's 8), else one fragment.
    const uint32_t r16 = 16 % m == 0 ? 16 : m;
    for (uint32_t nsg : {4u, 2u, 1u})
        for (uint32_t rs : {r16, m})
            for (uint32_t bc : {32u, 16u, 8u}) {
                const Coopmat4Tile t{nsg, rs, bc};
                const uint32_t lr = coopmat4_lanes(rs, dev, lanes);
                if (nsg * sg <= 128 && rs % m == 0 && bc % dev.coopmat_n == 0 && bc % dev.coopmat_k == 0 &&
                    sg % lr == 0 && rs * lr % sg == 0 && bc % lr == 0 &&
                    coopmat4_shared_bytes(t, d, dev, lr) <= max_shared)
                    return t;
            }
    return {};
}

std::string attention_coopmat4_unavailable(const DeviceInfo& dev) {
    if (dev.coopmat_m == 0) return "no cooperative matrices: " + dev.coopmat_why;
    if (!has_shader("attention_coopmat4"))
        return "attention_coopmat4 is not in this build (glslang without GL_KHR_cooperative_matrix)";
    const uint32_t sg = dev.subgroup_size;
    if (sg == 0 || sg > 128 || (sg & (sg - 1)) != 0)
        return "subgroup size " + std::to_string(sg) + " is not a power of two up to 128";
    return "";
}

std::string attention_coopmat4_unsupported(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n,
                                           uint32_t max_shared, uint32_t lanes) {
    if (std::string why = attention_coopmat4_unavailable(dev); !why.empty()) return why;
    const AttnShape s = attn_shape(g, n);
    if (s.D > 256) return "head_dim " + std::to_string(s.D) + " exceeds 256";
    if (flash_coopmat4_tile(s.D, dev, max_shared, lanes).nsg == 0)
        return "no tile fits " + std::to_string(max_shared) + " bytes of shared memory at head_dim " +
               std::to_string(s.D);
    return "";
}

Dispatch lower_attention_coopmat4(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n, uint32_t max_shared,
                                  bool fast, uint32_t lanes) {
    const std::string why = attention_coopmat4_unsupported(dev, g, n, max_shared, lanes);
    KILN_CHECK(why.empty(), "attention (cooperative-matrix kernel, rows per subgroup): ", why);
    const AttnShape s = attn_shape(g, n);
    const Coopmat4Tile t = flash_coopmat4_tile(s.D, dev, max_shared, lanes);
    const params::AttentionParams p = attn_params(g, n);
    Dispatch d;
    d.shader = ShaderKey("attention", "coopmat4");
    d.set_push(p);
    d.spec = {(uint32_t)s.D,
              t.br(),
              t.bc,
              f16_bits(g, n) | (fast ? 8u : 0u),
              dev.coopmat_m,
              dev.coopmat_n,
              dev.coopmat_k,
              dev.subgroup_size,
              coopmat_cols(s.D, dev),
              q_shift(p),
              t.nsg * dev.subgroup_size,
              t.rs,
              coopmat4_lanes(t.rs, dev, lanes)};
    d.groups[0] = (uint32_t)((s.Sq + t.br() - 1) / t.br());
    d.groups[1] = (uint32_t)s.H;
    d.groups[2] = (uint32_t)s.B;
    return d;
}

}  // namespace kiln::vk
