// The executor's dispatches, made once at plan time: per compute node (and row chunk) its shader variant (texel
// buffers, off / ptr weight selection: vk::ShaderKey), its descriptor set and the ranges it reads and writes; and the
// texel views those sets hold. Recording is in record.cpp, running in executor.cpp.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"
#include "runtime/exec/linear_select.h"
#include "runtime/ir/cost.h"
#include "runtime/vulkan/traffic.h"

namespace kiln::exec {

namespace {
// The cost model's view of one dispatch: what each binding (node.in in order, then outs) covers in it, a row
// chunk, an input view or the whole value (one instance of a block weight); 0 for an absent one.
std::vector<double> bound_bytes(const ir::Graph& g, const ir::Node& node, const Part& part,
                                const std::vector<int>& outs) {
    std::vector<double> bound(node.in.size() + outs.size(), 0.0);
    for (size_t b = 0; b < bound.size(); ++b) {
        const int v = b < node.in.size() ? node.in[b] : outs[b - node.in.size()];
        if (v < 0) continue;
        const ir::InputView* view = b < node.in.size() ? ir::input_view(node, b) : nullptr;
        bound[b] = part.sub[b].size ? (double)part.sub[b].size
                   : view           ? (double)dtype_nbytes(g.value(v).dtype, shape_numel(view->shape))
                                    : (double)value_bytes(g.value(v));
    }
    return bound;
}
}  // namespace

VkBufferView Executor::Impl::texel_view(const vk::BufferRange& br, DType dt, bool rgba) {
    rgba = rgba && !dtype_is_quant(dt);  // ggml blocks: the 16-bit words
    VkFormat f = VK_FORMAT_UNDEFINED;
    if (dt == DType::f32) f = rgba ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32_SFLOAT;
    if (dt == DType::f16) f = rgba ? VK_FORMAT_R16G16B16A16_SFLOAT : VK_FORMAT_R16_SFLOAT;
    if (dt == DType::bf16) f = rgba ? VK_FORMAT_R16G16B16A16_UINT : VK_FORMAT_R16_UINT;
    if (dtype_is_quant(dt)) f = VK_FORMAT_R16_UINT;
    const VkDeviceSize texel = texel_bytes(dt, rgba);
    const auto& info = ctx.info();
    if (f == VK_FORMAT_UNDEFINED || !info.texel_formats || br.size == 0 || br.size % texel ||
        br.offset % std::max<VkDeviceSize>(info.min_texel_offset_align, 1) || br.size / texel > info.max_texel_elements)
        return VK_NULL_HANDLE;
    auto key = std::make_tuple(br.buffer, br.offset, br.size, f);
    if (auto it = texel_views.find(key); it != texel_views.end()) return it->second;
    VkBufferViewCreateInfo vi{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
    vi.buffer = br.buffer;
    vi.format = f;
    vi.offset = br.offset;
    vi.range = br.size;
    VkBufferView v;
    VK_CHECK(vkCreateBufferView(ctx.device(), &vi, nullptr, &v));
    return texel_views[key] = v;
}

int Executor::Impl::kind_of(const ir::Node& node) const {
    for (size_t ki = 0; ki < blocks.size(); ++ki)
        if (node.region >= 0 && g.regions()[(size_t)node.region].kind == blocks[ki].kind) return (int)ki;
    return -1;
}

void Executor::Impl::make_descriptor_pool(const std::vector<int>& active) {
    const auto& nodes = g.nodes();
    int n_dispatch = 0, n_bind = 0;
    for (int n : active) {
        const ir::Node& node = nodes[(size_t)n];
        if (ir::op_kind(node.op) != ir::OpKind::compute) continue;
        const auto& p = node_parts.at(n);
        int copies = (kind_of(node) >= 0 ? (int)variants((size_t)kind_of(node)) : 1) * (int)p.size();
        n_dispatch += copies, n_bind += copies * ((int)node.in.size() + (int)node.extra_out.size() + 2);
        if (p.size() > 1) c.split_ops++, c.split_dispatches += copies;
    }
    // Storage buffers, one uniform buffer per dispatch at most (the selection slot of "_off" variants), and three
    // uniform texel buffers at most (q, k, v of attention_tex; x and W of the other texel shaders).
    VkDescriptorPoolSize ps[3] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, (uint32_t)std::max(n_bind, 1)},
                                  {VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, (uint32_t)std::max(n_dispatch, 1)},
                                  {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, (uint32_t)std::max(3 * n_dispatch, 1)}};
    VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = (uint32_t)std::max(n_dispatch, 1);
    pi.poolSizeCount = 3;
    pi.pPoolSizes = ps;
    VK_CHECK(vkCreateDescriptorPool(ctx.device(), &pi, nullptr, &pool));
}

