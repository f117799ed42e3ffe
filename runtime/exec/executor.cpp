#include "runtime/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/exec/executor_impl.h"
#include "runtime/exec/linear_select.h"
#include "runtime/ir/fuse.h"
#include "runtime/ir/level_order.h"
#include "runtime/vulkan/attention_flash.h"

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

namespace {
// The graph the executor plans: fused (ir::fuse) in full and regional mode unless ExecOptions::fuse is "0"; eager runs
// the graph as built (one dispatch per model op, as PyTorch eager). linear_multi is left out on CPU devices: on
// lavapipe a 3-part q/k/v dispatch at DiT-XL size showed no gain over the three linears (tests/ops/bench_ops.cpp
// "fusion payoff per fusion": equal within noise at light load, 8-12% slower under heavy load), while its
// pipeline adds compile time.
// fuse "all": every fusion, every mode, every device.
// Slices are read in place (ir::InputView) only by ops no larger than one binding: row chunks (row_split.cpp) do
// not split views.
// act_f16: then f16 storage of the activations only linears and attention read (ir::store_f16), in every mode.
ir::Graph planned_graph(vk::Context& ctx, const ir::Graph& g, Mode mode, const ExecOptions& o, uint64_t max_binding,
                        ir::FuseStats& st, Counters& c) {
    const vk::DeviceInfo& info = ctx.info();
    const bool cpu_device = info.vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const std::string& e = o.fuse;
    KILN_CHECK(e == "0" || e == "1" || e == "all", "KILN_FUSE='", e, "' (0, 1 or all)");
    ir::Graph out = g;
    if (e != "0" && (mode != Mode::eager || e == "all")) {
        ir::FuseOptions opt;
        // linear_multi binds 13 storage buffers (x, 4 weights, 4 biases, 4 outputs): never on a device that has fewer.
        opt.linear_multi = (e == "all" || !cpu_device) && info.max_storage_buffers_per_stage >= 13;
        // linear_multi computes as reg (and tex) do: a linear the kernel table (or KILN_LINEAR) sends to another
        // kernel, a tiled or cooperative-matrix GEMM, stays its own dispatch and runs there.
        opt.multi_member = [&ctx](const ir::Graph& gg, const ir::Node& n) {
            const std::string k = linear_choice(ctx, gg, n);
            return k == "reg" || k == "tex";
        };
        opt.view_max_bytes = max_binding;
        out = ir::fuse(g, &st, opt);
    }
    if (o.act_f16) {
        // Attention reads f16 q, k, v with the flash kernels (exec::choose_attention_flash): on a GPU, where its head
        // size fits. Not on a CPU device, whose rows kernel (f32 only) is 7-17x faster than flash there.
        uint32_t smem = info.max_shared_memory;
        if (uint32_t t = ctx.settings().test.max_shared_memory) smem = std::min(smem, t);
        auto flash = [smem, cpu_device](const ir::Graph& gg, const ir::Node& n) {
            return !cpu_device && vk::attention_flash_unsupported(gg, n, smem).empty();
        };
        c.f16_activations = ir::store_f16(out, &c.f16_activation_bytes_saved, flash);
    }
    // Full and regional record by level (barriers shared by independent chains); eager keeps the graph's order.
    if (mode != Mode::eager && o.level_order) out = ir::order_by_level(out);
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
    impl_ = std::make_unique<Impl>(ctx, planned_graph(ctx, g, mode, o, max_binding, fused, early), mode);
    impl_->c.f16_activations = early.f16_activations;
    impl_->c.f16_activation_bytes_saved = early.f16_activation_bytes_saved;
    impl_->c.nodes_fused = fused.nodes_removed;
    impl_->c.gated_linears = fused.linear_gated;
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
const StepCost& Executor::cost() const { return impl_->cost; }

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
double thread_cpu_ms() { return platform::thread_cpu_ms(); }
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
    if (m.mode == Mode::eager && !m.eager_per_op) {  // recorded now, submitted once
        for (auto& f : m.imports) f.file->check();
        m.op_ms.clear();
        VkCommandBuffer cb = m.ctx.begin_one_shot();
        try {
            m.record_eager_run(cb);
            VK_CHECK(vkEndCommandBuffer(cb));
            submit(cb);
        } catch (...) {
            vkFreeCommandBuffers(dev, m.ctx.pool(), 1, &cb);
            throw;
        }
        vkFreeCommandBuffers(dev, m.ctx.pool(), 1, &cb);
        m.host_ms = ms_since(t_run) - wait_ms;
        st.host_ms = m.host_ms;
        st.host_cpu_ms = thread_cpu_ms() - cpu0;
        if (m.queries) {  // [0] the start, [i + 1] the end of dispatch i
            std::vector<uint64_t> ts(m.n_queries);
            VK_CHECK(vkGetQueryPoolResults(dev, m.queries, 0, m.n_queries, ts.size() * 8, ts.data(), 8,
                                           VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
            for (size_t i = 0; i < m.dispatches.size(); ++i)
                m.op_ms.push_back(
                    {m.dispatches[i].d.shader.name(), ts[i + 1] > ts[i] ? (double)(ts[i + 1] - ts[i]) * tick_ms : 0.0});
            m.gpu_ms = ts.back() > ts[0] ? (double)(ts.back() - ts[0]) * tick_ms : 0.0;
            note_submission(ts[0], ts.back(), true);
        }
        m.stats = st;
        return;
    }
    if (m.mode == Mode::eager) {  // KILN_EAGER_SUBMIT=op: one submission per dispatch, waited
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
                m.op_ms.push_back({d.d.shader.name(), ms});
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
    Tensor t(v.dtype, v.shape);  // f32, or f16 where the graph stores it so (Graph::set_storage)
    impl_->alloc.download(impl_->range[(size_t)impl_->r(it->second)], t.bytes.data(), t.nbytes());
    return t.dtype == DType::f32 ? t : t.astype(DType::f32);
}

vk::BufferRange Executor::device_range(const std::string& name, DType* dtype) const {
    auto it = impl_->inputs.find(name);
    int v = -1;
    if (it != impl_->inputs.end()) {
        v = it->second;
    } else if (auto o = impl_->outputs.find(name); o != impl_->outputs.end()) {
        v = o->second;
    }
    KILN_CHECK(v >= 0, "the graph has no input or output named '", name, "'");
    if (dtype) *dtype = impl_->g.value(v).dtype;
    return impl_->range[(size_t)impl_->r(v)];
}

VkCommandBuffer Executor::run_commands() const { return impl_->primary; }
vk::Allocator& Executor::allocator() { return impl_->alloc; }

VkCommandBuffer begin_reusable(vk::Context& ctx, VkCommandPool pool) {
    VkCommandBuffer cb = VK_NULL_HANDLE;
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VK_CHECK(vkAllocateCommandBuffers(ctx.device(), &ai, &cb));
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;
    VK_CHECK(vkBeginCommandBuffer(cb, &bi));
    return cb;
}

void full_barrier(VkCommandBuffer cb) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    // Uniform reads: the selection slots of "off" dispatches (written by vkCmdUpdateBuffer or select_advance).
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_UNIFORM_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(cb, st, st, 0, 1, &mb, 0, nullptr, 0, nullptr);
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
