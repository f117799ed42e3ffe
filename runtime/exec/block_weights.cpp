// Where each replayed block instance finds its weights. All instances of a kind are stored block-major
// (instance i in its own range, weight j at the same relative offset in each). The recording of the
// template is made once; what changes per replay is chosen in the primary command buffer. Descriptor state
// is not inherited by secondary command buffers, so a selection made on the device travels through memory:
//  - offset (auto's first choice): the kind's instances lie in one range that fits one binding. The
//    template's weight-reading dispatches use the "_off" shader variants: every block-weight input binds
//    that whole range, and the shader reads it from an element offset found in the dispatch's slot of a
//    small selection table (one uint per binding, in 16-byte units). Before replay i the primary rewrites
//    the kind's slots with vkCmdUpdateBuffer. The loads are plain storage-buffer loads, as fast as those of
//    unselected weights. When the instances do not fit one binding they are split into windows of whole
//    instances, each bound by its own recording of the template (record time grows with the windows, so
//    auto splits only on CPU devices, where the alternatives are slower; GPUs take addresses instead).
//    Before splitting, auto tries weight-major: weight j of every instance in a range of its own (instance i
//    at i * its aligned size), bound whole by binding j. Each such range must fit what its readers bind it
//    as: a storage buffer (maxStorageBufferRange), or a texel view where every reader's shader takes that
//    input as one (maxTexelBufferElements texels: 1 GiB of RGBA16F on lavapipe, against 128 MiB of storage
//    binding). DiT-XL's 28 blocks of 51 MiB then replay from one recording instead of 14.
//    KILN_BLOCK_LAYOUT=block never lays weights out weight-major; =weight does wherever it fits (tests).
//  - address (bufferDeviceAddress): the "_ptr" variants, whose weight bindings hold a slot of 64-bit
//    addresses (one per input binding), rewritten the same way. No weight needs to fit a binding, but on
//    lavapipe a linear layer reading its weights this way is 3-4.5x slower (test_jit "[.bench]"): llvmpipe
//    (lp_bld_nir_soa.c) turns a load through a 64-bit address into one scalar loop over the SIMD lanes *per
//    component*, on 64-bit per-lane address arithmetic, where a storage-buffer load runs one lane loop for
//    all four components of a vec4 (the linear shader's weight loads) on 32-bit offsets.
//  - copied (no shader variant, or neither of the above): the template binds a window; before replay i the
//    primary copies instance i's weights into it.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"
#include "runtime/exec/linear_select.h"
#include "runtime/ir/params.h"
#include "runtime/vulkan/shader_table.h"

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

namespace {
// Bindings of `shader` declared with WEIGHT_BUF (those its ptr and off variants can select), from the
// reflection of its ptr variant; 0 when it has none.
uint32_t weight_buf_bindings(vk::ShaderKey shader) {
    shader.selection = vk::Selection::ptr;
    const std::string name = shader.name();
    for (size_t i = 0; i < vk::kShaderCount; ++i)
        if (name == vk::kShaderTable[i].name)
            return vk::reflect_spirv(vk::kShaderTable[i].code, vk::kShaderTable[i].words).ptr_bindings;
    return 0;
}
// ExecOptions::block_layout (KILN_BLOCK_LAYOUT): auto | block | weight (see the top of this file).
std::string block_layout(const vk::Context& ctx) {
    const std::string e = ctx.settings().exec.block_layout;
    KILN_CHECK(e == "auto" || e == "block" || e == "weight", "KILN_BLOCK_LAYOUT='", e, "' (auto, block or weight)");
    return e;
}
}  // namespace

vk::BufferRange Executor::Impl::weight_at(size_t k, size_t i, size_t j) const {
    const VkDeviceSize n = value_bytes(g.value(blocks[k].tmpl_weights[j]));
    const vk::BufferRange& base = weight_major(k) ? weight_arena[k][j] : block_arena[k][i];
    const VkDeviceSize at = weight_major(k) ? i * align_up(n) : block_rel[k][j];
    return {base.buffer, base.offset + at, n, base.mapped ? base.mapped + at : nullptr};
}

