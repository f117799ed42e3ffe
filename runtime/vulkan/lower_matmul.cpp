// Lowering of linear and linear_multi (register-tiled, 16..64 x 64..128 or 1 x 128 output tiles) and matmul (64 x 64
// tiles, 64 x 128 with 4-vectors). Attention: lower_attention.cpp.
#include <algorithm>
#include <cmath>
#include <variant>

#include "runtime/core/error.h"
#include "runtime/ir/fuse.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {
namespace {
constexpr uint32_t kTile = 64;       // output tile edge of matmul.comp
constexpr uint32_t kLinTileN = 128;  // output columns per linear_multi.comp workgroup (RN = 8)
uint32_t tiles(int64_t n) { return (uint32_t)((n + kTile - 1) / kTile); }

// Register tile of linear.glsl: RM rows per invocation, LY invocation rows, RN columns per invocation (16 columns of
// invocations). Every output element is computed by the same K loop whatever the tile, so the choice changes only
// the work spent on clamped rows and masked columns (and how many workgroups share the device), never the values.
// M <= 8 (adaLN / timestep MLPs, M = batch): one row per workgroup. Otherwise 4 rows per invocation and LY in
// 16, 8, 4 (64-, 32-, 16-row tiles), the one that pads M least, ties to the taller tile: dit-tiny's M = 32 no longer
// computes 32 duplicate rows in a 64-row tile. RN = 8 (128-column tiles), or 4 where N <= 64 (half the columns
// of a 128-wide tile would be masked). On lavapipe, dit-tiny at 32 x 64 tiles: full-mode step 137 -> 90 ms.
struct LinTile {
    uint32_t rm, ly, rn;
};
LinTile linear_tile(int64_t M, int64_t N) {
    LinTile t{1, 1, N <= 64 ? 4u : 8u};
    if (M <= 8) return t;
    t.rm = 4;
    int64_t best = -1;
    for (uint32_t ly : {16u, 8u, 4u}) {
        const int64_t rows = 4 * ly, padded = (M + rows - 1) / rows * rows;
        if (best < 0 || padded < best) best = padded, t.ly = ly;
    }
    return t;
}
}  // namespace

uint32_t linear_tile_group(double x_bytes, uint32_t row_tiles) {
    const double panel = x_bytes / std::max<uint32_t>(row_tiles, 1);
    if (panel <= 0) return kTileGroupMax;
    return (uint32_t)std::clamp(std::floor(kTileGroupBytes / panel), 1.0, (double)kTileGroupMax);
}

void set_linear_tile_group(Dispatch& d, const ir::Graph& g, const ir::Node& n) {
    params::LinearParams p;
    KILN_CHECK(d.push.size() == sizeof p, "internal: set_linear_tile_group on a dispatch without LinearParams");
    std::memcpy(&p, d.push.data(), sizeof p);
    const double x_bytes = (double)p.M * (double)p.K * (g.value(n.in[0]).dtype == DType::f16 ? 2 : 4);
    p.tile_group = d.tile_group = linear_tile_group(x_bytes, d.groups[1]);
    d.set_push(p);
}

Dispatch lower_linear(const ir::Graph& g, const ir::Node& n) {
    const ir::Value& w = g.value(n.in[1]);
    const Shape& sx = g.value(n.in[0]).shape;
    const bool quant = dtype_is_quant(w.dtype);
    KILN_CHECK(w.dtype == DType::f32 || w.dtype == DType::f16 || w.dtype == DType::bf16 || quant, "linear: weight '",
               w.name, "' ", shape_str(w.shape), " has dtype ", dtype_name(w.dtype), " (f32, f16, bf16 or quantized)");
    int64_t N = w.shape[0], K = w.shape[1], M = shape_numel(sx) / K;
    KILN_CHECK(!quant || K % dtype_block(w.dtype) == 0, "linear: ", dtype_name(w.dtype), " weight '", w.name, "' ",
               shape_str(w.shape), " has rows that are not whole blocks");
    KILN_CHECK(M * K < (1ll << 32) && N * K < (1ll << 32) && M * N < (1ll << 32), "linear: x ", shape_str(sx),
               " @ weight ", shape_str(w.shape), " has >= 2^32 elements in one operand");
    params::LinearParams p{(params::uint)M, (params::uint)N, (params::uint)K, n.in[2] >= 0 ? 1u : 0u, 0u, 0u, 0u, 1u};
    Dispatch d;
    // K % 4 == 0: every row of x and W starts 16-byte aligned (bindings are 256-aligned), so the
    // 4-vector variant applies. Quantized weights (K a multiple of 32) have only that variant.
    d.shader = ShaderKey::weights("linear", K % 4 == 0 ? "vec4" : "", w.dtype);
    if (ir::linear_gated(n)) {  // y = res + gate * h (ir::fuse; shaders/linear_gate.glsl)
        const Shape& so = g.value(n.out).shape;
        const ir::Value &gate = g.value(n.in[3]), &res = g.value(n.in[4]);
        const ir::InputView* gv = ir::input_view(n, 3);
        const int64_t span = ir::gate_row_span(gv ? gv->shape : gate.shape, so);
        KILN_CHECK(
            gate.dtype == DType::f32 && res.dtype == DType::f32 && res.shape == so && !ir::input_view(n, 4) && span > 0,
            "linear: gated residual: gate ", shape_str(gv ? gv->shape : gate.shape), " ", dtype_name(gate.dtype),
            " and residual ", shape_str(res.shape), " ", dtype_name(res.dtype), " against y ", shape_str(so),
            " (f32; gate broadcast over whole rows, residual of y's shape)");
        KILN_CHECK(shape_numel(gate.shape) < (1ll << 32), "linear: gate ", shape_str(gate.shape),
                   " has >= 2^32 elements");
        p.g_off = gv ? (params::uint)gv->start : 0u;
        p.g_stride = (params::uint)(gv ? gv->width : N);
        p.g_rows = (params::uint)span;
        d.shader.gated = true;
    }
    d.set_push(p);
    const LinTile t = linear_tile(M, N);
    const uint32_t rm = t.rm, ly = t.ly;
    // ACT: activation at the store; XF16 / YF16: x / y stored as f16 (ir::store_f16).
    d.spec = {rm,
              ly,
              (uint32_t)std::get<ir::LinearAttrs>(n.attrs).act,
              t.rn,
              g.value(n.in[0]).dtype == DType::f16 ? 1u : 0u,
              g.value(n.out).dtype == DType::f16 ? 1u : 0u};
    d.groups[0] = (uint32_t)((N + 16 * t.rn - 1) / (16 * t.rn));
    d.groups[1] = (uint32_t)((M + rm * ly - 1) / (rm * ly));
    KILN_CHECK(d.groups[1] <= 65535, "linear: M = ", M, " rows exceed the dispatch limit");
    set_linear_tile_group(d, g, n);
    return d;
}

