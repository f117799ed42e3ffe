// Recording (plan, record, replay: the middle one). Full mode: every dispatch into one primary command buffer.
// Regional mode: each block kind's template once per variant (parity, weight window) into secondary command
// buffers, which the primary executes once per block instance, selecting that instance's weights in between
// (block_weights.cpp) and streaming them where they do not fit (weight_stream.cpp). Eager mode records at run time
// (record_eager_run, from executor.cpp). Recording also counts how often one run executes each dispatch: the cost
// model (StepCost).
#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"

namespace kiln::exec {

void Executor::Impl::record_dispatch(Recorder& rec, const DispatchRec& d) {
    rec.access(d.reads, d.writes);
    vkCmdBindPipeline(rec.cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.kernel->pipeline);
    vkCmdBindDescriptorSets(rec.cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.kernel->layout, 0, 1, &d.set, 0, nullptr);
    if (!d.d.push.empty())
        vkCmdPushConstants(rec.cb, d.kernel->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)d.d.push.size(),
                           d.d.push.data());
    vkCmdDispatch(rec.cb, d.d.groups[0], d.d.groups[1], d.d.groups[2]);
}

void Executor::Impl::make_fence_and_queries() {
    VkDevice dev = ctx.device();
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (!fence) VK_CHECK(vkCreateFence(dev, &fci, nullptr, &fence));
    if (ctx.info().timestamps && !queries) {
        VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
        qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        // [0, 1]: the whole run; then a (begin, end) pair around every replayed block instance. Eager mode, one
        // submission per run: [0] its start, [i + 1] the end of dispatch i.
        n_queries = mode == Mode::eager && !eager_per_op ? (uint32_t)dispatches.size() + 1 : 2;
        profile_blocks = profile;
        if (profile_blocks)
            for (auto& k : blocks) n_queries += 2 * (uint32_t)k.weights.size();
        qi.queryCount = n_queries;
        VK_CHECK(vkCreateQueryPool(dev, &qi, nullptr, &queries));
    }
}

void Executor::Impl::allocate_command_buffers() {
    VkDevice dev = ctx.device();
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = ctx.pool();
    secondaries.resize(blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
        secondaries[k].resize(variants(k));
        ai.level = VK_COMMAND_BUFFER_LEVEL_SECONDARY;
        ai.commandBufferCount = (uint32_t)secondaries[k].size();
        VK_CHECK(vkAllocateCommandBuffers(dev, &ai, secondaries[k].data()));
    }
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VK_CHECK(vkAllocateCommandBuffers(dev, &ai, &primary));
}

std::vector<std::vector<int>> Executor::Impl::record_templates() {
    std::vector<std::vector<int>> barriers(blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
        barriers[k].resize(variants(k));
        for (size_t v = 0; v < variants(k); ++v) {
            VkCommandBuffer cb = secondaries[k][v];
            VkCommandBufferInheritanceInfo inh{VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO};
            VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
            bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;
            bi.pInheritanceInfo = &inh;
            VK_CHECK(vkBeginCommandBuffer(cb, &bi));
            Recorder rec{cb};
            // First, beside the block's first dispatches: the next instance's slots, into the copy this replay
            // does not read (double_table).
            if (replay_array[k] && advance[k] >= 0) record_dispatch(rec, dispatches[(size_t)advance_of(k, v)]);
            for (int d : block_dispatches[k][v]) record_dispatch(rec, dispatches[(size_t)d]);
            if (replay_array[k]) rec.barrier();  // the next replay follows with no primary command in between
            VK_CHECK(vkEndCommandBuffer(cb));
            barriers[k][v] = rec.barriers;
            c.command_buffers_recorded++;
        }
    }
    return barriers;
}

void Executor::Impl::record_carry(Recorder& rec, size_t k) {
    if (ping_pong[k] || chain_free(k)) return;
    for (auto [x, y] : blocks[k].chain) {
        Span sx = span(x), sy = span(y);
        VkBufferCopy cc{sy.off, sx.off, sx.size};
        vkCmdCopyBuffer(primary, sy.b, sx.b, 1, &cc);
        c.copies_per_run++;
        copy_bytes += 2.0 * (double)sx.size;
        rec.writes.push_back(sx);
        rec.reads.push_back(sy);
    }
}

