// Ring copies in their own batches (vk::CopyQueue split and transfer): see Executor::Impl::Batch.
//
// One run of a streamed model on the compute queue alone records each ring copy right after the barrier that frees
// its slot, inside the one primary command buffer. A transfer queue cannot share that command buffer, and
// Vulkan orders work across queues only at batch boundaries, through semaphores. So the run becomes:
//   compute: segment 0 (everything before the first streamed kind), then one segment per replay of a streamed
//            kind (its selection, its replay, what follows up to the next replay);
//   copies:  one command buffer per ring copy.
// With two timeline semaphores, sem_seg (segments completed) and sem_copy (copies completed), and values that
// keep growing across runs:
//   copy x (streamed instance x of kind k, into slot x mod slots) waits for the segment of replay x - slots, the
//     last to read that slot (x < slots: the previous run's last segment);
//   the segment of replay x waits for copy x.
// Both wait only on earlier batches of the recorded order (copies are placed before the segment during which they
// were recorded), so the same batches run on one queue (split, testable on any device) or on two (transfer).
#include <array>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"

namespace kiln::exec {

void Executor::Impl::begin_split() {
    batching.queue = ctx.copy_queue();
    batching.vkqueue = ctx.copy_queue_handle();
    batching.pool = ctx.copy_pool();
    batching.split = false;
    if (batching.queue != vk::CopyQueue::in_step && mode != Mode::eager)
        for (auto& s : streams) batching.split = batching.split || s.slots > 0;
    c.copy_queue = batching.split ? vk::copy_queue_name(batching.queue) : "in_step";
    batching.batches.clear();
    batching.pending.clear();
    batching.seg_wait = -1;
    batching.n_segments = batching.n_copies = 0;
    batching.seg_of.assign(blocks.size(), {});
    batching.copy_of.assign(blocks.size(), {});
    for (size_t k = 0; k < blocks.size() && k < streams.size(); ++k) {
        const size_t n = blocks[k].weights.size() - std::min(blocks[k].weights.size(), streams[k].resident);
        batching.seg_of[k].assign(n, -1);
        batching.copy_of[k].assign(n, -1);
    }
    if (!batching.split || batching.sem_seg) return;
    VkSemaphoreTypeCreateInfo ti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    ti.initialValue = 0;
    VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &ti};
    VK_CHECK(vkCreateSemaphore(ctx.device(), &si, nullptr, &batching.sem_seg));
    VK_CHECK(vkCreateSemaphore(ctx.device(), &si, nullptr, &batching.sem_copy));
}

void Executor::Impl::cut_segment(Recorder& rec, bool last) {
    VK_CHECK(vkEndCommandBuffer(primary));
    for (auto& b : batching.pending) batching.batches.push_back(b);
    batching.pending.clear();
    batching.batches.push_back({primary, false, batching.seg_wait, false});
    batching.seg_wait = -1;
    batching.n_segments++;
    primary = VK_NULL_HANDLE;
    if (last) return;
    primary = begin_reusable(ctx, ctx.pool());
    rec.cb = primary;  // barriers in later segments still cover earlier ones: same queue, submission order
}

void Executor::Impl::record_copy_batch(size_t k, long x, const vk::BufferRange& dst) {
    const StreamKind& s = streams[k];
    VkCommandBuffer cb = begin_reusable(ctx, batching.pool);  // a caller's loop keeps runs in flight
    record_instance_copy(cb, k, s.resident + (size_t)x, dst);
    VK_CHECK(vkEndCommandBuffer(cb));
    Batch b{cb, true, -1, false};
    const long prev = x - s.slots;  // the streamed instance that last read this slot
    if (prev >= 0) {
        b.wait = batching.seg_of[k][(size_t)prev];
        KILN_CHECK(b.wait >= 0, "ring copy ", x, " of kind ", blocks[k].kind, " recorded before replay ", prev);
    } else {
        b.wait_prev_run = true;
    }
    batching.copy_of[k][(size_t)x] = batching.n_copies++;
    batching.pending.push_back(b);
}

