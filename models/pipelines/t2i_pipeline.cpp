#include "models/pipelines/t2i_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "models/core/forward.h"
#include "models/loop/device_loop.h"
#include "models/loop/step_program.h"
#include "models/pipelines/sana_pipeline.h"
#include "models/pipelines/t2i_images.h"
#include "models/pipelines/t2i_tokens.h"
#include "models/pipelines/t2i_transformers.h"
#include "models/pipelines/z_image_pipeline.h"
#include "models/registry/registry.h"
#include "models/schedulers/scheduler.h"
#include "models/transformers/pixart.h"
#include "models/vae/t2i_decoder.h"
#include "models/vae/vae.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/error.h"
#include "runtime/core/torch_rng.h"

namespace kiln::models {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

const char* const kConditioningNames[] = {"prompt_embeds",         "negative_prompt_embeds",
                                          "pooled_prompt_embeds",  "negative_pooled_prompt_embeds",
                                          "prompt_attention_mask", "negative_prompt_attention_mask"};

bool present(const Tensor& t) { return !t.bytes.empty(); }  // a default Tensor() (shape [], no bytes) is absent

// A conditioning tensor for the B prompt rows: batch B as is, batch 1 repeated (negatives apply to all rows).
Tensor rows(const Tensor& t, int64_t B, size_t rank, const std::string& name) {
    KILN_CHECK(t.shape.size() == rank, name, " must have ", rank, " dimensions, got ", shape_str(t.shape));
    KILN_CHECK(t.shape[0] == B || t.shape[0] == 1, name, " has batch ", t.shape[0], ", expected ", B, " or 1");
    Tensor f = t.astype(DType::f32);
    if (t.shape[0] == B) return f;
    Shape s = f.shape;
    s[0] = B;
    Tensor out(DType::f32, s);
    for (int64_t b = 0; b < B; ++b) std::memcpy(out.bytes.data() + (size_t)b * f.nbytes(), f.bytes.data(), f.nbytes());
    return out;
}

// cat([a, b], dim=0) of f32 tensors with equal trailing shapes.
Tensor cat0(const Tensor& a, const Tensor& b, const std::string& what) {
    KILN_CHECK(a.shape.size() == b.shape.size() && std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1),
               what, ": negative ", shape_str(a.shape), " and prompt ", shape_str(b.shape), " shapes differ");
    Shape s = a.shape;
    s[0] += b.shape[0];
    Tensor out(DType::f32, s);
    std::memcpy(out.bytes.data(), a.bytes.data(), a.nbytes());
    std::memcpy(out.bytes.data() + a.nbytes(), b.bytes.data(), b.nbytes());
    return out;
}

// The transformer's text conditioning for the guidance batch: cat([negative, prompt]) when p.cfg; PixArt's
// attention mask and micro-conditions, or SD3's and Flux's pooled projections.
std::map<std::string, Tensor> conditioning_inputs(const ModelSource& src, const T2IPlan& p, const TextConditioning& tx,
                                                  int64_t B, int BB) {
    const Family& f = *p.family;
    const bool embedded = f.conditioning == Conditioning::embedded;  // Flux: CFG is true CFG
    auto guided = [&](const Tensor& pos, const Tensor& neg, size_t rank, const std::string& name) {
        Tensor pr = rows(pos, B, rank, name);
        if (!p.cfg) return pr;
        KILN_CHECK(present(neg), p.pipeline, ": ", embedded ? "true_cfg_scale " : "guidance ", p.cfg_scale,
                   " > 1 needs negative_", name, embedded ? " (or true_cfg_scale 1)" : " (or guidance 1)");
        return cat0(rows(neg, B, rank, "negative_" + name), pr, name);
    };
    std::map<std::string, Tensor> in;
    in["encoder_hidden_states"] = guided(tx.prompt_embeds, tx.negative_prompt_embeds, 3, "prompt_embeds");
    if (f.attention_mask) {
        KILN_CHECK(present(tx.prompt_attention_mask), p.pipeline, ": prompt_attention_mask missing (diffusers: ",
                   "\"Must provide `prompt_attention_mask` when specifying `prompt_embeds`\")");
        in["encoder_attention_mask"] =
            guided(tx.prompt_attention_mask, tx.negative_prompt_attention_mask, 2, "prompt_attention_mask");
        if (f.transformer == ComponentKind::pixart &&
            PixArtConfig::from_json(src.config("transformer")).use_additional_conditions) {
            Tensor r(DType::f32, {BB, 2}), a(DType::f32, {BB, 1});  // micro-conditions: (height, width), h/w
            for (int b = 0; b < BB; ++b) {
                r.data<float>()[2 * b] = (float)p.height, r.data<float>()[2 * b + 1] = (float)p.width;
                a.data<float>()[b] = (float)((double)p.height / p.width);
            }
            in["resolution"] = r;
            in["aspect_ratio"] = a;
        }
    }
    if (f.pooled_projections) {
        KILN_CHECK(present(tx.pooled_prompt_embeds), p.pipeline, ": pooled_prompt_embeds missing");
        in["pooled_projections"] =
            guided(tx.pooled_prompt_embeds, tx.negative_pooled_prompt_embeds, 2, "pooled_prompt_embeds");
    }
    return in;
}