VkDeviceSize Executor::Impl::weight_binding_limit(const BlockKind& k, size_t j) const {
    const auto& info = ctx.info();
    const int v = k.tmpl_weights[j];
    // Ranges start where the allocator puts them: a texel view needs that to meet the texel offset alignment.
    const VkDeviceSize align = std::max<VkDeviceSize>(info.min_storage_offset_align, 256);
    const bool views = info.texel_formats && align % std::max<VkDeviceSize>(info.min_texel_offset_align, 1) == 0;
    const ir::Region& t = g.regions()[(size_t)k.regions[0]];
    VkDeviceSize limit = UINT64_MAX;  // the least any reader allows; max_binding when nothing reads it
    for (int n = t.first; n < t.end; ++n) {
        auto it = node_parts.find(n);
        if (it == node_parts.end()) continue;
        const ir::Node& node = g.nodes()[(size_t)n];
        for (size_t b = 0; b < node.in.size(); ++b) {
            if (node.in[b] < 0 || r(node.in[b]) != v) continue;
            for (const Part& p : it->second) {
                // A view the device cannot make sends the dispatch to the storage-buffer shader: either binding
                // must hold the range, so a reader allows the larger of the two.
                VkDeviceSize lim = max_binding;
                const std::optional<vk::TexelForm> tex = vk::texel_form_of(p.d.shader);
                if (views && tex && b < tex->inputs)
                    lim =
                        std::max(lim, (VkDeviceSize)info.max_texel_elements * texel_bytes(g.value(v).dtype, tex->rgba));
                limit = std::min(limit, lim);
            }
        }
    }
    return limit == UINT64_MAX ? max_binding : limit;
}

bool Executor::Impl::weight_major_fits(const BlockKind& k) const {
    if (k.tmpl_weights.empty() || k.weights.size() < 2) return false;
    const VkDeviceSize max_alloc = ctx.info().max_allocation ? ctx.info().max_allocation : UINT64_MAX;
    for (size_t j = 0; j < k.tmpl_weights.size(); ++j) {
        const VkDeviceSize bytes = k.weights.size() * align_up(value_bytes(g.value(k.tmpl_weights[j])));
        if (bytes > weight_binding_limit(k, j) || bytes > max_alloc) return false;
    }
    return true;
}

// How kind k's replays get their weights (see the top of this file); marks the template dispatches that
// select on the device in ptr_slot (numbered by the caller). `why` says why a cheaper way was not taken.
Executor::Impl::Select Executor::Impl::choose_selection(const BlockKind& k, VkDeviceSize stride, std::string& why,
                                                        bool allow_offset) {
    if (select == BlockWeights::copy) {
        why = "copy requested";
        return Select::copy;
    }
    std::set<int> tw(k.tmpl_weights.begin(), k.tmpl_weights.end());
    const ir::Region& t = g.regions()[(size_t)k.regions[0]];
    std::vector<int> readers;  // template dispatches that read a block weight
    for (int n = t.first; n < t.end; ++n) {
        const ir::Node& node = g.nodes()[(size_t)n];
        if (ir::op_kind(node.op) != ir::OpKind::compute) continue;
        uint32_t weight_bits = 0;
        for (size_t b = 0; b < node.in.size(); ++b)
            if (node.in[b] >= 0 && tw.count(r(node.in[b]))) weight_bits |= 1u << b;
        if (!weight_bits) continue;
        vk::Dispatch d = vk::lower(g, node);
        if ((weight_buf_bindings(d.shader) & weight_bits) != weight_bits) {
            why = "shader " + d.shader.name() + " reads a block weight through a plain binding";
            return Select::copy;
        }
        readers.push_back(n);
    }
    const VkDeviceSize total = stride * k.weights.size();
    const bool cpu = ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const bool split_ok = select == BlockWeights::offset || (select == BlockWeights::automatic && cpu);
    if (allow_offset && select != BlockWeights::device &&
        (total <= max_binding || (block_layout(ctx) != "block" && weight_major_fits(k)) ||
         (split_ok && stride <= max_binding))) {
        for (int n : readers) ptr_slot[n] = 0;
        return Select::offset;
    }
    why = !allow_offset ? "streamed under the memory budget"
          : select == BlockWeights::device
              ? "device requested"
              : "its " + std::to_string(k.weights.size()) + " blocks (" + std::to_string(total >> 20) +
                    " MiB) exceed one binding (" + std::to_string(max_binding >> 20) + " MiB)";
    if (!ctx.info().buffer_device_address) {
        why += "; the device has no bufferDeviceAddress";
        return Select::copy;
    }
    bool too_large = false;
    for (int v : k.tmpl_weights) too_large |= value_bytes(g.value(v)) > max_binding;
    if (select == BlockWeights::automatic && cpu && !too_large) {
        why += "; CPU device: copies are cheaper than address loads there";
        return Select::copy;
    }
    for (int n : readers) ptr_slot[n] = 0;
    return Select::address;
}