void Executor::Impl::record_replays(Recorder& rec, size_t k, const std::vector<std::vector<int>>& sec_barriers,
                                    uint32_t& next_query) {
    const BlockKind& bk = blocks[k];
    if (replay_array[k]) {  // counted on the device: one execute of every instance's recording
        record_replay_start(rec, k);
        rec.barrier();
        std::vector<VkCommandBuffer> all(bk.weights.size());
        for (size_t i = 0; i < all.size(); ++i) {
            const size_t v = variant(k, i);
            all[i] = secondaries[k][v];
            c.barriers_per_run += sec_barriers[k][v];
            c.dispatches_per_run += (int)block_dispatches[k][v].size() + (advance[k] >= 0);
            for (int d : block_dispatches[k][v]) runs_of[(size_t)d]++;
            if (advance[k] >= 0) runs_of[(size_t)advance_of(k, v)]++;
        }
        vkCmdExecuteCommands(primary, (uint32_t)all.size(), all.data());
        c.executes_per_run++;
        rec.covered();  // the last replay's recording ends with a barrier: it orders what follows
        return;
    }
    // Per instance: carry the previous instance's outputs into the chain inputs (unless they ping-pong) and select
    // its weights (both only after the barrier that closed the previous replay), one barrier, replay, one barrier.
    const bool cut = batching.split && streams[k].slots > 0;
    for (size_t i = 0; i < bk.weights.size(); ++i) {
        const long cur = (long)i - (long)std::min(streams[k].resident, bk.weights.size());  // streamed index
        if (cut) {  // each replay of a streamed kind in a segment of its own (copy_queue.cpp)
            cut_segment(rec);
            if (cur >= 0) batching.seg_of[k][(size_t)cur] = batching.n_segments;
        }
        if (i > 0) record_carry(rec, k);
        record_stream(rec, k, i, false);
        if (cut && cur >= 0) {  // this replay's segment waits for the copy of its instance
            batching.seg_wait = batching.copy_of[k][(size_t)cur];
            KILN_CHECK(batching.seg_wait >= 0, "replay ", i, " of kind ", bk.kind, " has no ring copy recorded");
        }
        record_block_weights(rec, k, i);
        rec.barrier();
        record_stream(rec, k, i, true);  // prefetches overlap this replay
        if (profile_blocks) vkCmdWriteTimestamp(primary, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries, next_query++);
        const size_t v = variant(k, i);
        vkCmdExecuteCommands(primary, 1, &secondaries[k][v]);
        c.executes_per_run++;
        c.barriers_per_run += sec_barriers[k][v];
        c.dispatches_per_run += (int)block_dispatches[k][v].size();
        for (int d : block_dispatches[k][v]) runs_of[(size_t)d]++;
        rec.barrier();
        if (profile_blocks) vkCmdWriteTimestamp(primary, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, next_query++);
    }
    record_carry(rec, k);
    rec.barrier();
}

void Executor::Impl::record_eager_run(VkCommandBuffer cb) {
    if (queries) {
        vkCmdResetQueryPool(cb, queries, 0, n_queries);
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries, 0);
    }
    Recorder rec{cb};
    for (size_t i = 0; i < dispatches.size(); ++i) {
        record_dispatch(rec, dispatches[i]);
        if (queries) vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, (uint32_t)i + 1);
    }
}

void Executor::Impl::record_eager() {
    // What record_eager_run will record: every dispatch once, barriers where the hazard tracking puts them. One
    // submission per op (eager_per_op) needs none: each waits for the one before.
    Recorder rec{VK_NULL_HANDLE};
    for (size_t i = 0; i < dispatches.size(); ++i) {
        rec.access(dispatches[i].reads, dispatches[i].writes);
        runs_of[i] = 1;
    }
    c.dispatches_per_run = (int)dispatches.size();
    c.submissions_per_run = eager_per_op ? c.dispatches_per_run : 1;
    c.barriers_per_run = eager_per_op ? 0 : rec.barriers;
}

