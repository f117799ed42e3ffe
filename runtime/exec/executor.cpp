#include "runtime/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"
#include "runtime/ir/fuse.h"

namespace kiln::exec {

const char* mode_name(Mode m) {
    switch (m) {
        case Mode::eager:
            return "eager";
        case Mode::full:
            return "full";
        case Mode::regional:
            return "regional";
    }
    return "?";
}

Mode parse_mode(const std::string& s) {
    if (s == "eager") return Mode::eager;
    if (s == "full") return Mode::full;
    if (s == "regional") return Mode::regional;
    KILN_FAIL("unknown mode '", s, "' (eager, full or regional)");
}

BlockWeights parse_block_weights(const std::string& s) {
    if (s == "auto") return BlockWeights::automatic;
    if (s == "offset") return BlockWeights::offset;
    if (s == "device") return BlockWeights::device;
    if (s == "copy") return BlockWeights::copy;
    KILN_FAIL("unknown block weights '", s, "' (auto, offset, device or copy)");
}

void Executor::Impl::record_dispatch(Recorder& rec, const DispatchRec& d) {
    rec.access(d.reads, d.writes);
    vkCmdBindPipeline(rec.cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.kernel->pipeline);
    vkCmdBindDescriptorSets(rec.cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.kernel->layout, 0, 1, &d.set, 0, nullptr);
    if (!d.d.push.empty())
        vkCmdPushConstants(rec.cb, d.kernel->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)d.d.push.size(),
                           d.d.push.data());
    vkCmdDispatch(rec.cb, d.d.groups[0], d.d.groups[1], d.d.groups[2]);
}