bool Executor::Impl::weight_major(const BlockKind& k, Select sel, VkDeviceSize stride,
                                  const std::string& layout) const {
    return sel == Select::offset && layout != "block" &&
           (layout == "weight" || stride * k.weights.size() > max_binding) && weight_major_fits(k);
}

// The requests plan_block_weights and place_block_instances make, reserved before the first of them, so that every
// kind's resident weights, ring slots and copy windows share one block of exactly their size (split only where
// maxMemoryAllocationSize requires), and the host copies of streamed instances another in host_alloc.
void Executor::Impl::reserve_block_weights(const std::string& layout) {
    VkDeviceSize device = 0, host = 0;
    for (size_t ki = 0; ki < blocks.size(); ++ki) {
        const BlockKind& k = blocks[ki];
        const StreamKind& s = streams[ki];
        const VkDeviceSize stride = block_stride[ki];
        const size_t n = k.weights.size();
        const std::map<int, VkDeviceSize> saved = ptr_slot;  // choose_selection only marks the kind's readers
        std::string why;
        const Select sel = choose_selection(k, stride, why, s.resident >= n);
        ptr_slot = saved;
        if (weight_major(k, sel, stride, layout)) {
            for (int v : k.tmpl_weights) device += alloc.footprint(align_up(value_bytes(g.value(v))) * n);
        } else if (sel == Select::offset) {
            const size_t per = (size_t)std::min<VkDeviceSize>(n, max_binding / stride);
            for (size_t i = 0; i < n; i += per) device += alloc.footprint(stride * std::min(per, n - i));
        } else {
            device += alloc.footprint(stride) * (s.resident + (size_t)s.slots + (sel == Select::copy ? 1 : 0));
            if (s.file.empty()) host += host_alloc.footprint(stride) * (n - s.resident);
        }
    }
    alloc.reserve(device);
    host_alloc.reserve(host);
}

