#include "models/loop/step_program.h"

#include <chrono>
#include <cstring>
#include <deque>

#include "runtime/core/error.h"
#include "runtime/exec/commands.h"
#include "runtime/vulkan/lower.h"
#include "runtime/vulkan/pipeline.h"

namespace kiln::models {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Bound {
    const vk::Kernel* kernel = nullptr;
    VkDescriptorSet set = VK_NULL_HANDLE;
    vk::Dispatch d;
};
}  // namespace

struct StepProgram::Impl {
    vk::Context& ctx;
    exec::Executor& ex;
    StepLoopSpec spec;
    uint32_t n_steps = 0, n = 0, batch = 0;
    std::unique_ptr<vk::Allocator> own;  // StepLoopSpec::own_memory: a block of its own, freed with the program
    vk::Allocator& alloc;  // else the executor's: a few latent-sized ranges in its blocks, not a block of our own
    vk::Kernels kernels;
    vk::BufferRange table, state, x, hist, noise, z, hidden, timestep, out;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    Bound prepare, step, advance, finalize;
    VkCommandBuffer pre = VK_NULL_HANDLE, post = VK_NULL_HANDLE;
    std::vector<VkFence> fences;
    std::deque<std::pair<size_t, int>> pending;  // (fence, step) in submission order
    StepLoopStats stats;
    double plan_ms = 0;

    Impl(vk::Context& c, exec::Executor& e, bool own_memory)
        : ctx(c),
          ex(e),
          own(own_memory ? std::make_unique<vk::Allocator>(c) : nullptr),
          alloc(own ? *own : e.allocator()),
          kernels(c) {}
    ~Impl() {
        VkDevice d = ctx.device();
        if (!pending.empty()) {
            std::vector<VkFence> f;
            for (auto& [i, s] : pending) f.push_back(fences[i]);
            vkWaitForFences(d, (uint32_t)f.size(), f.data(), VK_TRUE, UINT64_MAX);
        }
        for (VkFence f : fences) vkDestroyFence(d, f, nullptr);
        VkCommandBuffer cbs[2] = {pre, post};
        for (VkCommandBuffer cb : cbs)
            if (cb) vkFreeCommandBuffers(d, ctx.pool(), 1, &cb);
        if (pool) vkDestroyDescriptorPool(d, pool, nullptr);
    }

    Bound bind(const vk::ShaderKey& shader, const std::vector<vk::BufferRange>& bufs, const params::LoopParams* p,
               uint64_t threads) {
        Bound b;
        b.kernel = &kernels.get(shader.name());
        KILN_CHECK(b.kernel->bindings == bufs.size(), "internal: shader ", shader.name(), " has ", b.kernel->bindings,
                   " bindings, ", bufs.size(), " given");
        VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
        ai.descriptorPool = pool;
        ai.descriptorSetCount = 1;
        ai.pSetLayouts = &b.kernel->set_layout;
        VK_CHECK(vkAllocateDescriptorSets(ctx.device(), &ai, &b.set));
        std::vector<VkDescriptorBufferInfo> bi(bufs.size());
        std::vector<VkWriteDescriptorSet> w(bufs.size());
        for (size_t i = 0; i < bufs.size(); ++i) {
            bi[i] = {bufs[i].buffer, bufs[i].offset, bufs[i].size};
            w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
            w[i].dstSet = b.set;
            w[i].dstBinding = (uint32_t)i;
            w[i].descriptorCount = 1;
            w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            w[i].pBufferInfo = &bi[i];
        }
        vkUpdateDescriptorSets(ctx.device(), (uint32_t)w.size(), w.data(), 0, nullptr);
        b.d.shader = shader;
        if (p) b.d.set_push(*p);
        vk::groups_1d(b.d, threads, shader.op == "loop_advance" ? 1 : 256);
        return b;
    }

    void record(VkCommandBuffer cb, const Bound& b) {
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, b.kernel->pipeline);
        vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, b.kernel->layout, 0, 1, &b.set, 0, nullptr);
        if (!b.d.push.empty())
            vkCmdPushConstants(cb, b.kernel->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)b.d.push.size(),
                               b.d.push.data());
        vkCmdDispatch(cb, b.d.groups[0], b.d.groups[1], b.d.groups[2]);
    }

    // Every earlier command (this step's, the previous step's, the transformer's) before every later one.
    static void barrier(VkCommandBuffer cb) { exec::full_barrier(cb); }

    VkCommandBuffer begin() { return exec::begin_reusable(ctx, ctx.pool()); }

    void wait_oldest(const std::function<void(int, int)>& progress, const std::function<void(int)>& observe) {
        auto [f, s] = pending.front();
        auto tw = Clock::now();
        ctx.wait(fences[f]);  // and resets it
        stats.wait_ms += ms_since(tw);
        pending.pop_front();
        if (observe) observe(s);
        if (progress) progress(s + 1, (int)n_steps);
    }
};