void Executor::Impl::finish_cost() {
    StepCost s;
    s.bytes_min = cost.bytes_min;  // the planned graph's (plan)
    int executed = 0;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const DispatchRec& d = dispatches[i];
        s.per_dispatch.push_back(
            {d.d.shader.name(), d.flops, d.bytes, runs_of[i], d.rereads, d.flops_executed, d.matrix});
        s.flops += d.flops * runs_of[i];
        s.flops_executed += d.flops_executed * runs_of[i];
        s.bytes += d.bytes * runs_of[i];
        executed += runs_of[i];
    }
    KILN_CHECK(executed == c.dispatches_per_run, "internal: ", executed, " dispatches counted for the cost model, ",
               c.dispatches_per_run, " recorded");
    // Buffer copies: chain carries and block weights copied into a bound window are read and written on the device;
    // streamed weights are written (their reads are host memory).
    const double copies = copy_bytes + 2.0 * (double)c.weight_copy_bytes_per_run + (double)c.streamed_bytes_per_run;
    if (c.copies_per_run) s.per_dispatch.push_back({"copy", 0, copies / c.copies_per_run, c.copies_per_run});
    s.bytes += copies;
    s.dispatches = c.dispatches_per_run;
    s.submits = c.submissions_per_run;
    s.barriers = c.barriers_per_run;
    cost = std::move(s);
}

void Executor::Impl::record() {
    eager_per_op = mode == Mode::eager && ctx.settings().exec.eager_submit == "op";
    make_fence_and_queries();
    // Per-run counters start again (record_again records once more).
    runs_of.assign(dispatches.size(), 0);
    copy_bytes = 0;
    c.dispatches_per_run = c.barriers_per_run = c.copies_per_run = c.table_updates_per_run = c.executes_per_run = 0;
    c.weight_copy_bytes_per_run = c.streamed_bytes_per_run = 0;
    if (mode == Mode::eager) {  // recorded at run time
        record_eager();
        finish_cost();
        return;
    }
    if (primary || !batching.batches.empty()) {  // record_again(): the device is idle
        free_run_commands();
        for (auto& s : secondaries)
            if (!s.empty()) vkFreeCommandBuffers(ctx.device(), ctx.pool(), (uint32_t)s.size(), s.data());
    }
    begin_split();
    allocate_command_buffers();  // first: record_ms counts recording only
    auto t0 = Clock::now();
    const std::vector<std::vector<int>> sec_barriers = record_templates();
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;  // a caller's loop keeps runs in flight
    VK_CHECK(vkBeginCommandBuffer(primary, &bi));
    if (queries) {
        vkCmdResetQueryPool(primary, queries, 0, n_queries);
        vkCmdWriteTimestamp(primary, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries, 0);
    }
    Recorder rec{primary};
    uint32_t next_query = 2;
    for (auto& step : program) {
        if (step.kind == Step::dispatch) {
            record_dispatch(rec, dispatches[(size_t)step.index]);
            c.dispatches_per_run++;
            runs_of[(size_t)step.index]++;
        } else {
            record_replays(rec, (size_t)step.index, sec_barriers, next_query);
        }
    }
    if (queries) vkCmdWriteTimestamp(primary, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, 1);
    c.compute_batches_per_run = 1;
    c.copy_batches_per_run = 0;
    c.submissions_per_run = 1;
    if (batching.split) {
        cut_segment(rec, true);
        primary = batching.batches.front().cb;  // not null: a run is recorded (Executor::run_commands)
        c.command_buffers_recorded += (int)(batching.n_segments + batching.n_copies) - 1;
        c.compute_batches_per_run = (int)batching.n_segments;
        c.copy_batches_per_run = (int)batching.n_copies;
        c.submissions_per_run = batching.queue == vk::CopyQueue::transfer ? 2 : 1;
    } else {
        VK_CHECK(vkEndCommandBuffer(primary));
    }
    c.command_buffers_recorded++;
    c.barriers_per_run += rec.barriers;
    c.record_ms = ms_since(t0);
    finish_cost();
}

}  // namespace kiln::exec