void Executor::Impl::record() {
    VkDevice dev = ctx.device();
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (!fence) VK_CHECK(vkCreateFence(dev, &fci, nullptr, &fence));
    if (ctx.info().timestamps && !queries) {
        VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
        qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        // [0, 1]: the whole run; then a (begin, end) pair around every replayed block instance.
        n_queries = 2;
        profile_blocks = profile;
        if (profile_blocks)
            for (auto& k : blocks) n_queries += 2 * (uint32_t)k.weights.size();
        qi.queryCount = n_queries;
        VK_CHECK(vkCreateQueryPool(dev, &qi, nullptr, &queries));
    }
    if (mode == Mode::eager) {  // recorded per op at run time
        c.dispatches_per_run = c.submissions_per_run = (int)dispatches.size();
        return;
    }
    if (primary || !batches.empty()) {  // record_again(): the device is idle
        free_run_commands();
        for (auto& s : secondaries)
            if (!s.empty()) vkFreeCommandBuffers(dev, ctx.pool(), (uint32_t)s.size(), s.data());
    }
    begin_split();
    // Command buffers are allocated first: record_ms counts recording only.
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
    auto t0 = Clock::now();
    // Secondary command buffers: per block kind and variant (parity, weight window), recorded once, executed
    // once per instance.
    std::vector<std::vector<int>> sec_barriers(blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
        sec_barriers[k].resize(variants(k));
        for (size_t v = 0; v < variants(k); ++v) {
            VkCommandBuffer cb = secondaries[k][v];
            VkCommandBufferInheritanceInfo inh{VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO};
            VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
            bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;
            bi.pInheritanceInfo = &inh;
            VK_CHECK(vkBeginCommandBuffer(cb, &bi));
            Recorder rec{cb};
            for (int d : block_dispatches[k][v]) record_dispatch(rec, dispatches[(size_t)d]);
            if (replay_array[k]) {  // the next replay follows with no primary command in between
                if (advance[k] >= 0) {
                    rec.barrier();  // every dispatch has read the live slots
                    record_dispatch(rec, dispatches[(size_t)advance[k]]);
                }
                rec.barrier();
            }
            VK_CHECK(vkEndCommandBuffer(cb));
            sec_barriers[k][v] = rec.barriers;
            c.command_buffers_recorded++;
        }
    }
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;  // the device loop keeps steps in flight
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
            continue;
        }
        size_t k = (size_t)step.index;
        const BlockKind& bk = blocks[k];
        // Per instance: carry the previous instance's outputs into the chain inputs (unless they ping-pong)
        // and select its weights (both only after the barrier that closed the previous replay), one
        // barrier, replay, one barrier.
        auto carry = [&] {
            if (ping_pong[k] || chain_free(k)) return;
            for (auto [x, y] : bk.chain) {
                Span sx = span(x), sy = span(y);
                VkBufferCopy cc{sy.off, sx.off, sx.size};
                vkCmdCopyBuffer(primary, sy.b, sx.b, 1, &cc);
                c.copies_per_run++;
                rec.writes.push_back(sx);
                rec.reads.push_back(sy);
            }
        };
        if (replay_array[k]) {  // counted on the device: one execute of every instance's recording
            record_replay_start(rec, k);
            rec.barrier();
            std::vector<VkCommandBuffer> all(bk.weights.size());
            for (size_t i = 0; i < all.size(); ++i) {
                const size_t v = variant(k, i);
                all[i] = secondaries[k][v];
                c.barriers_per_run += sec_barriers[k][v];
                c.dispatches_per_run += (int)block_dispatches[k][v].size() + (advance[k] >= 0);
            }
            vkCmdExecuteCommands(primary, (uint32_t)all.size(), all.data());
            c.executes_per_run++;
            rec.covered();  // the last replay's recording ends with a barrier: it orders what follows
            continue;
        }
        const bool cut = split && streams[k].slots > 0;
        for (size_t i = 0; i < bk.weights.size(); ++i) {
            const long cur = (long)i - (long)std::min(streams[k].resident, bk.weights.size());  // streamed index
            if (cut) {  // each replay of a streamed kind in a segment of its own (copy_queue.cpp)
                cut_segment(rec);
                if (cur >= 0) seg_of[k][(size_t)cur] = n_segments;
            }
            if (i > 0) carry();
            record_stream(rec, k, i, false);
            if (cut && cur >= 0) {  // this replay's segment waits for the copy of its instance
                seg_wait = copy_of[k][(size_t)cur];
                KILN_CHECK(seg_wait >= 0, "replay ", i, " of kind ", bk.kind, " has no ring copy recorded");
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
            rec.barrier();
            if (profile_blocks)
                vkCmdWriteTimestamp(primary, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, next_query++);
        }
        carry();
        rec.barrier();
    }
    if (queries) vkCmdWriteTimestamp(primary, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, 1);
    c.compute_batches_per_run = 1;
    c.copy_batches_per_run = 0;
    c.submissions_per_run = 1;
    if (split) {
        cut_segment(rec, true);
        primary = batches.front().cb;  // not null: a run is recorded (step_program.cpp checks)
        c.command_buffers_recorded += (int)(n_segments + n_copies) - 1;
        c.compute_batches_per_run = (int)n_segments;
        c.copy_batches_per_run = (int)n_copies;
        c.submissions_per_run = copy_queue == vk::CopyQueue::transfer ? 2 : 1;
    } else {
        VK_CHECK(vkEndCommandBuffer(primary));
    }
    c.command_buffers_recorded++;
    c.barriers_per_run += rec.barriers;
    c.record_ms = ms_since(t0);
}

namespace {
// The graph the executor plans: fused (ir::fuse) in full and regional mode unless ExecOptions::fuse is "0"; eager runs
// the graph as built (one dispatch per model op, as PyTorch eager). linear_multi is left out on CPU devices: on
// lavapipe a 3-part q/k/v dispatch at DiT-XL size showed no gain over the three linears (tests/ops/bench_ops.cpp
// "fusion payoff per fusion": equal within noise at light load, 8-12% slower under heavy load), while its
// pipeline adds compile time.
// fuse "all": every fusion, every mode, every device.
// Slices are read in place (ir::InputView) only by ops no larger than one binding: row chunks (row_split.cpp) do
// not split views.
// act_f16: then f16 storage of linear-to-linear activations (ir::store_f16), in every mode.
ir::Graph planned_graph(const ir::Graph& g, Mode mode, const vk::DeviceInfo& info, const ExecOptions& o,
                        uint64_t max_binding, ir::FuseStats& st, Counters& c) {
    const bool cpu_device = info.vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const std::string& e = o.fuse;
    KILN_CHECK(e == "0" || e == "1" || e == "all", "KILN_FUSE='", e, "' (0, 1 or all)");
    ir::Graph out = g;
    if (e != "0" && (mode != Mode::eager || e == "all")) {
        ir::FuseOptions opt;
        // linear_multi binds 13 storage buffers (x, 4 weights, 4 biases, 4 outputs): never on a device that has fewer.
        opt.linear_multi = (e == "all" || !cpu_device) && info.max_storage_buffers_per_stage >= 13;
        opt.view_max_bytes = max_binding;
        out = ir::fuse(g, &st, opt);
    }
    if (o.act_f16) c.f16_activations = ir::store_f16(out, &c.f16_activation_bytes_saved);
    return out;
}
}  // namespace