bool StepProgram::supported(const exec::Executor& ex, const StepLoopSpec& spec, std::string* why) {
    auto fail = [&](const std::string& w) {
        if (why) *why = w;
        return false;
    };
    if (!ex.run_commands()) return fail("eager mode records no run");
    const uint64_t batch = (uint64_t)spec.rows * (spec.cfg ? 2 : 1);
    const uint64_t sizes[3] = {batch * spec.row_lat * 4, batch * 4, batch * spec.row_out * 4};
    const std::string names[3] = {spec.hidden, spec.timestep, spec.output};
    for (int i = 0; i < 3; ++i) {
        DType t{};
        vk::BufferRange r;
        try {
            r = ex.device_range(names[i], &t);
        } catch (const Error& e) {
            return fail(e.what());
        }
        if (t != DType::f32) return fail("'" + names[i] + "' is not f32");
        if (r.size != sizes[i])
            return fail("'" + names[i] + "' has " + std::to_string(r.size) + " bytes, expected " +
                        std::to_string(sizes[i]));
    }
    if (spec.row_out < spec.row_lat) return fail("the output row is shorter than the latent row");
    return true;
}

StepProgram::StepProgram(vk::Context& ctx, exec::Executor& ex, const StepLoopSpec& spec,
                         const std::vector<params::LoopStep>& steps, const std::vector<float>& noise)
    : impl_(std::make_unique<Impl>(ctx, ex, spec.own_memory)) {
    Impl& m = *impl_;
    auto t0 = Clock::now();
    std::string why;
    KILN_CHECK(supported(ex, spec, &why), "device loop: ", why);
    KILN_CHECK(!steps.empty(), "device loop: no steps");
    KILN_CHECK(spec.in_flight >= 1, "device loop: in_flight must be >= 1");
    m.spec = spec;
    m.n_steps = (uint32_t)steps.size();
    m.n = (uint32_t)spec.rows * spec.row_lat;
    m.batch = (uint32_t)spec.rows * (spec.cfg ? 2 : 1);
    m.hidden = ex.device_range(spec.hidden);
    m.timestep = ex.device_range(spec.timestep);
    m.out = ex.device_range(spec.output);
    bool keep = false;
    for (auto& s : steps) keep |= s.keep_x0 != 0 || s.history_used > 0;
    bool noisy = false;
    for (auto& s : steps) noisy |= s.prev_noise != 0;
    KILN_CHECK(!noisy || noise.size() == steps.size() * m.n, "device loop: the steps draw noise: ", steps.size() * m.n,
               " floats needed, ", noise.size(), " given");
    const VkDeviceSize sizes[] = {steps.size() * sizeof(params::LoopStep),
                                  16,
                                  (VkDeviceSize)m.n * 4,
                                  (VkDeviceSize)m.n * 4,
                                  keep ? (VkDeviceSize)m.n * 12 : 16,
                                  noisy ? (VkDeviceSize)noise.size() * 4 : 16};
    for (VkDeviceSize s : sizes) m.alloc.reserve(m.alloc.footprint(s));  // one block of exactly these, if any
    m.table = m.alloc.alloc(sizes[0], "device loop: step table");
    m.alloc.upload(m.table, steps.data(), sizes[0]);
    m.state = m.alloc.alloc(sizes[1], "device loop: step counter");
    m.x = m.alloc.alloc(sizes[2], "device loop: latents");
    m.z = m.alloc.alloc(sizes[3], "device loop: final latents");
    m.hist = m.alloc.alloc(sizes[4], "device loop: multistep history");
    m.noise = m.alloc.alloc(sizes[5], "device loop: step noise");
    if (noisy) m.alloc.upload(m.noise, noise.data(), (VkDeviceSize)noise.size() * 4);

    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 14};
    VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = 4;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &ps;
    VK_CHECK(vkCreateDescriptorPool(ctx.device(), &pi, nullptr, &m.pool));
    params::LoopParams p{};
    p.n = m.n, p.row_lat = spec.row_lat, p.row_out = spec.row_out, p.rows = (uint32_t)spec.rows;
    p.batch = m.batch, p.cfg = spec.cfg, p.cond_first = spec.cond_first, p.scale_in_place = spec.scale_in_place;
    p.guidance = spec.guidance;
    using D = StepLoopSpec::Division;
    D dv = spec.division;
    if (dv == D::automatic) dv = ctx.info().int64 ? D::i64 : ctx.info().fp64 ? D::f64 : D::f32;
    KILN_CHECK(dv != D::i64 || ctx.info().int64, "device loop: integer division needs shaderInt64");
    KILN_CHECK(dv != D::f64 || ctx.info().fp64, "device loop: double division needs shaderFloat64");
    const std::string div = dv == D::i64 ? "i64" : dv == D::f64 ? "f64" : "f32";
    m.prepare = m.bind(vk::ShaderKey("loop_prepare", "", div), {m.table, m.state, m.x, m.hidden, m.timestep}, &p,
                       std::max(m.n, m.batch));
    m.step = m.bind(vk::ShaderKey("loop_step"), {m.table, m.state, m.out, m.x, m.hist, m.noise}, &p, m.n);
    m.advance = m.bind(vk::ShaderKey("loop_advance"), {m.state}, nullptr, 1);
    m.finalize = m.bind(vk::ShaderKey("loop_finalize", "", div), {m.x, m.z}, &p, m.n);

    m.pre = m.begin();
    Impl::barrier(m.pre);
    m.record(m.pre, m.prepare);
    Impl::barrier(m.pre);
    VK_CHECK(vkEndCommandBuffer(m.pre));
    m.post = m.begin();
    Impl::barrier(m.post);
    m.record(m.post, m.step);
    Impl::barrier(m.post);
    m.record(m.post, m.advance);
    Impl::barrier(m.post);
    VK_CHECK(vkEndCommandBuffer(m.post));
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    m.fences.resize((size_t)spec.in_flight);
    for (auto& f : m.fences) VK_CHECK(vkCreateFence(ctx.device(), &fci, nullptr, &f));
    m.plan_ms = m.stats.plan_ms = ms_since(t0);
}