std::vector<int> Executor::Impl::make_dispatch(int n, size_t j, int kind, const std::map<int, int>& swap, size_t window,
                                               VkDeviceSize table_off) {
    const ir::Node& node = g.nodes()[(size_t)n];
    const Part& part = node_parts.at(n)[j];
    vk::Dispatch d = part.d;  // linear: the variant measured fastest here, chosen in parts() (linear_select.h)
    // A dispatch that selects block weights on the device: "_off" (offsets into the bound range of all
    // instances, from its slot, bound after the output) or "_ptr" (addresses, from its slot).
    auto slot = ptr_slot.find(n);
    const bool by_offset = slot != ptr_slot.end() && how[(size_t)kind] == Select::offset;
    if (slot != ptr_slot.end()) d.shader.selection = by_offset ? vk::Selection::off : vk::Selection::ptr;
    const std::vector<int> outs = ir::node_outputs(node);
    // A split-K linear binds its scratch after the outputs (linear_splitk.glsl).
    const size_t scratch_b = d.scratch ? node.in.size() + outs.size() : SIZE_MAX;
    const size_t want = node.in.size() + outs.size() + (d.scratch ? 1 : 0) + (by_offset ? 1 : 0);
    // "_off": the index of the block weight input v reads, else -1.
    auto selected = [&](int v) { return by_offset && v >= 0 ? tmpl_weight((size_t)kind, r(v)) : -1; };
    // What binding b < want - (by_offset) reads or writes: the value's range, its row chunk, or the weight
    // window of an "_off" dispatch.
    auto value_range = [&](uint32_t b, int v) {
        int root_v = r(v);
        if (auto it = swap.find(root_v); it != swap.end()) root_v = it->second;
        vk::BufferRange br = range[(size_t)root_v];
        KILN_CHECK(br.buffer, "internal: value ", v, " of op ", ir::op_name(node.op), " has no buffer");
        if (part.sub[b].size) {  // a row chunk
            KILN_CHECK(part.sub[b].off + part.sub[b].size <= br.size, "internal: row chunk outside its value");
            KILN_CHECK(slot == ptr_slot.end() || g.value(v).role != ir::Role::weight, "op ", ir::op_name(node.op),
                       " reads block weight '", g.value(v).name, "' ", shape_str(g.value(v).shape),
                       " by row chunks of an activation over the binding limit; "
                       "it is selected on the device and cannot be split");
            br.offset += part.sub[b].off, br.size = part.sub[b].size;
        }
        return br;
    };
    auto bound_range = [&](uint32_t b, int v) {
        if (selected(v) >= 0) return bound_weight((size_t)kind, window, (size_t)selected(v));
        return value_range(b, v);
    };
    // A texel-buffer shader whose inputs no texel view can cover (offset alignment, element count) runs the
    // storage-buffer shader of the same tile: same bindings, same values. A "_ptr" linear reads W by address.
    const std::optional<vk::TexelForm> tex = vk::texel_form_of(d.shader);
    if (tex) {
        const bool w_by_address = slot != ptr_slot.end() && !by_offset;
        bool ok = true;
        for (uint32_t b = 0; b < tex->inputs; ++b)
            if (!(b == 1 && w_by_address))
                ok = ok && texel_view(bound_range(b, node.in[b]), g.value(node.in[b]).dtype, tex->rgba);
        if (!ok) d.shader.kernel = tex->storage_kernel;
    }
    const vk::Kernel& k = kernels.get(d.shader.name(), d.spec);
    if (k.texel_bindings) c.texel_dispatches++;
    KILN_CHECK(k.bindings == want, "shader ", d.shader.name(), " has ", k.bindings, " bindings, op ",
               ir::op_name(node.op), " needs ", want);
    DispatchRec rec{&k, VK_NULL_HANDLE, std::move(d), {}, {}};
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pool;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &k.set_layout;
    VK_CHECK(vkAllocateDescriptorSets(ctx.device(), &ai, &rec.set));
    std::vector<VkDescriptorBufferInfo> bi(k.bindings);
    std::vector<VkBufferView> views(k.bindings);
    std::vector<VkWriteDescriptorSet> w(k.bindings);
    for (uint32_t b = 0; b < k.bindings; ++b) {
        w[b] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        w[b].dstSet = rec.set;
        w[b].dstBinding = b;
        w[b].descriptorCount = 1;
        w[b].descriptorType = k.descriptor_type(b);
        w[b].pBufferInfo = &bi[b];
        if (by_offset && b == want - 1) {  // the selection slot
            bi[b] = {ptr_table.buffer, ptr_table.offset + table_off + slot->second + j * slot_size, slot_size};
            continue;
        }
        if (b == scratch_b) {  // the node's scratch (plan_activations), this part's bytes of it
            const vk::BufferRange& sr = scratch.at(n);
            KILN_CHECK(rec.d.scratch <= sr.size, "internal: split-K scratch larger than planned");
            bi[b] = {sr.buffer, sr.offset, rec.d.scratch};
            continue;
        }
        int v = b < node.in.size() ? node.in[b] : outs[b - node.in.size()];
        // An absent input reads the shared dummy, which nothing writes. An absent output (a linear_multi of
        // fewer parts than its shader has) gets a dummy of its own: its shader never stores there, but
        // declares the store, so a shared one would look like a write-after-write hazard to the
        // synchronization validation (and a read-after-write one to every absent input).
        vk::BufferRange br = v >= 0               ? value_range(b, v)
                             : b < node.in.size() ? dummy
                                                  : alloc.alloc(16, "absent output binding");
        bi[b] = {br.buffer, br.offset, br.size};
        if (slot != ptr_slot.end() && !by_offset && b < node.in.size() && (k.ptr_bindings >> b & 1))
            bi[b] = {ptr_table.buffer, ptr_table.offset + table_off + slot->second + j * slot_size, slot_size};
        if (selected(v) >= 0) {
            const vk::BufferRange& win = bound_weight((size_t)kind, window, (size_t)selected(v));
            bi[b] = {win.buffer, win.offset, win.size};
            // A weight-major range over a storage binding is planned only for texel readers; this fails only
            // where a texel view of another input could not be made and the storage-buffer shader was taken.
            KILN_CHECK(win.size <= max_binding || (k.texel_bindings >> b & 1), d.shader.name(),
                       " would bind the weight-major range of '", g.value(v).name, "' (", win.size,
                       " bytes) as a storage buffer, over maxStorageBufferRange (", max_binding,
                       "): its texel-buffer shader could not be used here; set KILN_BLOCK_LAYOUT=block");
        }
        if (k.texel_bindings >> b & 1) {  // checked above: the view exists
            KILN_CHECK(v >= 0, "internal: absent texel buffer input");
            views[b] = texel_view({bi[b].buffer, bi[b].offset, bi[b].range}, g.value(v).dtype, tex->rgba);
            KILN_CHECK(views[b], "internal: no texel view for binding ", b, " of ", d.shader.name());
            w[b].pBufferInfo = nullptr;
            w[b].pTexelBufferView = &views[b];
        }
        if (v >= 0) (b < node.in.size() ? rec.reads : rec.writes).push_back({br.buffer, br.offset, br.size});
    }
    vkUpdateDescriptorSets(ctx.device(), k.bindings, w.data(), 0, nullptr);
    // The cost model: what each binding covers in this dispatch, the traffic its tiling implies, and the node's FLOPs
    // in proportion to the rows this part writes (as its kernel executes them, on its units: traffic.h).
    const std::vector<double> bound = bound_bytes(g, node, part, outs);
    const size_t ob = node.in.size();  // the first output's binding
    rec.flops =
        ir::node_flops(g, node) * (part.sub[ob].size ? bound[ob] / (double)value_bytes(g.value(node.out)) : 1.0);
    rec.flops_executed = rec.flops * vk::products_per_term(g, node, rec.d);
    rec.matrix = vk::matrix_units(rec.d);
    if (!rec.d.scratch) {
        const vk::Traffic t = vk::traffic(g, node, rec.d, bound);
        rec.bytes = t.read + t.written;
        rec.rereads = t.rereads;
        dispatches.push_back(std::move(rec));
        return {(int)dispatches.size() - 1};
    }
    // Split-K: the partial pass writes the scratch; the reduce, the same shader at PHASE 1 with the same bindings
    // (its layout is the same SPIR-V's, so the same descriptor set), reads it and writes the outputs. Its FLOPs (S - 1
    // additions per output) are left out: it is bound by its bytes.
    const Span sc{bi[scratch_b].buffer, bi[scratch_b].offset, bi[scratch_b].range};
    DispatchRec red = rec;
    red.kernel = &kernels.get(red.d.shader.name(), red.d.then_spec);
    red.d.spec = red.d.then_spec;
    std::copy(red.d.then_groups, red.d.then_groups + 3, red.d.groups);
    red.reads.push_back(sc);
    red.flops = 0, red.flops_executed = 0;
    rec.writes = {sc};
    const vk::Traffic tp = vk::traffic_splitk(g, node, rec.d, bound, false);
    const vk::Traffic tr = vk::traffic_splitk(g, node, rec.d, bound, true);
    rec.bytes = tp.read + tp.written, rec.rereads = tp.rereads;
    red.bytes = tr.read + tr.written, red.rereads = tr.rereads;
    dispatches.push_back(std::move(rec));
    dispatches.push_back(std::move(red));
    return {(int)dispatches.size() - 2, (int)dispatches.size() - 1};
}

