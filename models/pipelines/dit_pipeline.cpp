#include "models/pipelines/dit_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "models/loop/device_loop.h"
#include "models/loop/step_program.h"
#include "models/registry/registry.h"
#include "models/schedulers/scheduler.h"
#include "models/transformers/dit.h"
#include "models/vae/vae.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/core/torch_rng.h"

namespace kiln::models {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

Tensor seeded_normal(const Shape& shape, uint64_t seed, DType dtype) {
    Tensor t(DType::f32, shape);
    TorchCpuGenerator(seed).randn(t.data<float>(), t.numel(), dtype);
    return t;
}

void check_host_memory(const std::string& what, int64_t images, int latent_channels, int latent_h, int latent_w,
                       int height, int width) {
    // f32 latents: the initial noise, the working copy, the guidance batch (2x), the noise prediction, the VAE's
    // input; images: the decoded NCHW, the NHWC image and one more (DiT's unclamped copy, the caller's output).
    const double latents = (double)images * latent_channels * latent_h * latent_w * 4;
    const double pixels = (double)images * 3 * height * width * 4;
    const double need = 6 * latents + 3 * pixels;
    const double host = (double)platform::physical_memory();  // 0: unknown, no check
    auto gib = [](double b) {
        char s[32];
        std::snprintf(s, sizeof s, "%.1f GiB", b / (1024.0 * 1024 * 1024));
        return std::string(s);
    };
    KILN_CHECK(host <= 0 || need <= host, what, ": ", images, " image(s) of ", width, "x", height, " need about ",
               gib(need), " of host memory for their latents and pixels; this machine has ", gib(host),
               " (give a smaller --width/--height or fewer images)");
}

namespace {
// The labels, one per image (every label images_per_label times in a row), checked against the model.
std::vector<int> dit_labels(const GenerateOptions& opt, const DiTConfig& tc) {
    KILN_CHECK(!opt.labels.empty(), "no class labels given");
    KILN_CHECK(opt.images_per_label >= 1 && opt.images_per_label <= 1000, "images per label is ", opt.images_per_label,
               " (1..1000)");
    std::vector<int> each;
    for (int l : opt.labels) each.insert(each.end(), (size_t)opt.images_per_label, l);
    KILN_CHECK(opt.steps >= 1 && opt.steps <= 1000, "--steps must be in 1..1000, got ", opt.steps);
    for (int l : each)
        KILN_CHECK(l >= 0 && l < tc.num_embeds_ada_norm, "class label ", l, " out of range [0, ",
                   tc.num_embeds_ada_norm, ")");
    return each;
}

// The denoising loop on the host: transformer on the guidance batch, guidance on the first C channels, scheduler
// step. x: latent_model_input (both halves with CFG); returns the first half.
std::vector<float> denoise_on_host(exec::Executor& tx, sched::Scheduler& sched, std::vector<float> x, int B, int C,
                                   int S, bool cfg, const GenerateOptions& opt,
                                   const std::vector<std::vector<float>>& step_noise, GenerateResult& res) {
    const int BB = cfg ? 2 * B : B;
    const Shape lat_shape{B, C, S, S};
    const size_t n_half = x.size() / (cfg ? 2 : 1), plane = (size_t)S * S;
    const auto& ts = sched.timesteps();
    double wait_ms = 0;
    const auto t_loop = Clock::now();
    for (int i = 0; i < (int)ts.size(); ++i) {
        const auto t_step = Clock::now();
        if (cfg) std::memcpy(x.data() + n_half, x.data(), n_half * 4);  // cat([half, half])
        sched.scale_model_input(x, i);
        tx.set_input("hidden_states", Tensor::from_f32({BB, C, S, S}, x));
        Tensor tt(DType::f32, {BB});
        for (int b = 0; b < BB; ++b) tt.data<float>()[b] = (float)ts[(size_t)i];
        tx.set_input("timestep", tt);
        auto t_run = Clock::now();
        tx.run();
        wait_ms += ms_since(t_run) - tx.last_host_ms();
        Tensor noise = tx.output("sample");  // [BB, out, S, S]
        const Tensor raw = noise;
        const int OC = (int)noise.shape[1];
        // The raw transformer output of the whole guidance batch, as diffusers' fixtures record it.
        if (opt.keep_intermediates) res.intermediates.push_back({"step" + std::to_string(i) + "_noise_pred", raw});
        float* np = noise.data<float>();
        if (cfg) {  // guidance on the first C channels, copied to both halves
            for (int b = 0; b < B; ++b)
                for (size_t k = 0; k < (size_t)C * plane; ++k) {
                    float cond = np[(size_t)b * OC * plane + k], unc = np[(size_t)(b + B) * OC * plane + k];
                    float h = unc + (float)opt.guidance * (cond - unc);
                    np[(size_t)b * OC * plane + k] = h;
                    np[(size_t)(b + B) * OC * plane + k] = h;
                }
        }
        // Learned sigma: the scheduler sees the first C channels only.
        std::vector<float> model_out((size_t)BB * C * plane);
        const bool split = OC / 2 == C;
        for (int b = 0; b < BB; ++b)
            std::memcpy(model_out.data() + (size_t)b * C * plane, np + (size_t)b * OC * plane,
                        (split ? C : OC) * plane * 4);
        x = sched.step(model_out, i, x, step_noise.empty() ? nullptr : &step_noise[(size_t)i]);
        if (opt.keep_intermediates)
            res.intermediates.push_back(
                {"step" + std::to_string(i) + "_latents",
                 Tensor::from_f32(lat_shape, std::vector<float>(x.begin(), x.begin() + (long)n_half))});
        res.step_ms.push_back(ms_since(t_step));
        res.transformer_runs.push_back(tx.last_run());
        if (opt.progress) opt.progress(i + 1, (int)ts.size());
    }
    res.denoise_ms = ms_since(t_loop);
    res.denoise_host_ms = res.denoise_ms - wait_ms;
    x.resize(n_half);
    return x;
}

// VAE decode, then (decoded / 2 + 0.5) clamped to [0, 1], NHWC.
void decode_images(VaeRunner& vx, const std::vector<float>& z, const Shape& lat_shape, bool keep, GenerateResult& res) {
    auto t_dec = Clock::now();
    if (keep) res.intermediates.push_back({"final_latents_scaled", Tensor::from_f32(lat_shape, z)});
    Tensor dec = vx.decode(Tensor::from_f32(lat_shape, z));  // [B, 3, H, W]
    if (keep) res.intermediates.push_back({"decoded", dec});
    const int B = (int)dec.shape[0], OCH = (int)dec.shape[1], H = (int)dec.shape[2], W = (int)dec.shape[3];
    res.image = Tensor(DType::f32, {B, H, W, OCH});
    Tensor unclamped(DType::f32, {B, H, W, OCH});
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < OCH; ++c)
            for (int y = 0; y < H; ++y)
                for (int xx = 0; xx < W; ++xx) {
                    float v = dec.data<float>()[(((size_t)b * OCH + c) * H + y) * W + xx] / 2.f + 0.5f;
                    size_t o = (((size_t)b * H + y) * W + xx) * OCH + c;
                    unclamped.data<float>()[o] = v;
                    res.image.data<float>()[o] = std::min(1.f, std::max(0.f, v));
                }
    if (keep) {
        res.intermediates.push_back({"image_unclamped", unclamped});
        res.intermediates.push_back({"image", res.image});
    }
    res.decode_ms = ms_since(t_dec);
}
}  // namespace