// The schedule: the caller's timesteps or sigmas, Flux's sigmas linspace(1, 1/N, N), or the scheduler's own, with
// schedule_mu's mu.
void set_schedule(sched::Scheduler& sched, const ModelSource& src, const T2IOptions& opt, const T2IPlan& p) {
    const Family& f = *p.family;
    const std::optional<double> mu = schedule_mu(src, opt, p);
    if (!opt.timesteps.empty()) {  // PixArt: the caller's timesteps (checked in plan_t2i)
        sched.set_custom_timesteps(opt.timesteps);
    } else if (!opt.sigmas.empty()) {  // the caller's schedule, shifted as the scheduler shifts its own
        sched.set_sigmas(opt.sigmas, mu);
    } else if (f.linspace_sigmas) {
        std::vector<double> sigmas(p.steps);
        for (int i = 0; i < p.steps; ++i)  // np.linspace(1.0, 1/N, N)
            sigmas[i] = p.steps == 1 ? 1.0 : 1.0 + i * ((1.0 / p.steps - 1.0) / (p.steps - 1));
        if (p.steps > 1) sigmas.back() = 1.0 / p.steps;
        sched.set_sigmas(sigmas, mu);
    } else if (mu) {
        sched.set_timesteps(p.steps, *mu);
    } else {
        sched.set_timesteps(p.steps);
    }
}

// Guidance on the host: the noise prediction (B rows of row_lat) from the transformer output (BB rows).
// Learned sigma (PixArt, out_channels = 2C): the scheduler sees the first C channels of each row.
struct Guide {
    const T2IPlan& p;
    const std::string cls;
    int64_t B;
    int BB;
    size_t row_lat;
    Shape lat_shape;

    void operator()(const Tensor& out, std::vector<float>& noise) const {
        const size_t row_out = (size_t)out.numel() / (size_t)BB;
        KILN_CHECK(row_out == row_lat || row_out == 2 * row_lat, cls, ": output ", shape_str(out.shape),
                   " does not match latents ", shape_str(lat_shape));
        const float* o = out.data<float>();
        const float g = (float)p.cfg_scale;
        for (int64_t b = 0; b < B; ++b)
            for (size_t k = 0; k < row_lat; ++k) {
                float v = o[(size_t)b * row_out + k];
                if (p.cfg) {  // rows [0, B) negative, [B, 2B) prompt: uncond + g * (text - uncond) (Flux: true CFG)
                    const float unc = v, txt = o[(size_t)(b + B) * row_out + k];
                    v = unc + g * (txt - unc);
                }
                noise[(size_t)b * row_lat + k] = v;
            }
    }
};