void Executor::Impl::build_dispatches(const std::vector<int>& active) {
    const auto& nodes = g.nodes();
    make_descriptor_pool(active);
    // The dispatches of node n, in order.
    auto make = [&](int n, int kind, const std::map<int, int>& swap, size_t window, VkDeviceSize table_off) {
        std::vector<int> ids;
        for (size_t j = 0; j < node_parts.at(n).size(); ++j)
            for (int id : make_dispatch(n, j, kind, swap, window, table_off)) ids.push_back(id);
        return ids;
    };

    block_dispatches.assign(blocks.size(), {});
    for (size_t ki = 0; ki < blocks.size(); ++ki) block_dispatches[ki].resize(variants(ki));
    std::vector<std::map<int, int>> swaps(blocks.size());
    for (size_t ki = 0; ki < blocks.size(); ++ki)
        if (ping_pong[ki])
            for (auto [x, y] : blocks[ki].chain) swaps[ki][r(x)] = r(y), swaps[ki][r(y)] = r(x);
    std::vector<bool> kind_emitted(blocks.size(), false);
    for (int n : active) {
        const ir::Node& node = nodes[(size_t)n];
        if (ir::op_kind(node.op) != ir::OpKind::compute) continue;
        int kind = kind_of(node);
        if (kind >= 0) {
            const size_t ki = (size_t)kind;
            for (size_t v = 0; v < variants(ki); ++v)
                for (int id : make(n, kind, v % parities(ki) ? swaps[ki] : std::map<int, int>{}, v / parities(ki),
                                   table_copy(ki, v)))
                    block_dispatches[ki][v].push_back(id);
            if (!kind_emitted[(size_t)kind]) program.push_back({Step::blocks, kind}), kind_emitted[(size_t)kind] = true;
        } else {
            for (int id : make(n, kind, {}, 0, 0)) program.push_back({Step::dispatch, id});
        }
    }
}

}  // namespace kiln::exec
