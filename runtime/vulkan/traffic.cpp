// The traffic model, one row per shader family. Each row says how many times the dispatch's workgroups read each
// input binding, from the tiling its lowering chose (group counts: lower_matmul.cpp, lower_linear_smem.cpp,
// lower_nn.cpp). Change a kernel's grid and its row here together; tests/ops/test_traffic.cpp checks every row
// against hand-computed bytes.
#include "runtime/vulkan/traffic.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "runtime/ir/fuse.h"

namespace kiln::vk {

namespace {
// How a dispatch reads one input binding: `times` in all, of which the re-reads fall in up to two tiers, each with
// its count and its reuse set (Traffic::Reread).
struct Reads {
    double times = 1;
    struct Tier {
        double extra = 0, reuse = 0;
    } tier[2];
};
Reads once() { return {}; }
Reads every(double times, double reuse) { return {times, {{times - 1, reuse}, {}}}; }

// How input binding b (bound[b] bytes) is read by the whole dispatch.
Reads reads(const ir::Graph& g, const ir::Node& n, const Dispatch& d, size_t b, const std::vector<double>& bound) {
    const std::string& op = d.shader.op;
    const double gx = d.groups[0], gy = d.groups[1], gz = d.groups[2];
    auto at = [&](size_t i) { return i < bound.size() ? bound[i] : 0.0; };
    if (op == "linear") {
        // Every kernel (reg / vec4 / tex: register tiles; smem*, coopmat*, gemm*, gemv, cm2: shared-memory tiles;
        // multi: the parts' column tiles side by side): groups[0] column tiles of N, groups[1] row tiles of M. x [M, K]
        // is read once per column tile, each W [N, K] and bias once per row tile. The grouped order (tile_xy,
        // shaders/common.glsl): bands of G = d.tile_group row tiles, each walked column tile by column tile. An x
        // row panel is re-read once per column tile, with its band's G panels and one W tile in between; a W tile is
        // read by the G rows of a band one after another (a W tile and a panel in between), and W is swept once per
        // band (all of W and G panels in between). A gated linear's gate and residual (bindings 3, 4; ir::fuse): once,
        // at the store of the element that reads them.
        if (ir::linear_gated(n) && b >= 3) return once();
        const size_t nw = ir::linear_gated(n) ? 3 : n.in.size();  // the weights and biases: inputs 1 .. nw - 1
        double w = 0;                                             // every weight and bias (linear_multi: all parts)
        for (size_t i = 1; i < nw; ++i) w += at(i);
        const double G = std::clamp<double>(d.tile_group, 1.0, std::max(gy, 1.0)), bands = std::ceil(gy / G);
        const double panel = at(0) / std::max(gy, 1.0), w_tile = w / std::max(gx, 1.0);
        if (b == 0) return every(gx, G * panel + w_tile);
        return {gy, {{gy - bands, w_tile + panel}, {bands - 1, w + G * panel}}};
    }
    if (op == "matmul") {
        // 64 x 64 (vec4: 64 x 128) tiles, groups (column tiles, row tiles, batch): a [B, M, K] once per column tile,
        // b [B|1, K, N] once per row tile of each batch.
        const bool shared_b = g.value(n.in[1]).shape[0] == 1;
        const double panel = at(0) / std::max(gy * gz, 1.0), b_batch = at(1) / (shared_b ? 1.0 : std::max(gz, 1.0));
        if (b == 0) return every(gx, panel + b_batch / std::max(gx, 1.0));
        return every(gy * (shared_b ? gz : 1.0), b_batch + panel);
    }
    if (op == "attention") {
        // Groups (query tiles, heads, batch): rows kernel, tiles of 32 x rows-per-lane; flash and its
        // cooperative-matrix variants, tiles of BR rows (flash_tile, flash_coopmat_tile; coopmat4: its subgroups'
        // rows together, flash_coopmat4_tile, one K/V staging serving them all). Every workgroup streams its head's
        // K and V rows (the flash kernels in tiles of BC keys through shared memory):
        // K and V once per query tile (causal tiles past a workgroup's last key are skipped: an upper bound). q
        // once. A mask [B|1, Sq|1, Sk] is read by every head, and a row broadcast over the queries (or a batch over
        // the batch) by every query tile (batch). Query tiles run first: one head's K and V are re-read by
        // consecutive workgroups; the mask is swept once per head.
        const double heads = std::max(gy * gz, 1.0), kv_head = (at(1) + at(2)) / heads;
        if (b == 0) return once();
        if (b == 1 || b == 2) return every(gx, kv_head + at(0) / heads / std::max(gx, 1.0));
        const Shape& sm = g.value(n.in[b]).shape;
        return every(gy * (sm[1] == 1 ? gx : 1.0) * (sm[0] == 1 ? gz : 1.0), at(b) + kv_head);
    }
    if (op == "conv2d") {
        // conv2d.comp / conv2d_tex.comp: groups (spatial tiles of 64 x 8 outputs, output-channel tiles of 8): x once
        // per channel tile, W and bias once per spatial tile. Spatial tiles run first: x is swept once per channel
        // tile; a channel tile's weights are re-read by consecutive workgroups.
        if (b == 0) return every(gy, at(0) + at(1) / std::max(gy, 1.0));
        return every(gx, (at(1) + at(2)) / std::max(gy, 1.0) + at(0) / std::max(gx, 1.0));
    }
    if (op == "conv2d_grouped") {
        // One output per invocation; a workgroup's 64 outputs lie along a row, so x rows are re-read by the KH / stride
        // output rows that cover them (neighbouring workgroups); the few weights of a grouped (depthwise) kernel once.
        if (b != 0) return once();
        const auto& a = std::get<ir::Conv2dAttrs>(n.attrs);
        const double kh = (double)g.value(n.in[1]).shape[2];
        const double times = std::max(1.0, kh / (double)a.stride_h);
        return every(times, at(0) / std::max(gx, 1.0) * times);
    }
    return once();
}
}  // namespace

Traffic traffic(const ir::Graph& g, const ir::Node& n, const Dispatch& d, const std::vector<double>& bound) {
    Traffic t;
    for (size_t b = 0; b < bound.size(); ++b) {
        if (bound[b] <= 0) continue;
        if (b < n.in.size()) {
            double bytes = bound[b];
            if (n.op == ir::Op::embedding && b == 0) {  // the gathered rows of the table, not all of it
                const ir::Value& table = g.value(n.in[0]);
                bytes = std::min(bytes, (double)dtype_nbytes(table.dtype, shape_numel(g.value(n.out).shape)));
            }
            const Reads r = reads(g, n, d, b, bound);
            t.read += bytes * r.times;
            for (const Reads::Tier& tier : r.tier)
                if (tier.extra > 0) t.rereads.push_back({bytes, 1 + tier.extra, tier.reuse});
        } else {
            t.written += bound[b];
        }
    }
    return t;
}

double products_per_term(const ir::Graph& g, const ir::Node& n, const Dispatch& d) {
    const std::string& k = d.shader.kernel;
    auto f32 = [&](size_t i) { return i < n.in.size() && n.in[i] >= 0 && g.value(n.in[i]).dtype == DType::f32; };
    if (d.shader.op == "linear" && (k == "coopmat" || k == "coopmat_sk" || k == "gemm" || k == "gemm_sk")) {
        if (d.spec.size() > 13 && d.spec[13] != 0) return 1;  // FAST (a split-K reduce multiplies nothing: 0 FLOPs)
        return 1.0 + (f32(0) ? 1 : 0) + (dtype_is_quant(g.value(n.in[1]).dtype) ? 1 : 0);
    }
    if (d.shader.op == "attention" && (k == "coopmat" || k == "coopmat4")) {
        if (d.spec.size() > 3 && (d.spec[3] & 8u) != 0) return 1;  // FAST
        return (2.0 + (f32(1) ? 1 : 0) + 2.0 + (f32(2) ? 1 : 0)) / 2;
    }
    return 1;
}

bool matrix_units(const Dispatch& d) {
    const std::string& k = d.shader.kernel;
    if (d.shader.op == "linear")
        return k == "coopmat" || k == "coopmat_sk" || k == "cm2" || k == "gemm" || k == "gemm_sk";
    return d.shader.op == "attention" && (k == "coopmat" || k == "coopmat4");
}

Traffic traffic_splitk(const ir::Graph& g, const ir::Node& n, const Dispatch& d, const std::vector<double>& bound,
                       bool reduce) {
    const size_t nin = n.in.size();
    std::vector<double> part(bound.size(), 0.0);  // the bindings this pass touches (their bytes), others 0
    if (!reduce) {
        part[0] = bound[0], part[1] = bound[1];
        Traffic t = traffic(g, n, d, part);
        t.written += (double)d.scratch;
        return t;
    }
    Traffic t;
    t.read = (double)d.scratch;
    for (size_t b = 2; b < nin && b < bound.size(); ++b) {
        const double times = b == 2 ? std::max<double>(d.then_groups[1], 1.0) : 1.0;  // the bias: per row tile
        t.read += bound[b] * times;
        if (times > 1 && bound[b] > 0) t.rereads.push_back({bound[b], times, bound[b]});
    }
    for (size_t b = nin; b < bound.size(); ++b) t.written += bound[b];
    return t;
}

double memory_bytes(const Traffic& t, double cache) {
    double b = t.read + t.written;
    for (const Traffic::Reread& r : t.rereads)
        if (cache > 0 && r.reuse <= cache / 2) b -= r.bytes * (r.times - 1);
    return b;
}

}  // namespace kiln::vk