// The denoising loop on the host: the transformer on the guidance batch, guidance, SD3's skip-layer call, the
// scheduler step. Returns the final latents (in the stepped layout: packed for Flux).
std::vector<float> denoise_on_host(Transformers& t, sched::Scheduler& sched, std::vector<float> x, const Guide& guide,
                                   const T2IOptions& opt, const std::vector<std::vector<float>>& step_noise,
                                   const std::function<float(int)>& timestep, GenerateResult& res,
                                   const std::function<void(int, std::vector<float>&)>& after_step = {},
                                   const std::vector<float>& cond = {}, const std::vector<float>& ref = {}) {
    const T2IPlan& p = guide.p;
    const int64_t B = guide.B;
    const int BB = guide.BB;
    const Shape& lat_shape = guide.lat_shape;
    Shape model_shape = lat_shape;
    model_shape[0] = BB;
    // Flux Fill: every token's latents followed by its conditioning (pipeline_flux_fill.py: cat(latents,
    // masked_image_latents, dim=2)).
    const int64_t K = p.cond_channels, S = lat_shape[1], KL = lat_shape.back();
    if (K) model_shape.back() += K;
    const size_t n_lat = x.size(), row_lat = guide.row_lat;
    // Flux Kontext: the reference's tokens after every row's (cat(latents, image_latents, dim=1)); the output's
    // first row_lat values per row are the prediction.
    const size_t row_ref = ref.size() / (size_t)std::max<int64_t>(B, 1);
    if (row_ref) model_shape[1] += (int64_t)row_ref / lat_shape.back();
    std::vector<float> noise(n_lat), model_in((size_t)BB * (row_lat + (size_t)(K * S) + row_ref));
    double wait_ms = 0;
    const auto t_loop = Clock::now();
    const auto& ts = sched.timesteps();
    for (int i = 0; i < (int)ts.size(); ++i) {
        const auto t_step = Clock::now();
        if (K) {
            for (int64_t tok = 0; tok < BB * S; ++tok) {  // BB == B: Fill has no classifier-free guidance
                std::memcpy(&model_in[(size_t)(tok * (KL + K))], &x[(size_t)(tok * KL)], (size_t)KL * 4);
                std::memcpy(&model_in[(size_t)(tok * (KL + K) + KL)], &cond[(size_t)(tok * K)], (size_t)K * 4);
            }
        } else if (row_ref) {
            for (int64_t r = 0; r < BB; ++r) {
                const int64_t b = r % B;
                std::memcpy(&model_in[(size_t)r * (row_lat + row_ref)], &x[(size_t)b * row_lat], row_lat * 4);
                std::memcpy(&model_in[(size_t)r * (row_lat + row_ref) + row_lat], &ref[(size_t)b * row_ref],
                            row_ref * 4);
            }
        } else {
            for (int r = 0; r < BB / B; ++r) std::memcpy(model_in.data() + r * n_lat, x.data(), n_lat * 4);
        }
        sched.scale_model_input(model_in, i);
        t.x->set_input("hidden_states", Tensor::from_f32(model_shape, model_in));
        t.x->set_input("timestep", Tensor::from_f32({BB}, std::vector<float>((size_t)BB, timestep(i))));
        auto t_run = Clock::now();
        t.x->run();
        wait_ms += ms_since(t_run) - t.x->last_host_ms();
        Tensor out = t.x->output("sample");
        const std::string si = "step" + std::to_string(i);
        if (opt.keep_intermediates) res.intermediates.push_back({si + "_transformer_out", out});
        if (row_ref) {  // noise_pred = out[:, :seq_out]
            Tensor cut(DType::f32, {BB, lat_shape[1], lat_shape[2]});
            for (int64_t r = 0; r < BB; ++r)
                std::memcpy(cut.data<float>() + r * row_lat, out.data<float>() + r * (row_lat + row_ref), row_lat * 4);
            out = std::move(cut);
        }
        guide(out, noise);
        if (t.slg && std::count(p.slg_steps.begin(), p.slg_steps.end(), i)) {
            // diffusers: transformer(latents, t, original_prompt_embeds, skip_layers) on the prompt rows, then
            // noise_pred = noise_pred + (noise_pred_text - noise_pred_skip_layers) * scale.
            t.slg->set_input("hidden_states", Tensor::from_f32(lat_shape, x));
            t.slg->set_input("timestep", Tensor::from_f32({B}, std::vector<float>((size_t)B, timestep(i))));
            auto t_slg = Clock::now();
            t.slg->run();
            wait_ms += ms_since(t_slg) - t.slg->last_host_ms();
            const Tensor skip = t.slg->output("sample");
            if (opt.keep_intermediates) res.intermediates.push_back({si + "_skip_layers_out", skip});
            const float* o = out.data<float>();
            const float* s = skip.data<float>();
            const size_t row_out = (size_t)out.numel() / (size_t)BB;
            const float scale = (float)opt.skip_layer_guidance_scale;
            for (int64_t b = 0; b < B; ++b)
                for (size_t k = 0; k < row_lat; ++k) {
                    const float txt = o[(size_t)(b + B) * row_out + k], skp = s[(size_t)b * row_lat + k];
                    float& v = noise[(size_t)b * row_lat + k];
                    v = v + (txt - skp) * scale;
                }
        }
        if (opt.keep_intermediates)
            res.intermediates.push_back({si + "_noise_pred", Tensor::from_f32(lat_shape, noise)});
        if (!step_noise.empty() && opt.keep_intermediates)
            res.intermediates.push_back({si + "_variance_noise", Tensor::from_f32(lat_shape, step_noise[(size_t)i])});
        x = sched.step(noise, i, x, step_noise.empty() ? nullptr : &step_noise[(size_t)i]);
        if (after_step) after_step(i, x);  // inpainting's blend
        if (opt.keep_intermediates) res.intermediates.push_back({si + "_latents", Tensor::from_f32(lat_shape, x)});
        res.step_ms.push_back(ms_since(t_step));
        res.transformer_runs.push_back(t.x->last_run());
        if (opt.progress) opt.progress(i + 1, (int)ts.size());
    }
    res.denoise_ms = ms_since(t_loop);
    res.denoise_host_ms = res.denoise_ms - wait_ms;
    return x;
}

