// Block weights under a device-memory budget: which instances stay resident, the host copies of the others, the
// ring slots they stream through, and the copies recorded into the step (see weight_stream.h).
#include "runtime/exec/weight_stream.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"

namespace kiln::exec {

uint64_t parse_bytes(const std::string& s) {
    // from_chars: the C locale's decimal point whatever locale the app set (std::stod follows the app's).
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc()) KILN_FAIL("invalid byte count '", s, "' (e.g. 4G, 512M, 1073741824)");
    const size_t used = (size_t)(end - s.data());
    std::string suffix = s.substr(used);
    if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
    if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();  // GiB, MiB
    // K, M, G, T: powers of 1024.
    const std::string units = "KMGT";
    const size_t u = suffix.size() == 1 ? units.find((char)std::toupper((unsigned char)suffix[0])) : std::string::npos;
    const double mul = suffix.empty() ? 1.0 : u == std::string::npos ? 0.0 : std::pow(1024.0, (double)(u + 1));
    KILN_CHECK(suffix.size() <= 1 && mul > 0 && v > 0, "invalid byte count '", s, "' (e.g. 4G, 512M, 1073741824)");
    return (uint64_t)(v * mul);
}

}  // namespace kiln::exec

namespace kiln::exec::detail {

namespace {
std::string mib(uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", (double)b / (1 << 20));
    return buf;
}
}  // namespace

StreamPlan plan_stream(uint64_t budget, uint64_t fixed, const std::vector<KindNeed>& kinds, int slots,
                       bool in_place_ok) {
    const size_t K = slots > 0 ? (size_t)slots : 2;
    StreamPlan p;
    p.budget = budget;
    uint64_t two_slots = 0, need = fixed, weights = 0;
    for (auto& k : kinds) {
        if (k.instances) two_slots += 2 * k.stride;
        need += k.instances * k.stride + (k.device_select ? 0 : k.stride);
        weights += k.instances * k.stride;
    }
    p.minimum = fixed + two_slots;
    if (budget && budget < p.minimum) {
        p.warning = "budget " + mib(budget) + " is below the minimum working set " + mib(p.minimum) +
                    " (weights outside blocks and activations " + mib(fixed) + " + two block slots " + mib(two_slots) +
                    "); using " + mib(p.minimum);
        p.budget = p.minimum;
    }
    const bool all = !budget || need <= p.budget;
    for (auto& k : kinds) {
        p.resident.push_back(k.instances);
        p.slots.push_back(0);
        p.in_place.push_back(false);
    }
    if (all || !weights) return p;
    // Streaming: every kind gets its ring (or its copy window); the rest of the budget keeps the same fraction of
    // each kind's instances resident, the first ones (they run first, so the ring prefetches behind them).
    uint64_t overhead = 0;
    for (auto& k : kinds) {
        if (!k.device_select)
            overhead += k.stride;
        else if (!in_place_ok || !k.in_place_ok)
            overhead += std::min(K, k.instances) * k.stride;
    }
    uint64_t avail = p.budget > fixed + overhead ? p.budget - fixed - overhead : 0;
    const double frac = (double)avail / (double)weights;
    uint64_t left = avail;
    for (size_t i = 0; i < kinds.size(); ++i) {
        p.resident[i] = std::min(kinds[i].instances, (size_t)(frac * (double)kinds[i].instances));
        left -= p.resident[i] * kinds[i].stride;
    }
    for (size_t i = 0; i < kinds.size(); ++i)
        while (p.resident[i] < kinds[i].instances && kinds[i].stride <= left) p.resident[i]++, left -= kinds[i].stride;
    for (size_t i = 0; i < kinds.size(); ++i) {
        size_t streamed = kinds[i].instances - p.resident[i];
        if (!streamed || !kinds[i].device_select) continue;
        p.in_place[i] = in_place_ok && kinds[i].in_place_ok;
        if (!p.in_place[i]) p.slots[i] = (int)std::min(K, streamed);
    }
    return p;
}

}  // namespace kiln::exec::detail