void Executor::Impl::free_run_commands() {
    VkDevice d = ctx.device();
    if (!batching.split) {
        if (primary) vkFreeCommandBuffers(d, ctx.pool(), 1, &primary);
        primary = VK_NULL_HANDLE;
        return;
    }
    for (auto& b : batching.batches) vkFreeCommandBuffers(d, b.copy ? batching.pool : ctx.pool(), 1, &b.cb);
    batching.batches.clear();
    primary = VK_NULL_HANDLE;
}

void Executor::submit_run(VkCommandBuffer before, VkCommandBuffer after, VkFence fence) {
    Impl& m = *impl_;
    if (!m.batching.split) {
        VkCommandBuffer cbs[3];
        uint32_t n = 0;
        if (before) cbs[n++] = before;
        cbs[n++] = m.primary;
        if (after) cbs[n++] = after;
        m.ctx.submit(cbs, n, fence);
        return;
    }
    const uint64_t s0 = m.batching.seg_value, c0 = m.batching.copy_value;
    const size_t nb = m.batching.batches.size();
    std::vector<VkSubmitInfo> si(nb, VkSubmitInfo{VK_STRUCTURE_TYPE_SUBMIT_INFO});
    std::vector<VkTimelineSemaphoreSubmitInfo> ti(
        nb, VkTimelineSemaphoreSubmitInfo{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO});
    std::vector<uint64_t> wait_v(nb), signal_v(nb);
    std::vector<std::array<VkCommandBuffer, 3>> cbs(nb);
    const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    long seg = 0, cp = 0;
    for (size_t j = 0; j < nb; ++j) {
        const Impl::Batch& b = m.batching.batches[j];
        uint32_t n = 0;
        bool wait = false;
        if (b.copy) {
            cbs[j][n++] = b.cb;
            if (b.wait_prev_run) {
                wait = s0 > 0;
                wait_v[j] = s0;
            } else if (b.wait >= 0) {
                wait = true;
                wait_v[j] = s0 + (uint64_t)b.wait + 1;
            }
            signal_v[j] = c0 + (uint64_t)++cp;
        } else {
            if (seg == 0 && before) cbs[j][n++] = before;
            cbs[j][n++] = b.cb;
            if (seg == m.batching.n_segments - 1 && after) cbs[j][n++] = after;
            if (b.wait >= 0) {
                wait = true;
                wait_v[j] = c0 + (uint64_t)b.wait + 1;
            }
            signal_v[j] = s0 + (uint64_t)++seg;
        }
        si[j].commandBufferCount = n;
        si[j].pCommandBuffers = cbs[j].data();
        si[j].waitSemaphoreCount = wait ? 1 : 0;
        si[j].pWaitSemaphores = b.copy ? &m.batching.sem_seg : &m.batching.sem_copy;
        si[j].pWaitDstStageMask = &stage;
        si[j].signalSemaphoreCount = 1;
        si[j].pSignalSemaphores = b.copy ? &m.batching.sem_copy : &m.batching.sem_seg;
        ti[j].waitSemaphoreValueCount = wait ? 1 : 0;
        ti[j].pWaitSemaphoreValues = &wait_v[j];
        ti[j].signalSemaphoreValueCount = 1;
        ti[j].pSignalSemaphoreValues = &signal_v[j];
        si[j].pNext = &ti[j];
    }
    if (m.batching.queue == vk::CopyQueue::transfer) {
        std::vector<VkSubmitInfo> copies, segments;
        for (size_t j = 0; j < nb; ++j) (m.batching.batches[j].copy ? copies : segments).push_back(si[j]);
        m.ctx.submit(m.batching.vkqueue, copies.data(), (uint32_t)copies.size(), VK_NULL_HANDLE);
        m.ctx.submit(m.ctx.queue(), segments.data(), (uint32_t)segments.size(), fence);
    } else {
        m.ctx.submit(m.ctx.queue(), si.data(), (uint32_t)nb, fence);
    }
    m.batching.seg_value = s0 + (uint64_t)m.batching.n_segments;
    m.batching.copy_value = c0 + (uint64_t)m.batching.n_copies;
}

}  // namespace kiln::exec
