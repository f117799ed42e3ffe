// Where each replayed block instance finds its weights. All instances of a kind are stored block-major
// (instance i in its own range, weight j at the same relative offset in each). The recording of the
// template is made once; what changes per replay is chosen in the primary command buffer:
//  - on the device (bufferDeviceAddress): the template's dispatches that read block weights use the
//    "_ptr" shader variants, whose weight bindings hold a slot of 64-bit addresses (one per input binding);
//    before replay i the primary writes instance i's addresses with vkCmdUpdateBuffer (a few hundred bytes).
//    Descriptor state is not inherited by secondary command buffers, so the selection has to travel
//    through memory. No weight moves, and no weight needs to fit maxStorageBufferRange.
//  - copied (no bufferDeviceAddress, or a weight read by a shader without a "_ptr" variant): the
//    template binds a window; before replay i the primary copies instance i's weights into it.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"

namespace kiln::exec {

void Executor::Impl::fill_weight(const WeightBytesFn& weights, int v, const vk::BufferRange& dst, VkDeviceSize off) {
    const ir::Value& val = g.value(v);
    size_t n = value_bytes(val);
    if (dst.mapped) {
        weights(val, dst.mapped + off, n);
    } else {
        std::vector<uint8_t> tmp(n);
        weights(val, tmp.data(), n);
        alloc.upload(dst, tmp.data(), n, off);
    }
    c.weight_bytes += n;
}

// True when every template dispatch that reads a block weight has a "_ptr" variant taking that input
// through its address slot; else `why` names the first that does not.
bool Executor::Impl::can_select_on_device(const BlockKind& k, std::string& why) {
    if (select == BlockWeights::copy) {
        why = "copy requested";
        return false;
    }
    if (!ctx.info().buffer_device_address) {
        why = "the device has no bufferDeviceAddress";
        return false;
    }
    // lavapipe (a CPU device) loads through device addresses lane by lane: there, the copies cost less
    // than the slower weight loads, unless a block weight cannot be bound at all.
    bool too_large = false;
    for (int v : k.tmpl_weights) too_large |= value_bytes(g.value(v)) > ctx.info().max_storage_buffer_range;
    if (select == BlockWeights::automatic && ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU && !too_large) {
        why = "CPU device: copies are cheaper than address loads there";
        return false;
    }
    std::set<int> tw(k.tmpl_weights.begin(), k.tmpl_weights.end());
    const ir::Region& t = g.regions()[(size_t)k.regions[0]];
    for (int n = t.first; n < t.end; ++n) {
        const ir::Node& node = g.nodes()[(size_t)n];
        if (ir::op_kind(node.op) != ir::OpKind::compute) continue;
        uint32_t weight_bits = 0;
        for (size_t b = 0; b < node.in.size(); ++b)
            if (node.in[b] >= 0 && tw.count(r(node.in[b]))) weight_bits |= 1u << b;
        if (!weight_bits) continue;
        vk::Dispatch d = vk::lower(g, node);
        if (!vk::has_shader(d.shader + "_ptr")) {
            why = "shader " + d.shader + " has no _ptr variant";
            return false;
        }
        const vk::Kernel& kern = kernels.get(d.shader + "_ptr", d.spec);
        if ((kern.ptr_bindings & weight_bits) != weight_bits) {
            why = "shader " + d.shader + "_ptr reads a block weight through a plain binding";
            return false;
        }
        ptr_slot[n] = 0;  // numbered below
    }
    return true;
}

void Executor::Impl::plan_block_weights(const WeightBytesFn& weights) {
    VkDeviceSize slot_align = std::max<VkDeviceSize>(ctx.info().min_storage_offset_align, 16);
    size_t max_inputs = 1;
    for (auto& n : g.nodes()) max_inputs = std::max(max_inputs, n.in.size());
    slot_size = align_up(8 * max_inputs, slot_align);
    VkDeviceSize table_bytes = 0;
    std::string note;
    // Layout per kind, and whether its weights are selected on the device: what the budget decision needs.
    std::vector<KindNeed> needs;
    for (auto& k : blocks) {
        std::vector<VkDeviceSize> rel;
        VkDeviceSize stride = 0;
        for (int v : k.tmpl_weights) {
            rel.push_back(stride);
            stride += align_up(value_bytes(g.value(v)));
        }
        stride = std::max<VkDeviceSize>(stride, kAlign);
        block_rel.push_back(std::move(rel));
        block_stride.push_back(stride);
        std::map<int, VkDeviceSize> saved = ptr_slot;
        std::string why;
        needs.push_back({k.weights.size(), stride, can_select_on_device(k, why)});
        ptr_slot = saved;
    }
    plan_stream_budget(needs, weights);
    for (size_t ki = 0; ki < blocks.size(); ++ki) {
        const BlockKind& k = blocks[ki];
        const VkDeviceSize stride = block_stride[ki];
        // One range per instance: the allocator packs them block-major into its large blocks, and no single
        // allocation has to hold every block (SD3/Flux exceed maxMemoryAllocationSize otherwise). Instances over
        // the budget go to host memory (weight_stream.cpp).
        place_block_instances(ki, weights);
        std::map<int, VkDeviceSize> kind_slots_before = ptr_slot;
        std::string why;
        bool dev = can_select_on_device(k, why);
        vk::BufferRange window;
        if (dev) {
            slot_base.push_back(table_bytes);
            for (auto& [n, off] : ptr_slot)
                if (!kind_slots_before.count(n)) off = table_bytes, table_bytes += slot_size;
            c.block_kinds_on_device++;
        } else {
            ptr_slot = kind_slots_before;
            slot_base.push_back(0);
            window = alloc.alloc(stride, ("weight window of block kind " + k.kind).c_str(), false);
            note += (note.empty() ? "" : "; ") + k.kind + ": copied per replay (" + why + ")";
        }
        for (size_t j = 0; j < k.tmpl_weights.size(); ++j) {
            int v = k.tmpl_weights[j];
            VkDeviceSize n = value_bytes(g.value(v));
            KILN_CHECK(dev || n <= ctx.info().max_storage_buffer_range, "weight '", g.value(v).name, "' (", n,
                       " bytes) exceeds maxStorageBufferRange (", why, ")");
            range[(size_t)v] = template_weight(ki, j, window);
        }
        block_window.push_back(dev ? vk::BufferRange{} : window);
        on_device.push_back(dev);
    }
    if (table_bytes) ptr_table = alloc.alloc(table_bytes, "block weight address table");
    if (!blocks.empty())
        c.block_weights_note = note.empty() ? "block weights selected on the device (buffer device addresses)" : note;
}

// Slot contents per instance: the address of every input of every "_ptr" dispatch, instance i's weights
// in place of the template's.
void Executor::Impl::build_ptr_tables() {
    ptr_data.assign(blocks.size(), {});
    for (size_t k = 0; k < blocks.size(); ++k) {
        if (!on_device[k]) continue;
        const BlockKind& bk = blocks[k];
        std::map<int, size_t> weight_index;
        for (size_t j = 0; j < bk.tmpl_weights.size(); ++j) weight_index[bk.tmpl_weights[j]] = j;
        const ir::Region& t = g.regions()[(size_t)bk.regions[0]];
        VkDeviceSize begin = UINT64_MAX, end = 0;
        for (auto& [n, off] : ptr_slot)
            if (n >= t.first && n < t.end) begin = std::min(begin, off), end = std::max(end, off + slot_size);
        if (begin > end) begin = end = 0;  // no dispatch reads a block weight
        for (size_t i = 0; i < bk.weights.size(); ++i) {
            std::vector<uint8_t> bytes(end - begin);
            for (auto& [n, off] : ptr_slot) {
                if (n < t.first || n >= t.end) continue;
                const ir::Node& node = g.nodes()[(size_t)n];
                for (size_t b = 0; b < node.in.size(); ++b) {
                    int v = node.in[b];
                    VkDeviceAddress a = v < 0 ? alloc.address(dummy) : alloc.address(range[(size_t)r(v)]);
                    if (v >= 0 && weight_index.count(r(v))) a = weight_address(k, i, weight_index[r(v)]);
                    std::memcpy(bytes.data() + (off - begin) + 8 * b, &a, 8);
                }
            }
            ptr_data[k].push_back(std::move(bytes));
        }
        slot_base[k] = begin;  // a kind's slots are contiguous
    }
}

void Executor::Impl::record_block_weights(Recorder& rec, size_t k, size_t i) {
    if (!on_device[k]) {
        record_instance_copy(k, i, block_window[k]);
        c.copies_per_run++;
        c.weight_copy_bytes_per_run += block_stride[k];
        rec.writes.push_back({block_window[k].buffer, block_window[k].offset, block_stride[k]});
        return;
    }
    const std::vector<uint8_t>& data = ptr_data[k][i];
    if (data.empty()) return;
    constexpr VkDeviceSize kMaxUpdate = 65536;  // vkCmdUpdateBuffer's limit
    for (VkDeviceSize done = 0; done < data.size(); done += kMaxUpdate) {
        VkDeviceSize n = std::min<VkDeviceSize>(kMaxUpdate, data.size() - done);
        vkCmdUpdateBuffer(primary, ptr_table.buffer, ptr_table.offset + slot_base[k] + done, n, data.data() + done);
        c.table_updates_per_run++;
    }
    rec.writes.push_back({ptr_table.buffer, ptr_table.offset + slot_base[k], data.size()});
}

}  // namespace kiln::exec