// The loop on the device (models/loop/step_program.h): guidance and the scheduler step fused after the
// transformer; with intermediates, steps run one at a time and are read back. latents_out reads the final latents
// with the VAE's scaling applied.
std::vector<float> denoise_on_device(vk::Context& ctx, Transformers& t, sched::Scheduler& sched,
                                     const std::vector<float>& x, const Guide& guide, const StepLoopSpec& ls,
                                     const T2IOptions& opt, const std::vector<std::vector<float>>& step_noise,
                                     const std::function<float(int)>& timestep, GenerateResult& res,
                                     const std::function<std::vector<float>(StepProgram&)>& latents_out) {
    const auto t_loop = Clock::now();
    const size_t n_lat = x.size();
    const Shape& lat_shape = guide.lat_shape;
    StepProgram prog(ctx, *t.x, ls, plan_loop_steps(sched, timestep), device_step_noise(step_noise, n_lat));
    std::function<void(int)> observe;  // intermediates: read back after each step (steps then run one by one)
    std::vector<float> noise(n_lat);
    if (opt.keep_intermediates)
        observe = [&](int i) {
            const std::string si = "step" + std::to_string(i);
            const Tensor out = t.x->output("sample");
            res.intermediates.push_back({si + "_transformer_out", out});
            guide(out, noise);  // the device fused it into the step; the same arithmetic, for the record
            res.intermediates.push_back({si + "_noise_pred", Tensor::from_f32(lat_shape, noise)});
            if (!step_noise.empty())
                res.intermediates.push_back(
                    {si + "_variance_noise", Tensor::from_f32(lat_shape, step_noise[(size_t)i])});
            res.intermediates.push_back({si + "_latents", Tensor::from_f32(lat_shape, prog.latents())});
        };
    prog.run(x, step_timer(res, opt.progress), observe);
    res.loop_plan_ms = prog.stats().plan_ms;
    res.denoise_ms = ms_since(t_loop);
    res.denoise_host_ms = res.denoise_ms - prog.stats().wait_ms;
    return latents_out(prog);
}

// The schedule as the fixtures record it: timesteps, and sigmas where the scheduler has them.
void keep_schedule(const sched::Scheduler& sched, GenerateResult& res, const char* timesteps_name = "timesteps") {
    const auto& ts = sched.timesteps();
    res.intermediates.push_back(
        {timesteps_name, Tensor::from_f32({(int64_t)ts.size()}, std::vector<float>(ts.begin(), ts.end()))});
    const auto& sg = sched.sigmas();
    if (!sg.empty())
        res.intermediates.push_back(
            {"sigmas", Tensor::from_f32({(int64_t)sg.size()}, std::vector<float>(sg.begin(), sg.end()))});
}