Executor::Executor(vk::Context& ctx, const ir::Graph& g, const WeightBytesFn& weights, Mode mode, bool profile,
                   BlockWeights block_weights, const Budget& budget) {
    ir::FuseStats fused;
    Counters early;
    const Settings& s = ctx.settings();
    const ExecOptions o = s.exec;
    uint64_t max_binding = ctx.info().max_storage_buffer_range;
    if (s.test.max_binding_range)  // testing: lower the binding limit
        max_binding = std::min<uint64_t>(max_binding, s.test.max_binding_range);
    impl_ = std::make_unique<Impl>(ctx, planned_graph(g, mode, ctx.info(), o, max_binding, fused, early), mode);
    impl_->c.f16_activations = early.f16_activations;
    impl_->c.f16_activation_bytes_saved = early.f16_activation_bytes_saved;
    impl_->c.nodes_fused = fused.nodes_removed;
    impl_->profile = profile;
    impl_->budget = budget;
    if (o.stream_in_place == 0)
        impl_->budget.in_place = false;
    else if (o.stream_in_place == 1)
        impl_->budget.force_in_place = true;
    impl_->select = block_weights == BlockWeights::automatic ? parse_block_weights(o.block_weights) : block_weights;
    impl_->max_binding = max_binding;
    impl_->c.binding_limit_bytes = impl_->max_binding;
    impl_->plan(weights);
}

Executor::~Executor() = default;

const Counters& Executor::counters() const { return impl_->c; }

double Executor::record_again() {
    Impl& m = *impl_;
    VK_CHECK(vkDeviceWaitIdle(m.ctx.device()));
    const Counters saved = m.c;
    m.record();
    const double ms = m.c.record_ms;
    m.c = saved;
    return ms;
}
Mode Executor::mode() const { return impl_->mode; }
double Executor::last_gpu_ms() const { return impl_->gpu_ms; }
double Executor::last_host_ms() const { return impl_->host_ms; }
const std::vector<std::pair<std::string, double>>& Executor::last_op_ms() const { return impl_->op_ms; }

void Executor::set_input(const std::string& name, const Tensor& t) {
    auto it = impl_->inputs.find(name);
    KILN_CHECK(it != impl_->inputs.end(), "the graph has no input named '", name, "'");
    const ir::Value& v = impl_->g.value(it->second);
    KILN_CHECK(t.shape == v.shape, "input '", name, "' has shape ", shape_str(t.shape), ", expected ",
               shape_str(v.shape));
    Tensor conv = t.dtype == v.dtype ? t : t.astype(v.dtype);
    impl_->alloc.upload(impl_->range[(size_t)impl_->r(it->second)], conv.bytes.data(), conv.nbytes());
}

namespace {
double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
}  // namespace