GenerateResult generate_dit(vk::Context& ctx, const ModelSource& src, const GenerateOptions& opt) {
    check_float(FloatOption::guidance, opt.guidance);
    GenerateResult res;
    auto t_plan = Clock::now();
    const Family& family = models::family(FamilyId::dit);
    KILN_CHECK(src.has("transformer") && src.has("vae") && src.has("scheduler"), src.path(), ": a ", family.name,
               " pipeline needs transformer, vae and scheduler components");
    const ComponentClass* k = find_component_class(src.class_of("transformer"));
    KILN_CHECK(k && k->kind == family.transformer, src.path(), ": transformer is ", src.class_of("transformer"),
               ", `generate` runs ", class_name(family.transformer), " pipelines");
    auto tc = DiTConfig::from_json(src.config("transformer"));
    auto vc = VaeConfig::from_json(src.config("vae"));
    const std::vector<int> each = dit_labels(opt, tc);
    const int B = (int)each.size(), C = tc.in_channels, S = tc.sample_size;
    const int vsf = 1 << ((int)vc.block_out.size() - 1);
    check_host_memory(family.pipelines[0].name, B, C, S, S, S * vsf, S * vsf);
    const bool cfg = opt.guidance > 1.0;
    const int BB = cfg ? 2 * B : B;
    const Shape lat_shape{B, C, S, S};

    auto sched = sched::make_scheduler(src.config("scheduler"), opt.scheduler, opt.scheduler_config);
    sched->set_timesteps(opt.steps);

    // Transformer for the guidance batch; VAE decoder for the batch.
    auto tws = src.weights("transformer");
    ir::Graph tg;
    Builder tb(tg, *tws);
    build_dit(tb, tc, BB, S, S);
    exec::Mode mode = opt.mode == exec::Mode::regional && tc.layers < 2 ? exec::Mode::full : opt.mode;
    exec::Executor tx(ctx, tg, tb.weight_fn(), mode);
    VaeOptions vo;
    vo.tiled = opt.tiled_vae;
    vo.tile_sample_size = opt.vae_tile_size;
    vo.mode = opt.mode == exec::Mode::eager ? exec::Mode::eager : exec::Mode::full;
    VaeRunner vx(&ctx, src, "vae", vo);
    vx.prepare_decode(lat_shape);
    res.plan_ms = ms_since(t_plan);
    res.transformer_counters = tx.counters();

    // One generator, as diffusers' torch.manual_seed(seed): the latents (unless given), then the noise of every step
    // of a scheduler that draws one (Euler ancestral). The pipeline passes no generator to scheduler.step, so the step
    // draws from torch's default generator, which torch.manual_seed seeded: the same stream.
    TorchCpuGenerator gen(opt.seed);
    Tensor latents(DType::f32, lat_shape);
    if (opt.latents_init)
        latents = *opt.latents_init;
    else
        gen.randn(latents.data<float>(), latents.numel(), opt.noise_dtype);
    KILN_CHECK(latents.shape == lat_shape, "initial latents have shape ", shape_str(latents.shape), ", expected ",
               shape_str(lat_shape));
    latents = latents.astype(DType::f32);
    if (opt.keep_intermediates) {
        res.intermediates.push_back({"latents_init", latents});  // the seeded noise, NCHW
        const auto& ts = sched->timesteps();
        res.intermediates.push_back(
            {"timesteps", Tensor::from_f32({(int64_t)ts.size()}, std::vector<float>(ts.begin(), ts.end()))});
    }
    const size_t n_half = (size_t)latents.numel();
    std::vector<float> x(n_half * (cfg ? 2 : 1));  // latent_model_input
    // The steps' noise: randn_tensor(model_output.shape), the whole guidance batch (the step runs on both halves;
    // the first is kept).
    const auto step_noise = draw_step_noise(gen, *sched, x.size(), opt.noise_dtype);
    for (size_t r = 0; r < x.size() / n_half; ++r)
        std::memcpy(x.data() + r * n_half, latents.data<float>(), n_half * 4);
    KILN_CHECK(!cfg || tc.num_embeds_ada_norm >= 1000, "guidance needs DiT's null class 1000, but this model has ",
               tc.num_embeds_ada_norm, " classes (use --guidance 1)");
    Tensor labels(DType::i32, {BB});
    for (int i = 0; i < BB; ++i) labels.data<int32_t>()[i] = i < B ? each[(size_t)i] : 1000;
    tx.set_input("class_labels", labels);

    const auto& ts = sched->timesteps();
    const float inv_sf = (float)(1.0 / vc.scaling_factor);
    std::vector<float> z;  // the latents handed to the VAE: inv_sf * latents
    StepLoopSpec ls;
    ls.rows = B;
    ls.row_lat = (uint32_t)(C * (size_t)S * S);
    ls.row_out = (uint32_t)(tx.device_range("sample").size / 4 / (VkDeviceSize)BB);
    ls.cfg = cfg;
    ls.cond_first = true;      // DiT: [cond, null class]
    ls.scale_in_place = true;  // diffusers' DiT pipeline steps the scaled latent_model_input
    ls.guidance = (float)opt.guidance;
    res.device_loop = use_device_loop(ctx.settings(), opt.host_loop) && StepProgram::supported(tx, ls);
    if (res.device_loop) {
        auto t_loop = Clock::now();
        const auto table = plan_loop_steps(*sched, [&](int i) { return (float)ts[(size_t)i]; });
        // the device steps the first half: each step's first n_half values
        StepProgram prog(ctx, tx, ls, table, device_step_noise(step_noise, n_half));
        std::function<void(int)> observe;  // intermediates: read back after each step (steps then run one by one)
        if (opt.keep_intermediates)
            observe = [&](int i) {
                res.intermediates.push_back({"step" + std::to_string(i) + "_noise_pred", tx.output("sample")});
                res.intermediates.push_back(
                    {"step" + std::to_string(i) + "_latents", Tensor::from_f32(lat_shape, prog.latents())});
            };
        prog.run(std::vector<float>(x.begin(), x.begin() + (long)n_half), step_timer(res, opt.progress), observe);
        res.loop_plan_ms = prog.stats().plan_ms;
        res.denoise_ms = ms_since(t_loop);
        res.denoise_host_ms = res.denoise_ms - prog.stats().wait_ms;
        z = prog.latents(0, inv_sf);
    } else {
        z = denoise_on_host(tx, *sched, std::move(x), B, C, S, cfg, opt, step_noise, res);
        for (auto& v : z) v = inv_sf * v;
    }
    decode_images(vx, z, lat_shape, opt.keep_intermediates, res);
    return res;
}

}  // namespace kiln::models
