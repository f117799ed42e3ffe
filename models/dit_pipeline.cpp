#include "models/dit_pipeline.h"

#include <chrono>
#include <cmath>
#include <functional>

#include "models/device_loop.h"
#include "models/dit.h"
#include "models/schedulers/scheduler.h"
#include "models/step_program.h"
#include "models/vae.h"
#include "models/vae_runner.h"
#include "runtime/core/error.h"
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

GenerateResult generate_dit(vk::Context& ctx, const ModelSource& src, const GenerateOptions& opt) {
    GenerateResult res;
    auto t_plan = Clock::now();
    KILN_CHECK(src.has("transformer") && src.has("vae") && src.has("scheduler"), src.path(),
               ": a DiT pipeline needs transformer, vae and scheduler components");
    KILN_CHECK(src.class_of("transformer") == "DiTTransformer2DModel", src.path(), ": transformer is ",
               src.class_of("transformer"), ", `generate` runs DiTTransformer2DModel pipelines");
    KILN_CHECK(!opt.labels.empty(), "no class labels given");
    KILN_CHECK(opt.images_per_label >= 1 && opt.images_per_label <= 1000, "images per label is ", opt.images_per_label,
               " (1..1000)");
    std::vector<int> each;  // every label images_per_label times in a row, one image each
    for (int l : opt.labels) each.insert(each.end(), (size_t)opt.images_per_label, l);
    KILN_CHECK(opt.steps >= 1 && opt.steps <= 1000, "--steps must be in 1..1000, got ", opt.steps);
    auto tc = DiTConfig::from_json(src.config("transformer"));
    auto vc = VaeConfig::from_json(src.config("vae"));
    for (int l : each)
        KILN_CHECK(l >= 0 && l < tc.num_embeds_ada_norm, "class label ", l, " out of range [0, ",
                   tc.num_embeds_ada_norm, ")");
    const int B = (int)each.size(), C = tc.in_channels, S = tc.sample_size;
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
    // of a scheduler that draws one (Euler ancestral). DiTPipeline passes no generator to scheduler.step, so the step
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

    auto t_loop = Clock::now();
    const auto& ts = sched->timesteps();
    const size_t plane = (size_t)S * S;
    const float inv_sf = (float)(1.0 / vc.scaling_factor);
    std::vector<float> z;  // the latents handed to the VAE: inv_sf * latents
    StepLoopSpec ls;
    ls.rows = B;
    ls.row_lat = (uint32_t)(C * plane);
    ls.row_out = (uint32_t)(tx.device_range("sample").size / 4 / (VkDeviceSize)BB);
    ls.cfg = cfg;
    ls.cond_first = true;      // DiT: [cond, null class]
    ls.scale_in_place = true;  // diffusers' DiTPipeline steps the scaled latent_model_input
    ls.guidance = (float)opt.guidance;
    res.device_loop = use_device_loop(ctx.settings(), opt.host_loop) && StepProgram::supported(tx, ls);
    if (res.device_loop) {
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
        double wait_ms = 0;
        for (int i = 0; i < (int)ts.size(); ++i) {
            const auto t_step = Clock::now();
            if (cfg) std::memcpy(x.data() + n_half, x.data(), n_half * 4);  // cat([half, half])
            sched->scale_model_input(x, i);
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
            x = sched->step(model_out, i, x, step_noise.empty() ? nullptr : &step_noise[(size_t)i]);
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
        z.assign(x.begin(), x.begin() + (long)n_half);
        for (auto& v : z) v = inv_sf * v;
    }

    auto t_dec = Clock::now();
    if (opt.keep_intermediates) res.intermediates.push_back({"final_latents_scaled", Tensor::from_f32(lat_shape, z)});
    Tensor dec = vx.decode(Tensor::from_f32(lat_shape, z));  // [B, 3, H, W]
    if (opt.keep_intermediates) res.intermediates.push_back({"decoded", dec});
    const int OCH = (int)dec.shape[1], H = (int)dec.shape[2], W = (int)dec.shape[3];
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
    if (opt.keep_intermediates) {
        res.intermediates.push_back({"image_unclamped", unclamped});
        res.intermediates.push_back({"image", res.image});
    }
    res.decode_ms = ms_since(t_dec);
    return res;
}

}  // namespace kiln::models