void Executor::Impl::plan_block_weights(const WeightBytesFn& weights) {
    // A slot is bound as a storage buffer ("_ptr") or a uniform buffer ("_off", 32 bytes: uvec4[2]).
    VkDeviceSize slot_align =
        std::max<VkDeviceSize>({ctx.info().min_storage_offset_align, ctx.info().min_uniform_offset_align, 16});
    size_t max_inputs = 1;
    for (auto& n : g.nodes()) max_inputs = std::max(max_inputs, n.in.size());
    slot_size =
        align_up(std::max<VkDeviceSize>(8 * max_inputs, 32), slot_align);  // 8 B per input (address), 4 (offset)
    VkDeviceSize table_bytes = 0;
    std::string note;
    // Layout per kind, and whether a streamed kind would be selected on the device (offset needs every
    // instance resident): what the budget decision needs.
    std::vector<KindNeed> needs;
    weight_arena.assign(blocks.size(), {});
    const std::string layout = block_layout(ctx);
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
        needs.push_back({k.weights.size(), stride, choose_selection(k, stride, why, false) != Select::copy});
        ptr_slot = saved;
    }
    plan_stream_budget(needs, weights);
    reserve_block_weights(layout);
    for (size_t ki = 0; ki < blocks.size(); ++ki) {
        const BlockKind& k = blocks[ki];
        const VkDeviceSize stride = block_stride[ki];
        const std::vector<VkDeviceSize>& rel = block_rel[ki];
        const bool streamed = streams[ki].resident < k.weights.size();
        std::map<int, VkDeviceSize> kind_slots_before = ptr_slot;
        std::string why;
        const Select sel = choose_selection(k, stride, why, !streamed);
        const std::string what = "weights of block kind " + k.kind;
        std::vector<vk::BufferRange> windows;
        std::vector<int> win_of(k.weights.size(), 0);
        const bool by_weight = weight_major(k, sel, stride, layout);
        if (by_weight) {
            // Every instance resident, weight j of each in weight_arena[ki][j]: one recording binds them all.
            VkDeviceSize largest = 0;
            for (size_t j = 0; j < k.tmpl_weights.size(); ++j) {
                const VkDeviceSize each = align_up(value_bytes(g.value(k.tmpl_weights[j])));
                weight_arena[ki].push_back(alloc.alloc(each * k.weights.size(), what.c_str(), false));
                largest = std::max(largest, each * k.weights.size());
            }
            for (size_t i = 0; i < k.weights.size(); ++i)
                for (size_t j = 0; j < k.tmpl_weights.size(); ++j)
                    fill_weight(weights, k.weights[i][j], weight_arena[ki][j],
                                i * align_up(value_bytes(g.value(k.tmpl_weights[j]))));
            block_arena.push_back({});
            note += (note.empty() ? "" : "; ") + k.kind + ": " + std::to_string(k.weights.size()) + " blocks of " +
                    std::to_string(stride >> 10) + " KiB laid out weight-major, each weight's instances in one " +
                    "bound range (largest " + std::to_string(largest >> 10) + " KiB), one recording";
        } else if (sel == Select::offset) {
            // Every instance resident, in windows of whole instances, each bound whole by a recording of the
            // template (one window when every instance fits one binding).
            std::vector<vk::BufferRange> inst;
            const size_t n = k.weights.size(), per = (size_t)std::min<VkDeviceSize>(n, max_binding / stride);
            for (size_t i = 0; i < n; ++i) {
                if (i % per == 0) windows.push_back(alloc.alloc(stride * std::min(per, n - i), what.c_str(), false));
                const vk::BufferRange& w = windows.back();
                VkDeviceSize at = (i % per) * stride;
                inst.push_back({w.buffer, w.offset + at, stride, w.mapped ? w.mapped + at : nullptr});
                win_of[i] = (int)windows.size() - 1;
            }
            for (size_t i = 0; i < n; ++i)
                for (size_t j = 0; j < k.tmpl_weights.size(); ++j)
                    fill_weight(weights, k.weights[i][j], inst[i], rel[j]);
            block_arena.push_back(std::move(inst));
        } else {
            // One range per resident instance: the allocator packs them block-major into its large blocks, and
            // no single allocation has to hold every block (SD3/Flux exceed maxMemoryAllocationSize otherwise).
            // Instances over the budget go to host memory (weight_stream.cpp).
            place_block_instances(ki, weights);
        }
        // The template's weights: instance 0's (copy: the window's), for barrier tracking and for any
        // dispatch that reads them through a plain binding.
        vk::BufferRange window;
        if (sel == Select::copy) {
            ptr_slot = kind_slots_before;
            slot_base.push_back(0);
            window = alloc.alloc(stride, ("weight window of block kind " + k.kind).c_str(), false);
            windows = {window};
            note += (note.empty() ? "" : "; ") + k.kind + ": copied per replay (" + why + ")";
        } else {
            slot_base.push_back(table_bytes);
            for (auto& [n, off] : ptr_slot)
                if (!kind_slots_before.count(n)) off = table_bytes, table_bytes += slot_size * n_parts(n);
            c.block_kinds_on_device++;
            if (by_weight) {
                c.block_kinds_by_offset++;
                c.block_kinds_weight_major++;
            } else if (sel == Select::offset) {
                c.block_kinds_by_offset++;
                window = block_arena[ki][0];
                if (windows.size() > 1)
                    note += (note.empty() ? "" : "; ") + k.kind + ": " + std::to_string(k.weights.size()) +
                            " blocks of " + std::to_string(stride >> 10) + " KiB in " + std::to_string(windows.size()) +
                            " bound windows of at most " + std::to_string(max_binding >> 10) +
                            " KiB, one recording each";
            } else {
                note += (note.empty() ? "" : "; ") + k.kind + ": selected by device address (" + why + ")";
            }
        }
        for (size_t j = 0; j < k.tmpl_weights.size(); ++j) {
            int v = k.tmpl_weights[j];
            VkDeviceSize n = value_bytes(g.value(v));
            KILN_CHECK(sel == Select::address || by_weight || n <= max_binding, "weight '", g.value(v).name, "' (", n,
                       " bytes) exceeds maxStorageBufferRange (", why, ")");
            range[(size_t)v] = by_weight ? weight_at(ki, 0, j) : template_weight(ki, j, window);
        }
        block_windows.push_back(std::move(windows));
        window_of.push_back(std::move(win_of));
        how.push_back(sel);
    }
    alloc.drop_reservation();  // nothing is left of it when reserve_block_weights matched the loop above
    plan_replay_array();
    // Two copies of every slot where a kind keeps two (double_table): the second at table_half.
    table_half = std::any_of(double_table.begin(), double_table.end(), [](bool d) { return d; }) ? table_bytes : 0;
    if (table_bytes) ptr_table = alloc.alloc(table_bytes + table_half, "block weight selection table");
    if (!blocks.empty())
        c.block_weights_note =
            note.empty() ? "block weights selected on the device (one bound range, per-replay offsets)" : note;
}

