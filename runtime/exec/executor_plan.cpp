// The executor's plan: which nodes run, the residual chains updated in place, and where each weight and
// activation lives (weights uploaded or read in place; activations packed by lifetime into one arena). Building
// dispatches, dispatches.cpp; recording, record.cpp; running, executor.cpp; row chunks, row_split.cpp.
#include <algorithm>
#include <set>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"
#include "runtime/ir/cost.h"
#include "runtime/ir/fuse.h"
#include "runtime/ir/level_order.h"

namespace kiln::exec {

void Executor::Impl::plan(const WeightBytesFn& weights) {
    auto t0 = Clock::now();
    const auto& nodes = g.nodes();
    root.resize(g.values().size());
    for (size_t v = 0; v < root.size(); ++v) {
        root[v] = (int)v;
        int p = g.values()[v].producer;
        if (p >= 0 && ir::op_kind(nodes[(size_t)p].op) == ir::OpKind::view)
            root[v] = root[(size_t)nodes[(size_t)p].in[0]];
    }
    for (int v : g.inputs()) inputs[g.value(v).name] = v;
    for (auto& [name, v] : g.outputs()) outputs[name] = v;

    // Active nodes in execution order: everything, except that in regional mode only the template
    // instance of each block kind is kept (it is replayed for the others).
    std::vector<int> active;
    if (mode == Mode::regional) blocks = analyze_regions(g);
    for (int n = 0; n < (int)nodes.size(); ++n) {
        bool skip = false;
        for (auto& k : blocks) {
            const auto& t = g.regions()[(size_t)k.regions[0]];
            if (n >= k.first && n < k.end && !(n >= t.first && n < t.end)) skip = true;
        }
        if (!skip) active.push_back(n);
    }
    plan_chains();

    // Each compute node's dispatches: row chunks where it binds an activation over one binding (row_split.cpp). First:
    // a split-K linear's scratch is planned with the activations.
    for (int n : active)
        if (ir::op_kind(nodes[(size_t)n].op) == ir::OpKind::compute) node_parts[n] = parts(n);
    // Weights outside blocks and activations first: block weights get what the budget leaves (weight_stream.cpp).
    // Both reserve their bytes before either allocates, so they share one block of exactly their size.
    range.resize(g.values().size());
    const std::vector<int> upload = plan_weights(weights, active);
    plan_activations(active);
    upload_weights(weights, upload);
    auto tb = Clock::now();
    plan_block_weights(weights);
    c.upload_ms += ms_since(tb);
    c.plan_ms = ms_since(t0) - c.upload_ms;  // weight upload is reported on its own
    auto t1 = Clock::now();
    kernels.defer(true);  // every pipeline this plan needs, compiled at once on several threads
    build_dispatches(active);
    build_ptr_tables();
    build_advance();
    c.device_bytes = alloc.bytes();  // with the selection tables and replay rows, the plan's last allocations
    c.device_bytes_used = alloc.used();
    kernels.create_pending();
    kernels.defer(false);
    c.pipeline_ms = kernels.create_ms();
    c.pipelines = kernels.used();
    c.pipelines_created = kernels.created();
    c.plan_ms += ms_since(t1) - kernels.create_ms();
    cost.bytes_min = ir::min_bytes(g);
    record();
}

// True when the template's chain output y may be written into its input x's buffer: nothing in the
// block reads x after y is written, or y's producer reads x only at y's own element index (an
// elementwise op on x's shape, or a gated linear's residual: read at the store of its element), so every read of x
// sees the block's input.
bool Executor::Impl::can_update_in_place(const ir::Region& t, int x, int y) const {
    const int rx = r(x), def = g.value(r(y)).producer;
    if (def < t.first || def >= t.end) return false;
    int last_read = -1;
    bool same_index = true;
    for (int n = t.first; n < t.end; ++n) {
        const ir::Node& node = g.nodes()[(size_t)n];
        if (ir::op_kind(node.op) == ir::OpKind::view) continue;  // its readers are counted instead
        for (size_t k = 0; k < node.in.size(); ++k) {
            const int v = node.in[k];
            if (v < 0 || r(v) != rx) continue;
            last_read = std::max(last_read, n);
            if (n == def)
                same_index &= ((node.op == ir::Op::add || node.op == ir::Op::sub || node.op == ir::Op::mul ||
                                node.op == ir::Op::div || node.op == ir::Op::mul_add) &&
                               node.views.empty() && g.value(v).shape == g.value(node.out).shape) ||
                              (ir::linear_gated(node) && k == 4 && !ir::input_view(node, k) &&
                               g.value(v).shape == g.value(node.out).shape);
        }
    }
    return last_read < def || (last_read == def && same_index);
}

// The residual stream from block to block without copies. In place where the block allows it: each chain
// output Y takes its input X's buffer (can_update_in_place), so replay i leaves replay i + 1's input where
// it reads it. Else a ping-pong: a kind's replays alternate between two recordings, the second with every X
// and its Y in each other's buffers; after the blocks, the last instance's outputs live in X (an even number
// of replays) or in Y (odd). Both need the kind's X and Y to be distinct roots; else the chain is copied
// after each replay.
void Executor::Impl::plan_chains() {
    ping_pong.assign(blocks.size(), false);
    double_table.assign(blocks.size(), false);  // plan_replay_array
    for (size_t k = 0; k < blocks.size(); ++k) {
        const BlockKind& bk = blocks[k];
        std::set<int> xs, ys;
        bool ok = !bk.chain.empty();
        for (auto [x, y] : bk.chain) ok &= xs.insert(r(x)).second && ys.insert(r(y)).second;
        for (int x : xs) ok &= !ys.count(x);
        bool in_place = ok;
        for (auto [x, y] : bk.chain)
            in_place = in_place && can_update_in_place(g.regions()[(size_t)bk.regions[0]], x, y);
        if (in_place) {
            for (auto [x, y] : bk.chain) {
                const int rx = r(x), ry = r(y);
                for (auto& rv : root)
                    if (rv == ry) rv = rx;
            }
            ok = false;
        }
        ping_pong[k] = ok;
        const bool in_y = ok && bk.weights.size() % 2 == 1;
        for (auto [vl, x] : bk.last_outputs) {
            int holder = x;
            for (auto [cx, cy] : bk.chain)
                if (in_y && cx == x) holder = cy;
            // vl and every view of it (a reshape read after the blocks: DC-AE's pixel_unshuffle shortcut) share its
            // root: all of them read the holder's buffer, where the replays leave the last instance's output.
            const int old = root[(size_t)vl], now = root[(size_t)holder];
            for (auto& rv : root)
                if (rv == old) rv = now;
        }
    }
}

std::vector<int> Executor::Impl::plan_weights(const WeightBytesFn& weights, const std::vector<int>& active) {
    auto t0 = Clock::now();
    std::set<int> in_blocks;
    for (auto& k : blocks)
        for (auto& inst : k.weights) in_blocks.insert(inst.begin(), inst.end());
    // Weights read by active nodes outside blocks: one range each.
    std::set<int> used;
    for (int n : active)
        for (int v : g.nodes()[(size_t)n].in)
            if (v >= 0 && g.value(v).role == ir::Role::weight && !in_blocks.count(v)) used.insert(v);
    std::vector<int> upload;
    VkDeviceSize bytes = alloc.footprint(16);  // the dummy binding
    for (int v : used) {
        // Unified memory: read in place in the mmapped model file where it can be bound there.
        vk::BufferRange in_file = ctx.info().unified_memory ? import_weight(weights, v) : vk::BufferRange{};
        if (in_file.buffer && in_file.offset % std::max<VkDeviceSize>(ctx.info().min_storage_offset_align, 1) == 0 &&
            in_file.size <= ctx.info().max_storage_buffer_range) {
            range[(size_t)v] = in_file;
            c.in_place_bytes += in_file.size;
            c.weight_bytes += in_file.size;
            continue;
        }
        upload.push_back(v);
        bytes += alloc.footprint(value_bytes(g.value(v)));
    }
    alloc.reserve(bytes);
    c.upload_ms = ms_since(t0);
    return upload;
}

void Executor::Impl::upload_weights(const WeightBytesFn& weights, const std::vector<int>& upload) {
    auto t0 = Clock::now();
    dummy = alloc.alloc(16, "dummy binding");
    for (int v : upload) {
        range[(size_t)v] = alloc.alloc(value_bytes(g.value(v)), g.value(v).name.c_str());
        fill_weight(weights, v, range[(size_t)v], 0);
    }
    c.upload_ms += ms_since(t0);
}

void Executor::Impl::plan_activations(const std::vector<int>& active) {
    const auto& nodes = g.nodes();
    // Inputs and outputs get dedicated ranges: the host writes/reads them between runs. They are allocated with the
    // arena, after its size is known, so that one reservation covers both.
    std::set<int> pinned;
    for (auto& [name, v] : inputs) pinned.insert(r(v));
    for (auto& [name, v] : outputs) pinned.insert(r(v));
    // Liveness over the active order: [def, last use], the last use extended to the end of its reader's level run
    // (ir::level_run_ends: no node recorded beside the reader reuses the memory); block chain inputs live to their
    // kind's end.
    std::map<int, std::pair<int, int>> life;
    const std::vector<int> ends = ir::level_run_ends(g);
    std::vector<int> run_end(active.size());  // per active position: its run's last node's active position
    for (size_t t = 0; t < active.size(); ++t)
        run_end[t] =
            (int)(std::upper_bound(active.begin(), active.end(), ends[(size_t)active[t]]) - active.begin()) - 1;
    // A split-K linear's scratch (Dispatch::scratch: the largest of its parts') lives while the node runs: key -2 - n.
    std::map<int, VkDeviceSize> scratch_bytes;
    for (int t = 0; t < (int)active.size(); ++t) {
        const ir::Node& n = nodes[(size_t)active[(size_t)t]];
        if (auto it = node_parts.find(active[(size_t)t]); it != node_parts.end())
            for (const Part& p : it->second)
                if (p.d.scratch) {
                    const int key = -2 - active[(size_t)t];
                    KILN_CHECK(p.d.scratch <= max_binding, "split-K linear: ", p.d.scratch,
                               " bytes of partial sums exceed the binding limit (", max_binding, ")");
                    scratch_bytes[key] = std::max<VkDeviceSize>(scratch_bytes[key], p.d.scratch);
                    life[key] = {t, t};
                }
        for (int out : ir::node_outputs(n)) {
            if (out < 0) continue;
            int o = r(out);
            if (!pinned.count(o) && g.value(o).role == ir::Role::activation && !life.count(o)) life[o] = {t, t};
        }
        for (int v : n.in)
            if (v >= 0 && life.count(r(v))) life[r(v)].second = std::max(life[r(v)].second, run_end[(size_t)t]);
    }
    for (size_t ki = 0; ki < blocks.size(); ++ki) {
        const BlockKind& k = blocks[ki];
        const auto& t = g.regions()[(size_t)k.regions[0]];
        int end_t = (int)(std::find(active.begin(), active.end(), t.end - 1) - active.begin());
        int first_t = (int)(std::find(active.begin(), active.end(), t.first) - active.begin());
        // The template runs once per instance: whatever it reads from outside (shared values such as
        // the timestep embedding, chain inputs) must survive every replay, and so must chain outputs.
        auto keep = [&](int v) {
            if (v >= 0 && life.count(r(v))) life[r(v)].second = std::max(life[r(v)].second, end_t + 1);
        };
        for (int n = t.first; n < t.end; ++n)
            for (int v : nodes[(size_t)n].in)
                if (v >= 0 && (g.value(v).producer < t.first || g.value(v).producer >= t.end)) keep(v);
        for (auto [x, y] : k.chain) keep(x), keep(y);
        // Ping-pong: in odd replays Y's buffer holds the block input, read from the template's start.
        if (ping_pong[ki])
            for (auto [x, y] : k.chain)
                if (life.count(r(y))) life[r(y)].first = std::min(life[r(y)].first, first_t);
    }
    // Greedy first-fit placement by definition time.
    struct Live {
        VkDeviceSize off, size;
        int end;
    };
    std::vector<Live> live;
    std::map<int, VkDeviceSize> offset;
    VkDeviceSize total = 0;
    std::vector<std::pair<int, int>> order;  // (def, value)
    for (auto& [v, l] : life) order.push_back({l.first, v});
    std::sort(order.begin(), order.end());
    for (auto [def, v] : order) {
        live.erase(std::remove_if(live.begin(), live.end(), [&](const Live& l) { return l.end < def; }), live.end());
        VkDeviceSize size = align_up(v < 0 ? scratch_bytes.at(v) : value_bytes(g.value(v)));
        c.activation_bytes_naive += size;
        std::sort(live.begin(), live.end(), [](auto& a, auto& b) { return a.off < b.off; });
        VkDeviceSize at = 0;
        for (auto& l : live) {
            if (at + size <= l.off) break;
            at = std::max(at, l.off + l.size);
        }
        offset[v] = at;
        live.push_back({at, size, life[v].second});
        total = std::max(total, at + size);
    }
    c.activation_bytes_planned = total;
    VkDeviceSize bytes = total ? alloc.footprint(total) : 0;
    for (int v : pinned) {
        const ir::Value& val = g.value(v);
        KILN_CHECK(val.role != ir::Role::weight, "a graph output is a weight ('", val.name, "')");
        bytes += alloc.footprint(dtype_nbytes(val.dtype, shape_numel(val.shape)));
    }
    alloc.reserve(bytes);
    for (int v : pinned) {
        const ir::Value& val = g.value(v);
        const VkDeviceSize n = dtype_nbytes(val.dtype, shape_numel(val.shape));
        // Over one binding: bound in row chunks (row_split.cpp).
        range[(size_t)v] = alloc.alloc(n, "graph input/output", n <= ctx.info().max_storage_buffer_range);
    }
    if (total) {
        auto arena = alloc.alloc(total, "activations", false);
        // A value over one binding is bound in row chunks by the dispatches that read or write it (row_split.cpp).
        for (auto& [v, off] : offset) {
            VkDeviceSize n = v < 0 ? scratch_bytes.at(v) : value_bytes(g.value(v));
            (v < 0 ? scratch[-2 - v] : range[(size_t)v]) = {arena.buffer, arena.offset + off, n,
                                                            arena.mapped ? arena.mapped + off : nullptr};
        }
    }
}

}  // namespace kiln::exec
