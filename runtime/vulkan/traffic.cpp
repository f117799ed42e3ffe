// The traffic model, one row per shader family. Each row says how many times the dispatch's workgroups read each
// input binding, from the tiling its lowering chose (group counts: lower_matmul.cpp, lower_linear_smem.cpp,
// lower_nn.cpp). Change a kernel's grid and its row here together; tests/ops/test_traffic.cpp checks every row
// against hand-computed bytes.
#include "runtime/vulkan/traffic.h"

#include <algorithm>
#include <variant>

#include "runtime/ir/fuse.h"

namespace kiln::vk {

namespace {
// How many times input binding b is read by the whole dispatch.
double reads(const ir::Graph& g, const ir::Node& n, const Dispatch& d, size_t b) {
    const std::string& op = d.shader.op;
    const double gx = d.groups[0], gy = d.groups[1], gz = d.groups[2];
    if (op == "linear") {
        // Every kernel (reg / vec4 / tex: register tiles; smem*, coopmat: shared-memory tiles; multi: the parts'
        // column tiles side by side): groups[0] column tiles of N, groups[1] row tiles of M. x [M, K] is read once
        // per column tile, each W [N, K] and bias once per row tile. A gated linear's gate and residual (bindings
        // 3, 4; ir::fuse): once, at the store of the element that reads them.
        if (ir::linear_gated(n) && b >= 3) return 1;
        return b == 0 ? gx : gy;
    }
    if (op == "matmul") {
        // 64 x 64 (vec4: 64 x 128) tiles, groups (column tiles, row tiles, batch): a [B, M, K] once per column tile,
        // b [B|1, K, N] once per row tile of each batch.
        if (b == 0) return gx;
        const bool shared_b = g.value(n.in[1]).shape[0] == 1;
        return gy * (shared_b ? gz : 1.0);
    }
    if (op == "attention") {
        // Groups (query tiles, heads, batch): rows kernel, tiles of 32 x rows-per-lane; flash and its
        // cooperative-matrix variant (kernel "coopmat"), tiles of BR rows (flash_tile / flash_coopmat_tile). Every
        // workgroup streams its head's K and V rows (the flash kernels in tiles of BC keys through shared memory):
        // K and V once per query tile (causal tiles past a workgroup's last key are skipped: an upper bound). q once. A mask [B|1, Sq|1, Sk] is read by every head, and a row broadcast
        // over the queries (or a batch over the batch) by every query tile (batch).
        if (b == 0) return 1;
        if (b == 1 || b == 2) return gx;
        const Shape& sm = g.value(n.in[b]).shape;
        return gy * (sm[1] == 1 ? gx : 1.0) * (sm[0] == 1 ? gz : 1.0);
    }
    if (op == "conv2d") {
        // conv2d.comp / conv2d_tex.comp: groups (spatial tiles of 64 x 8 outputs, output-channel tiles of 8): x once
        // per channel tile, W and bias once per spatial tile.
        return b == 0 ? gy : gx;
    }
    if (op == "conv2d_grouped") {
        // One output per invocation; a workgroup's 64 outputs lie along a row, so x rows are re-read by the KH / stride
        // output rows that cover them; the few weights of a grouped (depthwise) kernel once.
        if (b != 0) return 1;
        const auto& a = std::get<ir::Conv2dAttrs>(n.attrs);
        const double kh = (double)g.value(n.in[1]).shape[2];
        return std::max(1.0, kh / (double)a.stride_h);
    }
    return 1;
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
            t.read += bytes * reads(g, n, d, b);
        } else {
            t.written += bound[b];
        }
    }
    return t;
}

}  // namespace kiln::vk