// Slot contents per instance, from weight_at(k, i, j) (offset) or weight_address (address). address: the address of
// every input of every
// "_ptr" dispatch, instance i's weights in place of the template's. offset: for every input of every "_off"
// dispatch, the offset of instance i's weight in the bound range in 16-byte units (0 for other inputs).
void Executor::Impl::build_ptr_tables() {
    ptr_data.assign(blocks.size(), {});
    for (size_t k = 0; k < blocks.size(); ++k) {
        if (how[k] == Select::copy) continue;
        const BlockKind& bk = blocks[k];
        const bool by_offset = how[k] == Select::offset;
        const ir::Region& t = g.regions()[(size_t)bk.regions[0]];
        VkDeviceSize begin = UINT64_MAX, end = 0;
        for (auto& [n, off] : ptr_slot)
            if (n >= t.first && n < t.end)
                begin = std::min(begin, off), end = std::max(end, off + slot_size * n_parts(n));
        if (begin > end) begin = end = 0;  // no dispatch reads a block weight
        for (size_t i = 0; i < bk.weights.size(); ++i) {
            std::vector<uint8_t> bytes(end - begin);
            for (auto& [n, node_off] : ptr_slot) {
                if (n < t.first || n >= t.end) continue;
                const ir::Node& node = g.nodes()[(size_t)n];
                // One slot per dispatch of the node: a row chunk's activations are read from its first row.
                for (size_t j = 0; j < n_parts(n); ++j) {
                    for (size_t b = 0; b < node.in.size(); ++b) {
                        const VkDeviceSize off = node_off + j * slot_size;
                        int v = node.in[b];
                        const int jw = v >= 0 ? tmpl_weight(k, r(v)) : -1;
                        const bool weight = jw >= 0;
                        if (by_offset) {
                            uint32_t units = 0;
                            if (weight) {
                                const vk::BufferRange w = weight_at(k, i, (size_t)jw);  // resident (offset)
                                const vk::BufferRange& win = bound_weight(k, (size_t)window_of[k][i], (size_t)jw);
                                const VkDeviceSize at = w.offset - win.offset;
                                KILN_CHECK(w.buffer == win.buffer && w.offset >= win.offset &&
                                               w.offset + w.size <= win.offset + win.size && at % 16 == 0 &&
                                               at / 16 <= UINT32_MAX,
                                           "internal: block ", i, " of kind ", bk.kind, " is outside its bound range");
                                units = (uint32_t)(at / 16);
                            }
                            std::memcpy(bytes.data() + (off - begin) + 4 * b, &units, 4);
                            continue;
                        }
                        VkDeviceAddress a = v < 0 ? alloc.address(dummy) : alloc.address(range[(size_t)r(v)]);
                        if (v >= 0 && node_parts.count(n)) a += node_parts.at(n)[j].sub[b].off;
                        if (weight) a = weight_address(k, i, (size_t)jw);  // resident, ring slot or in place
                        std::memcpy(bytes.data() + (off - begin) + 8 * b, &a, 8);
                    }
                }
            }
            ptr_data[k].push_back(std::move(bytes));
        }
        slot_base[k] = begin;  // a kind's slots are contiguous
    }
}