// The call's inputs under the fixtures' names: the text conditioning, the image's tensors (image_dump), the
// latents entering step 0 (img2img, Kontext: packed initial_latents; else the noise latents_init), ids and schedule.
void keep_inputs(GenerateResult& res, const T2IPlan& p, const TextConditioning& tx, std::map<std::string, Tensor>& in,
                 const sched::Scheduler& sched, std::vector<std::pair<std::string, Tensor>> image_dump,
                 const Tensor& init, const Tensor& initial_latents) {
    for (auto& kv : tx.named()) res.intermediates.push_back(kv);
    res.intermediates.insert(res.intermediates.end(), image_dump.begin(), image_dump.end());
    const auto& ts = sched.timesteps();
    if (p.img2img) {
        res.intermediates.push_back({"initial_latents", initial_latents});
        res.intermediates.push_back({"latent_timestep", Tensor::from_f32({1}, {(float)ts[0]})});
    } else {
        res.intermediates.push_back({"latents_init", init});  // the seeded noise (or the given one), NCHW
        if (p.kontext) {
            res.intermediates.push_back({"img_ids", in["img_ids"]});
            res.intermediates.push_back({"initial_latents", initial_latents});
        }
    }
    if (p.family->packed_2x2) res.intermediates.push_back({"text_ids", in["txt_ids"]});
    if (p.img2img)  // the loop's (after the strength's cut); timesteps_all and sigmas were kept before it
        res.intermediates.push_back(
            {"timesteps", Tensor::from_f32({(int64_t)ts.size()}, std::vector<float>(ts.begin(), ts.end()))});
    else
        keep_schedule(sched, res);
}

}  // namespace

void decode_images(LatentDecoder& vx, const std::vector<float>& z, const Shape& nchw, bool keep, GenerateResult& res,
                   const char* input_name) {
    auto t_dec = Clock::now();
    if (keep)
        res.intermediates.push_back({input_name ? input_name : "final_latents_scaled", Tensor::from_f32(nchw, z)});
    Tensor dec = vx.decode(Tensor::from_f32(nchw, z));  // [B, 3, H, W]
    if (keep) res.intermediates.push_back({"decoded", dec});
    const int64_t B = dec.shape[0];
    const int OCH = (int)dec.shape[1], H = (int)dec.shape[2], W = (int)dec.shape[3];
    res.image = Tensor(DType::f32, {B, H, W, OCH});
    for (int64_t b = 0; b < B; ++b)
        for (int c = 0; c < OCH; ++c)
            for (int y = 0; y < H; ++y)
                for (int xx = 0; xx < W; ++xx) {
                    const float v = dec.data<float>()[(((size_t)b * OCH + c) * H + y) * W + xx] * 0.5f + 0.5f;
                    res.image.data<float>()[(((size_t)b * H + y) * W + xx) * OCH + c] = std::min(1.f, std::max(0.f, v));
                }
    if (keep) res.intermediates.push_back({"image", res.image});
    res.decode_ms = ms_since(t_dec);
}

TextConditioning TextConditioning::read(const SafeTensors& st) {
    TextConditioning t;
    Tensor* slots[] = {&t.prompt_embeds,         &t.negative_prompt_embeds,
                       &t.pooled_prompt_embeds,  &t.negative_pooled_prompt_embeds,
                       &t.prompt_attention_mask, &t.negative_prompt_attention_mask};
    for (size_t i = 0; i < 6; ++i)
        if (st.find(kConditioningNames[i])) *slots[i] = st.read(kConditioningNames[i]);
    return t;
}

TextConditioning TextConditioning::from(const std::map<std::string, Tensor>& named) {
    TextConditioning t;
    Tensor* slots[] = {&t.prompt_embeds,         &t.negative_prompt_embeds,
                       &t.pooled_prompt_embeds,  &t.negative_pooled_prompt_embeds,
                       &t.prompt_attention_mask, &t.negative_prompt_attention_mask};
    for (size_t i = 0; i < 6; ++i)
        if (auto it = named.find(kConditioningNames[i]); it != named.end()) *slots[i] = it->second;
    return t;
}

std::vector<std::pair<std::string, Tensor>> TextConditioning::named() const {
    const Tensor* slots[] = {&prompt_embeds,         &negative_prompt_embeds,
                             &pooled_prompt_embeds,  &negative_pooled_prompt_embeds,
                             &prompt_attention_mask, &negative_prompt_attention_mask};
    std::vector<std::pair<std::string, Tensor>> out;
    for (size_t i = 0; i < 6; ++i)
        if (present(*slots[i])) out.push_back({kConditioningNames[i], *slots[i]});
    return out;
}