StepProgram::~StepProgram() = default;

const StepLoopStats& StepProgram::stats() const { return impl_->stats; }

void StepProgram::run(const std::vector<float>& x, const std::function<void(int, int)>& progress,
                      const std::function<void(int)>& observe) {
    Impl& m = *impl_;
    KILN_CHECK(x.size() == m.n, "device loop: latents have ", x.size(), " floats, expected ", m.n);
    KILN_CHECK(m.pending.empty(), "device loop: run() while steps are in flight");
    auto t0 = Clock::now();
    m.stats = {};
    m.stats.plan_ms = m.plan_ms;
    m.alloc.upload(m.x, x.data(), (VkDeviceSize)m.n * 4);
    const uint32_t zero[4] = {0, 0, 0, 0};
    m.alloc.upload(m.state, zero, sizeof(zero));
    for (uint32_t i = 0; i < m.n_steps; ++i) {
        if (m.pending.size() == (observe ? 1 : m.fences.size())) m.wait_oldest(progress, observe);
        const size_t f = i % m.fences.size();
        m.ex.submit_run(m.pre, m.post, m.fences[f]);
        m.pending.push_back({f, (int)i});
    }
    while (!m.pending.empty()) m.wait_oldest(progress, observe);
    m.stats.steps = (int)m.n_steps;
    m.stats.host_ms = ms_since(t0) - m.stats.wait_ms;
}

std::vector<float> StepProgram::latents(int mode, float a, float b) {
    Impl& m = *impl_;
    KILN_CHECK(m.pending.empty(), "device loop: latents() while steps are in flight");
    std::vector<float> out(m.n);
    if (mode < 0) {
        m.alloc.download(m.x, out.data(), (VkDeviceSize)m.n * 4);
        return out;
    }
    KILN_CHECK(mode <= 2, "device loop: finalize mode ", mode);
    Bound fin = m.finalize;
    params::LoopParams p{};
    std::memcpy(&p, fin.d.push.data(), sizeof(p));
    p.mode = (uint32_t)mode, p.a = a, p.b = b;
    fin.d.set_push(p);
    VkCommandBuffer cb = m.ctx.begin_one_shot();
    Impl::barrier(cb);
    m.record(cb, fin);
    Impl::barrier(cb);
    VK_CHECK(vkEndCommandBuffer(cb));
    m.ctx.submit_wait(cb);
    m.alloc.download(m.z, out.data(), (VkDeviceSize)m.n * 4);
    return out;
}

}  // namespace kiln::models