// Which kinds replay from one vkCmdExecuteCommands (replay_array; see executor_impl.h), and which of them keep their
// selection slots twice (double_table: those whose dispatches select weights). Called once every kind's selection
// and streaming is decided, before the selection table is allocated.
void Executor::Impl::plan_replay_array() {
    replay_array.assign(blocks.size(), false);
    double_table.assign(blocks.size(), false);
    if (mode != Mode::regional || !ctx.settings().exec.select_advance) return;  // KILN_SELECT_ADVANCE=0
    for (size_t k = 0; k < blocks.size(); ++k) {
        const bool carried = !ping_pong[k] && !chain_free(k);
        if (blocks[k].weights.size() < 2 || how[k] == Select::copy || streams[k].slots || carried || profile) continue;
        replay_array[k] = true;
        const ir::Region& t = g.regions()[(size_t)blocks[k].regions[0]];
        for (auto& [n, off] : ptr_slot) double_table[k] = double_table[k] || (n >= t.first && n < t.end);
    }
}

// The select_advance dispatches of the kinds that replay from one vkCmdExecuteCommands: binding 0 is advance_rows
// (the counters, then every such kind's rows ptr_data[k][0..n)), binding 1 the kind's slots in the copy it writes.
// Replay i's advance writes instance i + 1's row into the slot copy replay i + 1 reads (double_table: the other one
// than replay i's). The rows are
// written once here; the primary resets kind k's counter and copy 0 to instance 0 at the start of every run, so a
// run never depends on where the last one stopped.
void Executor::Impl::build_advance() {
    advance.assign(blocks.size(), -1);
    advance_odd.assign(blocks.size(), -1);
    std::vector<uint8_t> rows(16 * ((blocks.size() + 3) / 4));  // the counters (zero), 16-byte aligned rows after
    std::vector<VkDeviceSize> row0(blocks.size(), 0);
    std::vector<size_t> with_rows;  // kinds whose dispatches select weights: they get a select_advance
    for (size_t k = 0; k < blocks.size(); ++k) {
        if (!replay_array[k]) continue;
        c.kinds_counted_on_device++;
        if (ptr_data[k].empty() || ptr_data[k][0].empty()) continue;  // nothing in the block selects weights
        KILN_CHECK(double_table[k], "internal: block kind ", blocks[k].kind, " selects weights with one slot copy");
        row0[k] = rows.size();
        for (const auto& r : ptr_data[k]) rows.insert(rows.end(), r.begin(), r.end());
        rows.resize((rows.size() + 15) / 16 * 16);
        with_rows.push_back(k);
    }
    if (with_rows.empty()) return;
    const auto n_adv = (uint32_t)with_rows.size();
    advance_rows = alloc.alloc(rows.size(), "block replay counters and selection rows");
    alloc.upload(advance_rows, rows.data(), rows.size());
    // Per kind and parity q (replays i with i % 2 == q) one set: binding 1 is the kind's slots in copy 1 - q, the
    // only bytes its dispatch writes there, so nothing of copy q (which replay i reads) is bound for writing.
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 4 * n_adv};
    VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = 2 * n_adv;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &ps;
    VK_CHECK(vkCreateDescriptorPool(ctx.device(), &pi, nullptr, &advance_pool));
    const vk::Kernel& kern = kernels.get("select_advance");
    KILN_CHECK(kern.bindings == 2, "shader select_advance has ", kern.bindings, " bindings, expected 2");
    for (size_t k : with_rows) {
        params::SelectAdvanceParams p{};
        p.row0 = (uint32_t)(row0[k] / 4);
        p.words = (uint32_t)(ptr_data[k][0].size() / 4);
        p.n = (uint32_t)ptr_data[k].size();
        p.ctr = (uint32_t)(advance_ctr(k) / 4);
        p.live = 0;    // the bound range is the slots themselves
        p.width = 64;  // select_advance's local size, one workgroup
        for (size_t q : {0, 1}) {
            DispatchRec rec{&kern, VK_NULL_HANDLE, {}, {}, {}};
            VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
            ai.descriptorPool = advance_pool;
            ai.descriptorSetCount = 1;
            ai.pSetLayouts = &kern.set_layout;
            VK_CHECK(vkAllocateDescriptorSets(ctx.device(), &ai, &rec.set));
            const Span next{ptr_table.buffer, ptr_table.offset + (q ? 0 : table_half) + slot_base[k],
                            ptr_data[k][0].size()};
            VkDescriptorBufferInfo bi[2] = {{advance_rows.buffer, advance_rows.offset, advance_rows.size},
                                            {next.b, next.off, next.size}};
            VkWriteDescriptorSet w[2];
            for (uint32_t b = 0; b < 2; ++b) {
                w[b] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
                w[b].dstSet = rec.set;
                w[b].dstBinding = b;
                w[b].descriptorCount = 1;
                w[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
                w[b].pBufferInfo = &bi[b];
            }
            vkUpdateDescriptorSets(ctx.device(), 2, w, 0, nullptr);
            rec.d.shader = vk::ShaderKey("select_advance");
            rec.d.set_push(p);
            rec.reads = {{advance_rows.buffer, advance_rows.offset + row0[k], (VkDeviceSize)p.n * p.words * 4}};
            rec.writes = {{advance_rows.buffer, advance_rows.offset + advance_ctr(k), 4}, next};
            dispatches.push_back(std::move(rec));
            (q ? advance_odd : advance)[k] = (int)dispatches.size() - 1;
        }
    }
}

// Kind k's replays start at instance 0: its live slots hold ptr_data[k][0] and its select_advance counter is 0.
void Executor::Impl::record_replay_start(Recorder& rec, size_t k) {
    record_block_weights(rec, k, 0);
    if (advance[k] < 0) return;
    vkCmdFillBuffer(primary, advance_rows.buffer, advance_rows.offset + advance_ctr(k), 4, 0);
    rec.writes.push_back({advance_rows.buffer, advance_rows.offset + advance_ctr(k), 4});
}

void Executor::Impl::record_block_weights(Recorder& rec, size_t k, size_t i) {
    if (how[k] == Select::copy) {
        const vk::BufferRange& win = block_windows[k][0];
        record_instance_copy(primary, k, i, win);  // from device memory, host memory or the mapped file
        c.copies_per_run++;
        c.weight_copy_bytes_per_run += block_stride[k];
        rec.writes.push_back({win.buffer, win.offset, block_stride[k]});
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