TextConditioning TextConditioning::repeat_each(int n) const {
    KILN_CHECK(n >= 1, "images per prompt is ", n, " (at least 1)");
    if (!present(prompt_embeds) || prompt_embeds.shape.empty()) return *this;  // generate_t2i says what is missing
    const int64_t B = prompt_embeds.shape[0];
    TextConditioning out = *this;
    for (Tensor* t :
         {&out.prompt_embeds, &out.negative_prompt_embeds, &out.pooled_prompt_embeds,
          &out.negative_pooled_prompt_embeds, &out.prompt_attention_mask, &out.negative_prompt_attention_mask}) {
        if (!present(*t) || t->shape.empty() || t->shape[0] != B || n == 1) continue;
        const size_t row = t->nbytes() / (size_t)B;
        Shape s = t->shape;
        s[0] = B * n;
        Tensor r(t->dtype, s);
        for (int64_t b = 0; b < B; ++b)
            for (int k = 0; k < n; ++k)
                std::memcpy(r.bytes.data() + ((size_t)b * n + k) * row, t->bytes.data() + (size_t)b * row, row);
        *t = std::move(r);
    }
    return out;
}

Tensor initial_noise(const T2IOptions& opt, const Shape& shape, TorchCpuGenerator& gen) {
    if (opt.latents_init) return opt.latents_init->astype(DType::f32);
    if (auto it = opt.inputs.noise.find("noise"); it != opt.inputs.noise.end())
        return it->second.astype(DType::f32);  // --noise: the draw by name
    Tensor t(DType::f32, shape);
    gen.randn(t.data<float>(), t.numel(), opt.noise_dtype);
    return t;
}

VaeOptions vae_options(const T2IOptions& opt) {
    VaeOptions vo;
    vo.tiled = opt.tiled_vae;
    vo.tile_sample_size = opt.vae_tile_size;
    vo.mode = opt.mode == exec::Mode::eager ? exec::Mode::eager : exec::Mode::full;
    return vo;
}

namespace {
// Flux Kontext: the reference image's tokens (returned), their ids appended to img_ids.
std::vector<float> kontext_tokens(LatentDecoder& vx, const T2IOptions& opt, const T2IPlan& p, int64_t B,
                                  std::map<std::string, Tensor>& in,
                                  std::vector<std::pair<std::string, Tensor>>* dump) {
    Tensor ref_ids;
    std::vector<float> ref = kontext_reference(vx.kl(), opt, p, B, ref_ids, dump);
    Tensor& img = in["img_ids"];
    Tensor ids(DType::f32, {img.shape[0] + ref_ids.shape[0], 3});
    std::memcpy(ids.bytes.data(), img.bytes.data(), img.nbytes());
    std::memcpy(ids.bytes.data() + img.nbytes(), ref_ids.bytes.data(), ref_ids.nbytes());
    img = std::move(ids);
    return ref;
}
}  // namespace