void Executor::run() {
    Impl& m = *impl_;
    VkDevice dev = m.ctx.device();
    // Host time: all of run() but the waits for the device (recording in eager mode, submissions).
    auto t_run = Clock::now();
    const double cpu0 = thread_cpu_ms();
    const double tick_ms = m.ctx.info().timestamp_period_ns * 1e-6;
    RunStats st;
    st.submissions = m.c.submissions_per_run;
    st.barriers = m.c.barriers_per_run;
    st.dispatches = m.c.dispatches_per_run;
    // Device timestamps of one submission: idle since the previous one (in this run or the last), busy time.
    auto note_submission = [&](uint64_t begin, uint64_t end, bool first) {
        if (m.last_end_ts) {
            const double gap = begin > m.last_end_ts ? (double)(begin - m.last_end_ts) * tick_ms : 0.0;
            if (first)
                st.idle_before_ms = gap;
            else
                st.idle_ms += gap;
        }
        st.gpu_ms += end > begin ? (double)(end - begin) * tick_ms : 0.0;
        m.last_end_ts = end;
    };
    double wait_ms = 0;
    auto submit = [&](VkCommandBuffer cb) {
        m.ctx.submit(cb, m.fence);
        auto tw = Clock::now();
        m.ctx.wait(m.fence);
        wait_ms += ms_since(tw);
    };
    if (m.mode == Mode::eager) {
        for (auto& f : m.imports) f.file->check();
        double total = 0;
        m.op_ms.clear();
        for (auto& d : m.dispatches) {
            VkCommandBuffer cb = m.ctx.begin_one_shot();
            if (m.queries) {
                vkCmdResetQueryPool(cb, m.queries, 0, 2);
                vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, m.queries, 0);
            }
            Recorder rec{cb};
            m.record_dispatch(rec, d);
            if (m.queries) vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, m.queries, 1);
            VK_CHECK(vkEndCommandBuffer(cb));
            submit(cb);
            vkFreeCommandBuffers(dev, m.ctx.pool(), 1, &cb);
            if (m.queries) {
                uint64_t ts[2];
                VK_CHECK(vkGetQueryPoolResults(dev, m.queries, 0, 2, sizeof(ts), ts, 8,
                                               VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
                double ms = (double)(ts[1] - ts[0]) * tick_ms;
                total += ms;
                m.op_ms.push_back({d.d.shader, ms});
                note_submission(ts[0], ts[1], &d == &m.dispatches.front());
            }
        }
        m.gpu_ms = total;
        m.host_ms = ms_since(t_run) - wait_ms;
        st.host_ms = m.host_ms;
        st.host_cpu_ms = thread_cpu_ms() - cpu0;
        m.stats = st;
        return;
    }
    for (auto& f : m.imports) f.file->check();  // a truncated model file would fault the device's reads
    submit_run(VK_NULL_HANDLE, VK_NULL_HANDLE, m.fence);
    {
        auto tw = Clock::now();
        m.ctx.wait(m.fence);
        wait_ms += ms_since(tw);
    }
    m.host_ms = ms_since(t_run) - wait_ms;
    st.host_ms = m.host_ms;
    st.host_cpu_ms = thread_cpu_ms() - cpu0;
    if (m.queries) {
        std::vector<uint64_t> ts(m.n_queries);
        VK_CHECK(vkGetQueryPoolResults(dev, m.queries, 0, m.n_queries, ts.size() * 8, ts.data(), 8,
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
        m.gpu_ms = (double)(ts[1] - ts[0]) * tick_ms;
        note_submission(ts[0], ts[1], true);
        m.block_ms.clear();
        for (uint32_t q = 2; q + 1 < m.n_queries; q += 2) m.block_ms.push_back((double)(ts[q + 1] - ts[q]) * tick_ms);
    }
    m.stats = st;
}

const RunStats& Executor::last_run() const { return impl_->stats; }

const std::vector<double>& Executor::last_block_ms() const { return impl_->block_ms; }

Tensor Executor::output(const std::string& name) const {
    auto it = impl_->outputs.find(name);
    KILN_CHECK(it != impl_->outputs.end(), "the graph has no output named '", name, "'");
    const ir::Value& v = impl_->g.value(it->second);
    Tensor t(DType::f32, v.shape);
    impl_->alloc.download(impl_->range[(size_t)impl_->r(it->second)], t.bytes.data(), t.nbytes());
    return t;
}

std::map<std::string, Tensor> run_graph(vk::Context& ctx, const ir::Graph& g, const WeightBytesFn& weights,
                                        const std::map<std::string, Tensor>& inputs, Mode mode) {
    Executor ex(ctx, g, weights, mode);
    for (auto& [name, t] : inputs) ex.set_input(name, t);
    ex.run();
    std::map<std::string, Tensor> out;
    for (auto& [name, v] : g.outputs()) out[name] = ex.output(name);
    return out;
}

}  // namespace kiln::exec