Dispatch lower_linear_multi(const ir::Graph& g, const ir::Node& n) {
    const auto& a = std::get<ir::LinearMultiAttrs>(n.attrs);
    const ir::Value& w0 = g.value(n.in[1]);
    const Shape& sx = g.value(n.in[0]).shape;
    const int64_t K = w0.shape[1], M = shape_numel(sx) / K;
    KILN_CHECK(K % 4 == 0 && (!dtype_is_quant(w0.dtype) || K % dtype_block(w0.dtype) == 0), "linear_multi: K = ", K,
               " must be a multiple of 4 (and of the ", dtype_name(w0.dtype), " block)");
    params::LinearMultiParams p{};
    p.M = (params::uint)M;
    p.K = (params::uint)K;
    Dispatch d;
    d.shader = ShaderKey::weights("linear", "multi", w0.dtype);
    const LinTile t = linear_tile(M, 1 << 20);  // rows as lower_linear; columns: 128-wide tiles (tile0)
    const uint32_t rm = t.rm, ly = t.ly;
    d.spec = {rm, ly};
    uint32_t tiles = 0;
    for (int i = 0; i < ir::kMultiLinear; ++i) {
        p.tile0[i] = tiles;
        d.spec.push_back((uint32_t)a.act[(size_t)i]);
        const int wv = n.in[(size_t)(1 + 2 * i)];
        if (wv < 0) continue;
        const ir::Value& w = g.value(wv);
        KILN_CHECK(w.dtype == w0.dtype && w.shape[1] == K, "linear_multi: weight '", w.name, "' differs from '",
                   w0.name, "' in dtype or K");
        const int64_t N = w.shape[0];
        KILN_CHECK(M * K < (1ll << 32) && N * K < (1ll << 32) && M * N < (1ll << 32), "linear_multi: x ", shape_str(sx),
                   " @ weight ", shape_str(w.shape), " has >= 2^32 elements in one operand");
        p.N[i] = (params::uint)N;
        p.parts = (params::uint)i + 1;
        if (n.in[(size_t)(2 + 2 * i)] >= 0) p.has_bias |= 1u << i;
        tiles += (uint32_t)((N + kLinTileN - 1) / kLinTileN);
    }
    p.tile0[ir::kMultiLinear] = tiles;
    KILN_CHECK(p.parts > 0, "linear_multi: no weight");
    d.spec.push_back(p.parts);  // PARTS
    d.groups[0] = tiles;
    d.groups[1] = (uint32_t)((M + rm * ly - 1) / (rm * ly));
    const bool xf16 = g.value(n.in[0]).dtype == DType::f16;
    p.tile_group = d.tile_group = linear_tile_group((double)M * (double)K * (xf16 ? 2 : 4), d.groups[1]);
    d.set_push(p);
    KILN_CHECK(d.groups[1] <= 65535 && tiles <= 65535, "linear_multi: M = ", M, " rows exceed the dispatch limit");
    return d;
}

Dispatch lower_matmul(const ir::Graph& g, const ir::Node& n) {
    const Shape &sa = g.value(n.in[0]).shape, &sb = g.value(n.in[1]).shape;
    int64_t B = sa[0], M = sa[1], K = sa[2], N = sb[2];
    KILN_CHECK(B * M * K < (1ll << 32) && sb[0] * K * N < (1ll << 32) && B * M * N < (1ll << 32),
               "matmul: ", shape_str(sa), " @ ", shape_str(sb), " has >= 2^32 elements in one operand");
    KILN_CHECK(B <= 65535 && tiles(M) <= 65535, "matmul: ", shape_str(sa), " exceeds the dispatch limits");
    params::MatmulParams p{(params::uint)B, (params::uint)M, (params::uint)N, (params::uint)K,
                           sb[0] == 1 ? 0u : (params::uint)(K * N)};
    Dispatch d;
    // K, N % 4 == 0: rows of a, b and y start 16-byte aligned; 4-vector variant with 64 x 128 tiles.
    bool vec4 = K % 4 == 0 && N % 4 == 0;
    d.shader = ShaderKey("matmul", vec4 ? "vec4" : "");
    d.set_push(p);
    d.groups[0] = vec4 ? (uint32_t)((N + 127) / 128) : tiles(N);
    d.groups[1] = tiles(M);
    d.groups[2] = (uint32_t)B;
    return d;
}

}  // namespace kiln::vk