GenerateResult generate_t2i(vk::Context& ctx, const ModelSource& src, const T2IOptions& opt) {
    GenerateResult res;
    auto t_plan = Clock::now();
    const T2IPlan p = plan_t2i(src, opt);
    for (const auto& w : p.warnings) std::fprintf(stderr, "kiln: warning: %s\n", w.c_str());
    const Family& f = *p.family;
    if (f.z_image_loop) return generate_z_image(ctx, src, opt, p, ms_since(t_plan));
    KILN_CHECK(opt.images_per_prompt >= 1, "images per prompt is ", opt.images_per_prompt, " (at least 1)");
    const TextConditioning tx = opt.images_per_prompt > 1 ? opt.text.repeat_each(opt.images_per_prompt) : opt.text;
    const LatentSpace vc = latent_space(src);

    // ---- Conditioning: the guidance batch cat([negative, prompt]) when cfg.
    KILN_CHECK(present(tx.prompt_embeds) && tx.prompt_embeds.shape.size() == 3, p.pipeline,
               ": prompt_embeds must be [B, L, D], got ",
               present(tx.prompt_embeds) ? shape_str(tx.prompt_embeds.shape) : "none");
    const int64_t B = tx.prompt_embeds.shape[0];
    const int BB = (int)(p.cfg ? 2 * B : B);
    std::map<std::string, Tensor> in = conditioning_inputs(src, p, tx, B, BB);
    if (f.scaled_guidance_input) in["guidance"] = sana_guidance_input(src, p.guidance, BB);

    // ---- Latents: [B, C, h, w] noise * init_noise_sigma; Flux packs them 2x2 into [B, S, 4C].
    const int C = p.latent_channels, h = p.latent_h, w = p.latent_w;
    const Shape nchw{B, C, h, w}, noise_shape = t2i_noise_shape(p, B);  // klein's is 2x2-patchified
    // One generator, as diffusers' `generator`: the initial latents (unless given), then every step's noise where
    // the scheduler draws one (DDIM with eta > 0: randn_tensor(model_output.shape), in the pipeline's dtype).
    // Images in: the image's VAE sample, then the noise (t2i_images.h), after the schedule that gives their sigma.
    TorchCpuGenerator gen(opt.seed);
    Tensor init;
    auto sched = make_t2i_scheduler(src, opt);
    if (p.eta > 0) sched->set_eta(p.eta);
    LatentDecoder vx(&ctx, src, vae_options(opt));
    std::vector<std::pair<std::string, Tensor>> image_dump;
    ImageLatents il;
    if (p.img2img) {
        set_schedule(*sched, src, opt, p);
        if (opt.keep_intermediates) keep_schedule(*sched, res, "timesteps_all");
        sched->set_begin_index(p.t_start);  // diffusers' get_timesteps: timesteps[t_start:], set_begin_index
        il = prepare_image_latents(vx.kl(), opt, p, gen, B, (float)sched->sigmas()[0],
                                   opt.keep_intermediates ? &image_dump : nullptr);
        init = Tensor::from_f32(nchw, il.init);
    } else {
        init = initial_noise(opt, noise_shape, gen);
    }
    KILN_CHECK(init.shape == noise_shape, "initial latents have shape ", shape_str(init.shape), ", expected ",
               shape_str(noise_shape), " for ", B, " prompt(s) at ", p.width, "x", p.height,
               " (--no-resolution-binning)");
    std::vector<float> x(init.data<float>(), init.data<float>() + init.numel());
    Shape lat_shape = nchw;
    if (f.packed_2x2) {
        // Klein's _pack_latents flattens [B, 4C, h/2, w/2]: Flux's 2x2 packing of the unpatchified latents.
        x = f.patchified_noise ? channels_last(x, B, 4 * C, (h / 2) * (w / 2)) : pack_2x2(x.data(), (int)B, C, h, w);
        lat_shape = {B, (h / 2) * (w / 2), 4 * C};
        flux_inputs(in, p, tx.prompt_embeds.shape[1], BB);
        if (p.inpaint)  // the blend runs in the loop's layout
            for (auto* v : {&il.image_latents, &il.noise, &il.mask}) *v = pack_2x2(v->data(), (int)B, C, h, w);
    }
    std::vector<float> ref;  // Flux Kontext: the reference's tokens, joined to the sequence with their own ids
    if (p.kontext && p.ref_width)
        ref = kontext_tokens(vx, opt, p, B, in, opt.keep_intermediates ? &image_dump : nullptr);

    // ---- Timesteps; the steps' noise, drawn now in the order diffusers draws it (each step's after the previous
    // one's); the device loop holds all of it (steps x latents).
    if (!p.img2img) set_schedule(*sched, src, opt, p);
    auto step_noise = draw_step_noise(gen, *sched, (size_t)init.numel(), opt.noise_dtype);
    given_step_noise(step_noise, opt.inputs.noise, nchw);  // --noise: scm_noise_step{i} by name
    const double sigma0 = sched->init_noise_sigma();
    if (sigma0 != 1.0)
        for (float& v : x) v = v * (float)sigma0;

    // ---- Transformer(s) for the guidance batch, built once; VAE decoder for the batch.
    Shape model_shape = lat_shape;
    model_shape[0] = BB;
    if (p.fill) model_shape.back() += p.cond_channels;
    if (!ref.empty()) model_shape[1] += (int64_t)(ref.size() / (size_t)B) / model_shape[2];
    in["hidden_states"] = Tensor(DType::f32, model_shape);
    in["timestep"] = Tensor(DType::f32, {BB});
    auto fresh = std::make_unique<Transformers>();
    fresh->graphs(src, opt, p, in, tx, lat_shape);
    Transformers& t = resident_transformers(ctx, opt.keep_transformer, fresh, opt, res.transformer_reused);
    vx.prepare_decode(nchw);
    res.plan_ms = ms_since(t_plan);
    res.transformer_counters = t.x->counters();
    if (opt.keep_intermediates)
        keep_inputs(res, p, tx, in, *sched, std::move(image_dump), init, Tensor::from_f32(lat_shape, x));

    // ---- Denoising loop; then the latents for the VAE: latents / scaling_factor (+ shift_factor).
    const auto& ts = sched->timesteps();
    const size_t n_lat = x.size(), row_lat = n_lat / (size_t)B;
    // PixArt: the scheduler's (integer) timestep; SD3: t = sigma * 1000; Flux: t / 1000 (float32, as torch); Sana:
    // t * timestep_scale; Sana-Sprint: the SCM scheduler's trigflow timestep.
    const float t_scale = f.timestep_scale ? (float)src.config("transformer").value("timestep_scale", 1.0) : 1.f;
    const std::function<float(int)> timestep = [&](int i) {
        if (auto u = sched->transformer_timestep(i)) return *u;
        return f.timestep_fraction ? (float)ts[(size_t)i] / 1000.f : (float)ts[(size_t)i] * t_scale;
    };
    // Sana-Sprint decodes x0 / sigma_data / scaling_factor (final_latents_divisor: sigma_data).
    // Klein: no scaling; the VAE's BatchNorm statistics instead (klein_decode_input).
    const float sf = f.bn_latents ? 1.f : (float)(vc.scaling_factor * sched->final_latents_divisor());
    const float shift = f.bn_latents ? 0.f : (float)vc.shift_factor;
    std::vector<float> z;
    StepLoopSpec ls;
    ls.rows = (int)B;
    ls.row_lat = (uint32_t)row_lat;
    ls.row_out = (uint32_t)(t.x->device_range("sample").size / 4 / (VkDeviceSize)BB);
    ls.cfg = p.cfg;  // rows [0, B) negative, [B, 2B) prompt
    // A resident transformer's executor outlives this call: the loop's buffers in its allocator would add up.
    ls.own_memory = opt.keep_transformer != nullptr;
    ls.guidance = (float)p.cfg_scale;
    const Guide guide{p, src.class_of("transformer"), B, BB, row_lat, lat_shape};
    // Skip-layer guidance runs its second call between the transformer and the scheduler step: the host loop.
    // So does inpainting's blend after each step.
    res.device_loop = !t.slg && !p.inpaint && !p.fill && ref.empty() &&
                      use_device_loop(ctx.settings(), opt.host_loop) &&
                      (ls.row_out == row_lat || ls.row_out == 2 * row_lat) && StepProgram::supported(*t.x, ls);
    if (res.device_loop) {
        z = denoise_on_device(ctx, t, *sched, x, guide, ls, opt, step_noise, timestep, res, [&](StepProgram& prog) {
            return f.vae_shift ? prog.latents(2, sf, shift) : prog.latents(1, sf);
        });
        if (f.bn_latents)
            z = klein_decode_input(vx, z, lat_shape, h, w);
        else if (f.packed_2x2)
            z = unpack_2x2(z.data(), (int)B, C, h, w);
    } else {
        std::function<void(int, std::vector<float>&)> blend;
        if (p.inpaint)
            blend = [&](int i, std::vector<float>& lat) {
                std::vector<float> proper;
                if (opt.keep_intermediates)
                    res.intermediates.push_back(
                        {"step" + std::to_string(i) + "_prev_sample", Tensor::from_f32(lat_shape, lat)});
                const float sigma = (float)sched->sigmas()[(size_t)i + 1];
                blend_inpaint(lat, il.image_latents, il.noise, il.mask, sigma,
                              opt.keep_intermediates ? &proper : nullptr);
                if (opt.keep_intermediates && i + 1 < (int)ts.size())
                    res.intermediates.push_back(
                        {"step" + std::to_string(i) + "_init_latents_proper", Tensor::from_f32(lat_shape, proper)});
            };
        x = denoise_on_host(t, *sched, std::move(x), guide, opt, step_noise, timestep, res, blend, il.cond, ref);
        z = f.bn_latents   ? klein_decode_input(vx, x, lat_shape, h, w)
            : f.packed_2x2 ? unpack_2x2(x.data(), (int)B, C, h, w)
                           : x;
        for (auto& v : z) v = f.vae_shift ? v / sf + shift : v / sf;
    }
    decode_images(vx, z, nchw, opt.keep_intermediates, res, f.bn_latents ? "final_latents_unpatchified" : nullptr);
    return res;
}

}  // namespace kiln::models
