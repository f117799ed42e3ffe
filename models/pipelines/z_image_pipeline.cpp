#include "models/pipelines/z_image_pipeline.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "models/core/forward.h"
#include "models/vae/t2i_decoder.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/error.h"
#include "runtime/core/torch_rng.h"

namespace kiln::models {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

bool present(const Tensor& t) { return !t.bytes.empty(); }

// The schedule: the pipeline sets sigma_min = 0 and then set_timesteps(N, mu) (float64 linspace(1, 0, N), shifted,
// then the final 0) or, with the caller's sigmas, set_timesteps(sigmas=..., mu) (float32, shifted).
void set_schedule(sched::Scheduler& sched, const ModelSource& src, const T2IOptions& opt, const T2IPlan& p) {
    const std::optional<double> mu = schedule_mu(src, opt, p);
    sched.set_sigma_min(0.0);
    if (!opt.sigmas.empty())
        sched.set_sigmas(opt.sigmas, mu);
    else
        sched.set_timesteps(p.steps, mu);
}

// The guided prediction of one sample (n values), negated for the scheduler: -(pos + g (pos - neg)), its norm capped
// at c ||pos|| when c > 0 (norms in f64; torch's vector_norm of f32 differs by rounding only).
void guided(const float* pos, const float* neg, size_t n, double g, double c, float* out) {
    double pn = 0, qn = 0;
    for (size_t k = 0; k < n; ++k) {
        const float v = pos[k] + (float)g * (pos[k] - neg[k]);
        out[k] = v;
        pn += (double)pos[k] * pos[k], qn += (double)v * v;
    }
    if (c > 0) {
        const double cap = std::sqrt(pn) * c, norm = std::sqrt(qn);
        if (norm > cap) {
            const float s = (float)(cap / norm);
            for (size_t k = 0; k < n; ++k) out[k] *= s;
        }
    }
    for (size_t k = 0; k < n; ++k) out[k] = -out[k];
}
}  // namespace

std::vector<Tensor> caption_rows(const Tensor& embeds, const Tensor& mask, const std::string& name) {
    KILN_CHECK(embeds.shape.size() == 3, name, " must be [B, L, D], got ", shape_str(embeds.shape));
    const int64_t B = embeds.shape[0], L = embeds.shape[1], D = embeds.shape[2];
    const bool masked = present(mask);
    KILN_CHECK(!masked || mask.shape == Shape({B, L}), name, ": its attention mask is ", shape_str(mask.shape),
               ", expected [", B, ", ", L, "]");
    const Tensor f = embeds.astype(DType::f32);
    const Tensor m = masked ? mask.astype(DType::f32) : Tensor();
    std::vector<Tensor> out;
    for (int64_t b = 0; b < B; ++b) {
        std::vector<float> rows;
        for (int64_t l = 0; l < L; ++l)
            if (!masked || m.data<float>()[b * L + l] != 0.f)
                rows.insert(rows.end(), f.data<float>() + (b * L + l) * D, f.data<float>() + (b * L + l + 1) * D);
        const int64_t n = (int64_t)rows.size() / D;
        KILN_CHECK(n > 0, name, " row ", b, " has no unmasked position");
        out.push_back(Tensor::from_f32({n, D}, rows));
    }
    return out;
}

namespace {
// The transformer for a batch of BB items, built once: its layout (gathers, RoPE tables, masks) depends on the
// shapes only; each step writes the latents x_i and t, which are graph inputs as given (z_image.h).
struct ZTransformer {
    std::unique_ptr<WeightStore> ws;
    ir::Graph g;
    std::unique_ptr<Builder> b;
    std::unique_ptr<exec::Executor> x;

    ZTransformer(vk::Context& ctx, const ModelSource& src, const std::map<std::string, Tensor>& raw, exec::Mode mode)
        : ws(src.weights("transformer")) {
        b = std::make_unique<Builder>(g, *ws);
        auto in = build_component(*b, src.class_of("transformer"), src.config("transformer"), raw);
        if (mode == exec::Mode::regional && g.regions().size() < 2) mode = exec::Mode::full;
        x = std::make_unique<exec::Executor>(ctx, g, b->weight_fn(), mode);
        for (auto& [name, t] : in) x->set_input(name, t);
    }
};
}  // namespace