namespace kiln::exec {

namespace {
constexpr uint64_t kPtrAlign = 16;  // buffer_reference_align of the _ptr shaders' weight references (common.glsl)
}  // namespace

vk::BufferRange Executor::Impl::import_weight(const WeightBytesFn& weights, int v) {
    const auto& info = ctx.info();
    if (!weights.view || !budget.in_place || !info.host_import || !info.host_import_align) return {};
    HostBytes h = weights.view(g.value(v));
    if (!h.file) return {};
    auto it = std::find_if(imports.begin(), imports.end(), [&](auto& f) { return f.file == h.file; });
    if (it == imports.end()) {
        h.file->check();
        imports.push_back({h.file, {}, false});
        it = imports.end() - 1;
    }
    if (it->failed) return {};
    // The file is imported in chunks of 256 MiB that overlap by 128 MiB, so a weight up to 128 MiB lies whole in
    // one; larger ones are copied (they cannot be bound on most devices either).
    constexpr uint64_t kChunk = 256ull << 20, kOverlap = 128ull << 20;
    const uint64_t n = value_bytes(g.value(v)), start = h.offset / kChunk * kChunk;
    const uint64_t a = std::max<uint64_t>(info.host_import_align, 4096);
    const uint64_t mapped = (h.file->size() + 4095) / 4096 * 4096;  // the mapping covers whole pages
    const uint64_t len = std::min((kChunk + kOverlap), (h.file->size() - start + a - 1) / a * a);
    if (h.offset + n > start + len || start + len > mapped) return {};
    auto& chunk = it->chunks[start];
    if (!chunk) {
        try {
            chunk = std::make_unique<vk::HostImport>(ctx, h.file->data() + start, len);
        } catch (const Error&) {  // the driver refused (e.g. read-only pages): upload as usual
            it->chunks.erase(start);
            it->failed = true;
            return {};
        }
    }
    return chunk->range(h.offset - start, n);
}

void Executor::Impl::plan_stream_budget(const std::vector<KindNeed>& needs_in, const WeightBytesFn& weights) {
    // Kinds whose every weight lies in the mmapped model file: the file is their host copy. On unified memory the
    // device reads it in place, so they cost no device memory at all.
    const bool unified = ctx.info().unified_memory;
    streams.assign(needs_in.size(), {});
    std::vector<KindNeed> needs = needs_in;
    uint64_t b = budget.bytes ? budget.bytes : ctx.vram_budget();
    // When every block fits the budget, a kind whose replays would copy from the file (no device selection
    // for streamed kinds: a CPU device, see choose_selection) is uploaded instead, so that it is selected by
    // offset with no copy per replay; KILN_STREAM_IN_PLACE=1 reads it in place all the same.
    bool fits = true;
    {
        StreamPlan p0 = plan_stream(mode == Mode::regional ? b : 0, alloc.used(), needs_in, budget.slots, false);
        for (size_t k = 0; k < needs_in.size(); ++k) fits = fits && p0.resident[k] == needs_in[k].instances;
    }
    for (size_t k = 0; k < blocks.size(); ++k) {
        if (fits && !needs_in[k].device_select && !budget.force_in_place) continue;
        std::vector<std::vector<vk::BufferRange>> file;
        bool misaligned = false;
        for (auto& inst : blocks[k].weights) {
            file.emplace_back();
            for (int v : inst) {
                vk::BufferRange r = import_weight(weights, v);
                if (!r.buffer) break;
                misaligned = misaligned || r.offset % kPtrAlign;
                file.back().push_back(r);
            }
            if (file.back().size() != inst.size()) break;
        }
        if (file.size() != blocks[k].weights.size() || file.back().size() != blocks[k].tmpl_weights.size()) continue;
        streams[k].file = std::move(file);
        // Read in place through addresses (unified memory, device selection), a weight must start on the 16 bytes
        // the _ptr shaders' references assume. Kiln files align every tensor to 32; safetensors files often only
        // to 8: such a kind streams from the file through ring slots instead (copies need no alignment).
        if (unified && needs_in[k].device_select && misaligned)
            needs[k].in_place_ok = false;
        else if (unified)
            needs[k].instances = 0;
    }
    // Unified memory: the device reads host-visible memory as fast as its own, so streamed instances are read
    // where they lie (only with device selection; copy selection copies into its window either way).
    const bool in_place_ok = budget.in_place && unified;
    StreamPlan p = plan_stream(mode == Mode::regional ? b : 0, alloc.used(), needs, budget.slots, in_place_ok);
    if (mode != Mode::regional && alloc.used() > b)
        std::fprintf(stderr, "kiln: warning: %s mode keeps every weight resident: %s over the budget of %s\n",
                     mode_name(mode), mib(alloc.used()).c_str(), mib(b).c_str());
    if (!p.warning.empty()) std::fprintf(stderr, "kiln: warning: %s\n", p.warning.c_str());
    c.budget_bytes = p.budget;
    c.budget_minimum_bytes = p.minimum;
    for (size_t k = 0; k < needs.size(); ++k) {
        StreamKind& s = streams[k];
        const size_t n = needs_in[k].instances;
        const bool file_in_place = !s.file.empty() && unified && needs[k].in_place_ok;
        s.resident = file_in_place ? 0 : p.resident[k];
        s.slots = file_in_place ? 0 : p.slots[k];
        s.in_place = file_in_place ? needs[k].device_select : p.in_place[k];
        c.blocks_resident += (int)s.resident;
        c.blocks_streamed += (int)(n - s.resident);
        c.ring_slots += s.slots;
        c.block_weight_bytes += n * needs[k].stride;
    }
    if (c.blocks_streamed)
        c.stream_note =
            std::to_string(c.blocks_streamed) + " of " + std::to_string(c.blocks_streamed + c.blocks_resident) +
            " blocks from host memory (" +
            (c.ring_slots ? std::to_string(c.ring_slots) + " ring slots" : std::string("read in place or copied")) +
            "), budget " + mib(p.budget);
}

void Executor::Impl::place_block_instances(size_t k, const WeightBytesFn& weights) {
    const BlockKind& bk = blocks[k];
    StreamKind& s = streams[k];
    const VkDeviceSize stride = block_stride[k];
    const std::string what = "weights of block kind " + bk.kind;
    std::vector<vk::BufferRange> inst;
    for (size_t i = 0; i < bk.weights.size(); ++i) {
        const bool resident = i < s.resident;
        if (!resident && !s.file.empty()) {  // the file is the host copy
            for (int v : bk.weights[i])
                c.in_place_bytes += value_bytes(g.value(v)), c.weight_bytes += value_bytes(g.value(v));
            continue;
        }
        vk::BufferRange r =
            resident ? alloc.alloc(stride, what.c_str(), false) : host_alloc.alloc(stride, what.c_str(), false);
        for (size_t j = 0; j < bk.tmpl_weights.size(); ++j) fill_weight(weights, bk.weights[i][j], r, block_rel[k][j]);
        (resident ? inst : s.host).push_back(r);
        if (!resident) c.host_weight_bytes += stride;
    }
    block_arena.push_back(std::move(inst));
    for (int j = 0; j < s.slots; ++j)
        s.ring.push_back(alloc.alloc(stride, ("ring slot of block kind " + bk.kind).c_str(), false));
}

vk::BufferRange Executor::Impl::source_weight(size_t k, size_t i, size_t j) const {
    const StreamKind& s = streams[k];
    if (!s.file.empty()) return s.file[i][j];
    const vk::BufferRange& h = s.host[i - s.resident];
    return {h.buffer, h.offset + block_rel[k][j], value_bytes(g.value(blocks[k].tmpl_weights[j])), nullptr};
}

VkDeviceAddress Executor::Impl::weight_address(size_t k, size_t i, size_t j) const {
    const StreamKind& s = streams[k];
    if (i < s.resident) return alloc.address(block_arena[k][i]) + block_rel[k][j];
    if (s.slots) return alloc.address(s.ring[(i - s.resident) % (size_t)s.slots]) + block_rel[k][j];
    return alloc.address(source_weight(k, i, j));  // read in place (any buffer with device addresses)
}

vk::BufferRange Executor::Impl::template_weight(size_t k, size_t j, const vk::BufferRange& window) const {
    const StreamKind& s = streams[k];
    const VkDeviceSize n = value_bytes(g.value(blocks[k].tmpl_weights[j]));
    if (window.buffer)
        return {window.buffer, window.offset + block_rel[k][j], n,
                window.mapped ? window.mapped + block_rel[k][j] : nullptr};
    // Device selection: the template's weights are instance 0's wherever it lies (for barrier tracking only;
    // the dispatches that read them take their addresses from the table).
    if (s.resident) return {block_arena[k][0].buffer, block_arena[k][0].offset + block_rel[k][j], n, nullptr};
    if (s.slots) return {s.ring[0].buffer, s.ring[0].offset + block_rel[k][j], n, nullptr};
    return source_weight(k, 0, j);
}

void Executor::Impl::record_instance_copy(VkCommandBuffer cb, size_t k, size_t i, const vk::BufferRange& dst) {
    const StreamKind& s = streams[k];
    std::vector<VkBufferCopy> regions;
    VkBuffer src = VK_NULL_HANDLE;
    if (i < s.resident || s.file.empty()) {  // one contiguous range
        const vk::BufferRange& r = i < s.resident ? block_arena[k][i] : s.host[i - s.resident];
        src = r.buffer;
        regions.push_back({r.offset, dst.offset, block_stride[k]});
    } else {  // each weight from its place in the file (the chunks of one file may differ: grouped per buffer)
        for (size_t j = 0; j < s.file[i].size(); ++j) {
            const vk::BufferRange& r = s.file[i][j];
            if (src && r.buffer != src) {
                vkCmdCopyBuffer(cb, src, dst.buffer, (uint32_t)regions.size(), regions.data());
                regions.clear();
            }
            src = r.buffer;
            regions.push_back({r.offset, dst.offset + block_rel[k][j], r.size});
        }
    }
    vkCmdCopyBuffer(cb, src, dst.buffer, (uint32_t)regions.size(), regions.data());
    if (i >= s.resident) c.streamed_bytes_per_run += block_stride[k];
}

// Ring copies around replay i of kind k. Before the barrier that opens replay i: its own instance, if no earlier
// prefetch covered it. After it: every streamed instance whose slot is free (its previous user ran before the
// barrier), up to slots - 1 ahead; these overlap replay i, which reads another slot.
void Executor::Impl::record_stream(Recorder& rec, size_t k, size_t i, bool after_barrier) {
    StreamKind& s = streams[k];
    if (!s.slots) return;
    const long n = (long)(blocks[k].weights.size() - s.resident);
    if (i == 0 && !after_barrier) s.issued = -1;  // a new run (the call after the barrier must not copy 0 again)
    const long cur = (long)i - (long)s.resident;  // this replay's streamed index (< 0: resident)
    const long last = after_barrier ? std::min(cur + s.slots - 1, n - 1) : cur;
    for (long x = s.issued + 1; x <= last; ++x) {
        const vk::BufferRange& dst = s.ring[(size_t)x % (size_t)s.slots];
        if (batching.split)
            record_copy_batch(k, x, dst);
        else
            record_instance_copy(primary, k, s.resident + (size_t)x, dst);
        rec.writes.push_back({dst.buffer, dst.offset, block_stride[k]});
        c.copies_per_run++;
        s.issued = x;
    }
}

}  // namespace kiln::exec