GenerateResult generate_z_image(vk::Context& ctx, const ModelSource& src, const T2IOptions& opt, const T2IPlan& p,
                                double plan_ms) {
    GenerateResult res;
    const auto t_plan = Clock::now();
    KILN_CHECK(opt.lora.files.empty(), p.pipeline, ": LoRAs are not supported for Z-Image yet");
    KILN_CHECK(!opt.inputs.has_image() && !opt.inputs.has_mask(), p.pipeline,
               " takes no image (diffusers' ZImagePipeline is text to image)");
    KILN_CHECK(opt.images_per_prompt >= 1, "images per prompt is ", opt.images_per_prompt, " (at least 1)");
    KILN_CHECK(std::isfinite(opt.cfg_truncation), "cfg_truncation is ", opt.cfg_truncation);
    KILN_CHECK(std::isfinite(opt.cfg_normalization) && opt.cfg_normalization >= 0, "cfg_normalization is ",
               opt.cfg_normalization, " (0: off; 1: diffusers' True)");
    const TextConditioning tx = opt.images_per_prompt > 1 ? opt.text.repeat_each(opt.images_per_prompt) : opt.text;
    KILN_CHECK(present(tx.prompt_embeds), p.pipeline, ": prompt_embeds missing");
    const std::vector<Tensor> pos = caption_rows(tx.prompt_embeds, tx.prompt_attention_mask, "prompt_embeds");
    const int64_t B = (int64_t)pos.size();
    std::vector<Tensor> neg;
    if (p.cfg) {
        KILN_CHECK(present(tx.negative_prompt_embeds), p.pipeline, ": guidance ", p.guidance,
                   " > 0 needs negative_prompt_embeds (or guidance 0)");
        neg = caption_rows(tx.negative_prompt_embeds, tx.negative_prompt_attention_mask, "negative_prompt_embeds");
        KILN_CHECK((int64_t)neg.size() == B || neg.size() == 1, "negative_prompt_embeds has batch ", neg.size(),
                   ", expected ", B, " or 1");
        if (neg.size() == 1) neg.resize((size_t)B, neg[0]);
    }
    const int64_t BB = p.cfg ? 2 * B : B;

    // ---- Latents [B, C, h, w]: given, or torch.randn from the seed.
    const int C = p.latent_channels, h = p.latent_h, w = p.latent_w;
    const Shape nchw{B, C, h, w};
    TorchCpuGenerator gen(opt.seed);
    const Tensor init = initial_noise(opt, nchw, gen);
    KILN_CHECK(init.shape == nchw, "initial latents have shape ", shape_str(init.shape), ", expected ", shape_str(nchw),
               " for ", B, " image(s) at ", p.width, "x", p.height);
    std::vector<float> x(init.data<float>(), init.data<float>() + init.numel());
    auto sched = make_t2i_scheduler(src, opt);
    set_schedule(*sched, src, opt, p);
    const auto& ts = sched->timesteps();

    // ---- The transformer on the guidance batch (positives, then negatives), the VAE decoder.
    const size_t row = (size_t)C * h * w;
    std::map<std::string, Tensor> raw;
    for (int64_t r = 0; r < BB; ++r) {
        raw["x_" + std::to_string(r)] = Tensor(DType::f32, {C, 1, h, w});
        raw["cap_feats_" + std::to_string(r)] = r < B ? pos[(size_t)r] : neg[(size_t)(r - B)];
    }
    raw["t"] = Tensor(DType::f32, {BB});
    ZTransformer tr(ctx, src, raw, opt.mode);
    LatentDecoder vx(&ctx, src, vae_options(opt));
    vx.prepare_decode(nchw);
    res.plan_ms = plan_ms + ms_since(t_plan);
    res.transformer_counters = tr.x->counters();
    if (opt.keep_intermediates) {
        for (int64_t b = 0; b < B; ++b) {
            res.intermediates.push_back({"prompt_embeds_" + std::to_string(b), pos[(size_t)b]});
            if (p.cfg) res.intermediates.push_back({"negative_prompt_embeds_" + std::to_string(b), neg[(size_t)b]});
        }
        res.intermediates.push_back({"latents_init", init});
        res.intermediates.push_back(
            {"timesteps", Tensor::from_f32({(int64_t)ts.size()}, std::vector<float>(ts.begin(), ts.end()))});
        const auto& sg = sched->sigmas();
        res.intermediates.push_back(
            {"sigmas", Tensor::from_f32({(int64_t)sg.size()}, std::vector<float>(sg.begin(), sg.end()))});
    }

    // ---- The loop. A step without guidance (cfg_truncation) still runs the whole batch: the items are independent
    // (batch padding is masked), so the positives' outputs are the same; only the positives are used.
    const auto t_loop = Clock::now();
    double wait_ms = 0;
    std::vector<float> noise(x.size());
    const auto& sg = sched->sigmas();
    for (int i = 0; i < (int)ts.size(); ++i) {
        const auto t_step = Clock::now();
        // diffusers' last step (sigma_min = 0: sigma 0 to 0) moves the latents by dt = 0 x the prediction: the same
        // latents, bitwise. Kiln skips its transformer call, unless intermediates are kept (the fixtures record it).
        if (!opt.keep_intermediates && (size_t)i + 1 < sg.size() && sg[(size_t)i + 1] == sg[(size_t)i]) {
            res.step_ms.push_back(ms_since(t_step));
            if (opt.progress) opt.progress(i + 1, (int)ts.size());
            continue;
        }
        const float tn = (1000.f - (float)ts[(size_t)i]) / 1000.f;  // (1000 - timestep) / 1000 in f32, as torch
        const bool cfg = p.cfg && !(opt.cfg_truncation <= 1 && (double)tn > opt.cfg_truncation);
        for (int64_t r = 0; r < BB; ++r) {
            Tensor& xi = raw["x_" + std::to_string(r)];
            std::memcpy(xi.data<float>(), x.data() + (size_t)(r % B) * row, row * 4);
        }
        for (int64_t r = 0; r < BB; ++r) raw["t"].data<float>()[r] = tn;
        for (int64_t r = 0; r < BB; ++r) tr.x->set_input("x_" + std::to_string(r), raw["x_" + std::to_string(r)]);
        tr.x->set_input("t", raw["t"]);
        const auto t_run = Clock::now();
        tr.x->run();
        wait_ms += ms_since(t_run) - tr.x->last_host_ms();
        const int64_t used = cfg ? 2 * B : B;
        Tensor out(DType::f32, {used, C, 1, h, w});
        for (int64_t r = 0; r < used; ++r) {
            const Tensor o = tr.x->output("sample_" + std::to_string(r)).astype(DType::f32);
            KILN_CHECK((size_t)o.numel() == row, p.pipeline, ": transformer output ", shape_str(o.shape),
                       " does not match latents [", C, ", 1, ", h, ", ", w, "]");
            std::memcpy(out.data<float>() + r * row, o.data<float>(), row * 4);
        }
        for (int64_t b = 0; b < B; ++b) {
            const float* po = out.data<float>() + b * row;
            if (cfg)
                guided(po, out.data<float>() + (b + B) * row, row, p.guidance, opt.cfg_normalization,
                       noise.data() + b * row);
            else
                for (size_t k = 0; k < row; ++k) noise[b * row + k] = -po[k];
        }
        if (opt.keep_intermediates) {
            const std::string si = "step" + std::to_string(i);
            Tensor in(DType::f32, {used, C, 1, h, w});
            for (int64_t r = 0; r < used; ++r)
                std::memcpy(in.data<float>() + r * row, x.data() + (size_t)(r % B) * row, row * 4);
            res.intermediates.push_back({si + "_transformer_in", in});
            res.intermediates.push_back(
                {si + "_transformer_t", Tensor::from_f32({used}, std::vector<float>(used, tn))});
            res.intermediates.push_back({si + "_transformer_out", out});
            res.intermediates.push_back({si + "_noise_pred", Tensor::from_f32(nchw, noise)});
        }
        x = sched->step(noise, i, x, nullptr);
        if (opt.keep_intermediates)
            res.intermediates.push_back({"step" + std::to_string(i) + "_latents", Tensor::from_f32(nchw, x)});
        res.step_ms.push_back(ms_since(t_step));
        res.transformer_runs.push_back(tr.x->last_run());
        if (opt.progress) opt.progress(i + 1, (int)ts.size());
    }
    res.denoise_ms = ms_since(t_loop);
    res.denoise_host_ms = res.denoise_ms - wait_ms;

    // ---- Decode latents / scaling_factor + shift_factor.
    const LatentSpace vc = latent_space(src);
    for (float& v : x) v = v / (float)vc.scaling_factor + (float)vc.shift_factor;
    decode_images(vx, x, nchw, opt.keep_intermediates, res);
    return res;
}

}  // namespace kiln::models
