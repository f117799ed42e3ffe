// Text-to-image pipelines: the call as resolved from the model and the options (plan_t2i), before any heavy work.
// What differs between the families comes from their registry descriptors (models/registry/registry.h).
#include <cmath>
#include <tuple>

#include "models/core/common.h"
#include "models/core/component_ops.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/registry/registry.h"
#include "models/transformers/pixart.h"
#include "models/vae/t2i_decoder.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Side of the aspect-ratio-1 entry of the family's ASPECT_RATIO_*_BIN for the transformer's sample_size (PixArt
// 32 -> 256 px ... 256 -> 2048 px; Sana 16 -> 512 px ... 128 -> 4096 px); 0 where the family has no table.
int bin_side(const Family& f, int sample_size, int vae_scale_factor) {
    for (int s : f.bin_sample_sizes)
        if (s == sample_size) return s * vae_scale_factor;
    return 0;
}

// What the plan reads from the transformer's config (component_ops.h).
TransformerShape transformer_shape(ComponentKind kind, const nlohmann::json& cfg) {
    const ComponentOps* ops = find_component_ops(kind);
    KILN_CHECK(ops && ops->plan_shape, "internal: ", class_name(kind), " is not a text-to-image transformer");
    return ops->plan_shape(cfg);
}

// The family's defaults, the latent layout and the size multiple; returns the default sample size (latent side).
int plan_latents(const ModelSource& src, const Family& f, T2IPlan& p, TransformerShape& ts, int& multiple) {
    const LatentSpace vc = latent_space(src);  // AutoencoderKL or AutoencoderDC
    p.vae_scale_factor = vc.scale_factor;
    ts = transformer_shape(f.transformer, src.config("transformer"));
    if (f.packed_2x2 && f.fill_pipeline && ts.out_channels && ts.in_channels > ts.out_channels) {
        // Flux Fill: out_channels = 4 C; in_channels adds the packed masked-image latents (4 C) and the packed mask
        // (4 f^2: the f x f pixels of each latent, for each of the 2x2 latents of a token).
        p.fill = true;
        p.latent_channels = ts.out_channels / 4;
        p.token_patch = 2;
        p.cond_channels = ts.in_channels - ts.out_channels;
        const int expected = ts.out_channels + 4 * p.vae_scale_factor * p.vae_scale_factor;
        KILN_CHECK(p.cond_channels == expected, f.fill_pipeline, ": in_channels ", ts.in_channels, " is not ",
                   ts.out_channels, " + ", expected, " (latents, masked-image latents, mask of a ", p.vae_scale_factor,
                   "x VAE)");
    } else if (f.packed_2x2) {
        KILN_CHECK(ts.in_channels % 4 == 0, f.name, ": in_channels ", ts.in_channels, " is not 4 x latent channels");
        p.latent_channels = ts.in_channels / 4;
        p.token_patch = 2;
    } else {
        p.latent_channels = ts.in_channels;
        p.token_patch = ts.patch;
    }
    multiple = p.vae_scale_factor * p.token_patch;
    p.steps = f.steps, p.guidance = p.fill ? f.fill_guidance : f.guidance;
    if (f.default_size_pixels) return f.default_size_pixels / p.vae_scale_factor;
    KILN_CHECK(vc.channels == p.latent_channels, src.path(), ": the VAE has ", vc.channels,
               " latent channels, the transformer ", p.latent_channels);
    // FLUX.2's transformer works in the BatchNorm-normalised latent space of AutoencoderKLFlux2: a Flux.1 VAE of the
    // same channel count would decode without error into the wrong image.
    const ComponentClass* vk = find_component_class(src.class_of("vae"));
    const bool bn = vk && vk->kind == ComponentKind::vae_flux2;
    KILN_CHECK(bn == f.bn_latents, src.path(), ": ", f.pipelines[0].name, " decodes with ",
               f.bn_latents ? class_name(ComponentKind::vae_flux2) : "its own VAE", ", this vae is ",
               src.class_of("vae"),
               f.bn_latents ? " (a FLUX.1 VAE? FLUX.2 [klein] needs its own, with the latent BatchNorm statistics)"
                            : " (FLUX.2's VAE: its latents are not this pipeline's)");
    return f.default_sample_size ? f.default_sample_size : ts.sample_size;
}

// Custom timesteps or sigmas (diffusers' retrieve_timesteps(timesteps= or sigmas=)): the step count is theirs.
void plan_custom_schedule(const ModelSource& src, const T2IOptions& opt, const Family& f, T2IPlan& p) {
    KILN_CHECK(
        opt.timesteps.empty() || opt.sigmas.empty(),
        "give custom timesteps or sigmas, not both (diffusers: only one of `timesteps` or `sigmas` can be passed)");
    if (opt.timesteps.empty() && opt.sigmas.empty()) return;
    for (size_t i = 0; i < opt.sigmas.size(); ++i)
        check_float(FloatOption::sigma, opt.sigmas[i], "sigmas[" + std::to_string(i) + "]");
    for (size_t i = 0; i < opt.timesteps.size(); ++i)
        check_float(FloatOption::timestep, opt.timesteps[i], "timesteps[" + std::to_string(i) + "]");
    const char* what = opt.timesteps.empty() ? "sigmas" : "timesteps";
    int n = 0;
    if (f.flow_matching) {
        KILN_CHECK(opt.timesteps.empty() || f.custom_timesteps, p.pipeline, ": custom timesteps apply to ",
                   family_with(&Family::custom_timesteps).name, "; diffusers' ", p.pipeline, " takes custom sigmas");
        for (size_t i = 0; i < opt.sigmas.size(); ++i)
            KILN_CHECK(opt.sigmas[i] <= 1, "sigmas[", i, "] is ", opt.sigmas[i],
                       " (flow-matching sigmas lie in [0, 1])");
        n = (int)opt.sigmas.size();
    } else {
        // The scheduler decides (DPM-Solver takes timesteps, Euler both, DDIM neither), as diffusers'
        // retrieve_timesteps asks set_timesteps; planned here so that a bad list stops before any work.
        auto sched = make_t2i_scheduler(src, opt);
        try {
            if (!opt.timesteps.empty())
                sched->set_custom_timesteps(opt.timesteps);
            else
                sched->set_sigmas(opt.sigmas);
        } catch (const Error& e) {
            KILN_FAIL(p.pipeline, ": ", e.what());
        }
        n = sched->num_inference_steps();
    }
    const size_t given = opt.timesteps.empty() ? opt.sigmas.size() : opt.timesteps.size();
    KILN_CHECK(
        !opt.steps || *opt.steps == n, "steps ", *opt.steps, " but ", given, " ", what,
        given == (size_t)n ? "" : ", which make " + std::to_string(n) + " steps (the last sigma ends the schedule)",
        " (give one or the other: the ", what, " set the step count)");
    p.steps = n;
}

// Image and latent size: the default, rounding (Flux) or the multiple check, resolution binning's warning.
void plan_size(const T2IOptions& opt, const Family& f, int sample, int multiple, T2IPlan& p) {
    p.height = opt.height.value_or(sample * p.vae_scale_factor);
    p.width = opt.width.value_or(sample * p.vae_scale_factor);
    KILN_CHECK(p.height > 0 && p.width > 0, "image size ", p.width, "x", p.height, " must be positive");
    if (p.kontext) {
        // FluxKontextPipeline: only the aspect of height / width counts; the size is max_area's, each side
        // round()ed (Python: half to even) and floored to the multiple.
        const double area = (double)opt.inputs.max_area.value_or(1024 * 1024), ar = (double)p.width / p.height;
        KILN_CHECK(area >= 1, "max_area ", area, " must be positive");
        const int w = (int)std::nearbyint(std::sqrt(area * ar)) / multiple * multiple;
        const int h = (int)std::nearbyint(std::sqrt(area / ar)) / multiple * multiple;
        KILN_CHECK(w > 0 && h > 0, p.pipeline, ": max_area ", area, " gives no ", multiple, "-pixel multiple");
        if (w != p.width || h != p.height)
            p.warnings.push_back(p.pipeline + ": generating at " + std::to_string(w) + "x" + std::to_string(h) +
                                 " (max_area " + std::to_string((int64_t)area) + " at the aspect of " +
                                 std::to_string(p.width) + "x" + std::to_string(p.height) + "), as diffusers does");
        p.width = w, p.height = h;
    }
    if (f.round_size_down && (p.height % multiple || p.width % multiple)) {
        // diffusers' Flux pipeline warns and generates at the multiples below (prepare_latents' 2 * (h // 16)); the
        // other pipelines raise.
        const int h = p.height / multiple * multiple, w = p.width / multiple * multiple;
        KILN_CHECK(h > 0 && w > 0, p.pipeline, ": width and height must be at least ", multiple, ", got ", p.width, "x",
                   p.height);
        p.warnings.push_back(p.pipeline + ": width and height have to be divisible by " + std::to_string(multiple) +
                             " but are " + std::to_string(p.width) + "x" + std::to_string(p.height) +
                             "; generating at " + std::to_string(w) + "x" + std::to_string(h) + ", as diffusers does");
        p.height = h, p.width = w;
    }
    KILN_CHECK(p.height % multiple == 0 && p.width % multiple == 0, p.pipeline, ": width and height must be multiples ",
               "of ", multiple, " (vae_scale_factor ", p.vae_scale_factor, " x ",
               f.packed_2x2 ? "2 (2x2 packing)" : "patch size", "), got ", p.width, "x", p.height,
               " (--no-resolution-binning)");
    if (f.resolution_binning && opt.resolution_binning) {
        // diffusers maps (height, width) to the nearest entry of an aspect-ratio table and resizes the image back.
        // Its tables exist for sample_size 32, 64, 128 and 256 only (other sizes raise "Invalid sample size" there,
        // so such models are run without binning). At the square bin side binning is the identity; elsewhere Kiln
        // generates at the requested size and says so.
        const int side = bin_side(f, sample, p.vae_scale_factor);
        if (side && (p.height != side || p.width != side))
            p.warnings.push_back(p.pipeline + ": diffusers' resolution binning would generate at the nearest " +
                                 "aspect-ratio bin and resize to " + std::to_string(p.width) + "x" +
                                 std::to_string(p.height) + "; Kiln generates at that size directly " +
                                 "(--no-resolution-binning silences this)");
    }
    p.latent_h = p.height / p.vae_scale_factor;
    p.latent_w = p.width / p.vae_scale_factor;
}

// Classifier-free guidance (Flux: true CFG on top of the embedded guidance) and SD3's skip-layer guidance.
void plan_guidance(const T2IOptions& opt, const Family& f, int layers, bool distilled, T2IPlan& p) {
    KILN_CHECK(!opt.true_cfg_scale || f.true_cfg, p.pipeline, ": true_cfg_scale applies to ",
               family_with(&Family::true_cfg).pipelines[0].name,
               " (this pipeline's classifier-free guidance scale is guidance)");
    if (f.conditioning == Conditioning::embedded) {
        p.cfg_scale = opt.true_cfg_scale.value_or(1.0);
        check_float(FloatOption::true_cfg_scale, p.cfg_scale);
    } else {
        p.cfg_scale = p.guidance;
    }
    // Z-Image guides whenever guidance > 0 (its formula is pos + g (pos - neg)); the others above 1. A distilled
    // klein (model_index.json is_distilled) never does, whatever the guidance, as diffusers (with a warning).
    p.cfg = f.z_image_loop ? p.cfg_scale > 0.0 : p.cfg_scale > 1.0;
    if (p.cfg && f.distilled_flag && distilled) {
        p.cfg = false;
        p.warnings.push_back(p.pipeline + ": guidance " + std::to_string(p.guidance) +
                             " is ignored for step-wise distilled models (model_index.json is_distilled), as in "
                             "diffusers");
    }
    // Z-Image's cfg_truncation and cfg_normalization: T2IOptions' defaults (1, 0) mean neither is asked for.
    check_float(FloatOption::cfg_truncation, opt.cfg_truncation);
    check_float(FloatOption::cfg_normalization, opt.cfg_normalization);
    const char* zi = family_with(&Family::z_image_loop).pipelines[0].name;
    KILN_CHECK(f.z_image_loop || opt.cfg_truncation == 1.0, p.pipeline, ": cfg_truncation applies to ", zi, " (",
               p.pipeline, "'s __call__ has none)");
    KILN_CHECK(f.z_image_loop || opt.cfg_normalization == 0.0, p.pipeline, ": cfg_normalization applies to ", zi, " (",
               p.pipeline, "'s __call__ has none)");
    if (opt.skip_guidance_layers.empty()) return;
    KILN_CHECK(f.skip_layer_guidance, p.pipeline, ": skip-layer guidance (skip_guidance_layers) applies to ",
               family_with(&Family::skip_layer_guidance).pipelines[0].name);
    for (int i : opt.skip_guidance_layers)
        KILN_CHECK(i >= 0 && i < layers, "skip_guidance_layers: ", i, " is not a block of this transformer (0..",
                   layers - 1, ")");
    check_float(FloatOption::skip_layer_guidance_scale, opt.skip_layer_guidance_scale);
    check_float(FloatOption::skip_layer_guidance_start, opt.skip_layer_guidance_start);
    check_float(FloatOption::skip_layer_guidance_stop, opt.skip_layer_guidance_stop);
    if (!p.cfg) {  // diffusers computes it inside `if do_classifier_free_guidance`
        p.warnings.push_back(
            "skip-layer guidance runs only with classifier-free guidance (guidance > 1), as in "
            "diffusers: skip_guidance_layers ignored");
    } else {
        // diffusers: i > num_inference_steps * start and i < num_inference_steps * stop (Python floats).
        for (int i = 0; i < p.steps; ++i)
            if (i > p.steps * opt.skip_layer_guidance_start && i < p.steps * opt.skip_layer_guidance_stop)
                p.slg_steps.push_back(i);
    }
}

// Images in: which pipeline, the strength and its cut of the schedule; the image and mask sizes. All before any
// model work.
void plan_images(const T2IOptions& opt, const Family& f, T2IPlan& p) {
    const ImageInputs& in = opt.inputs;
    KILN_CHECK((!in.max_area && in.auto_resize) || p.kontext, p.pipeline,
               ": max_area and auto_resize apply to Flux Kontext (a model_index.json naming FluxKontextPipeline)");
    if (p.kontext) {
        KILN_CHECK(!in.has_mask(), p.pipeline, " cannot inpaint: it edits the whole image (no mask)");
        KILN_CHECK(!in.strength, p.pipeline, ": strength does not apply (the reference image is not noised)");
        if (!in.has_image()) return;
        // The reference: its size floored to the multiple, or with auto_resize the preferred resolution nearest its
        // aspect (min of (|aspect - w/h|, w, h)), floored. A preprocessed tensor is taken at its size.
        const int m = 2 * p.vae_scale_factor;
        const bool tensor = !in.image_tensor.bytes.empty();
        KILN_CHECK(!tensor || in.image_tensor.shape.size() == 4, "image tensor: expected [1, 3, H, W], got ",
                   shape_str(in.image_tensor.shape));
        int iw = tensor ? (int)in.image_tensor.shape[3] : in.image.width / m * m;
        int ih = tensor ? (int)in.image_tensor.shape[2] : in.image.height / m * m;
        KILN_CHECK(iw > 0 && ih > 0, p.pipeline, ": the reference image is smaller than ", m, "x", m);
        if (in.auto_resize && !tensor) {
            const double ar = (double)iw / ih;
            std::tuple<double, int, int> best{1e300, 0, 0};
            for (auto [w, h] : f.kontext_resolutions) best = std::min(best, {std::abs(ar - (double)w / h), w, h});
            iw = std::get<1>(best), ih = std::get<2>(best);
        }
        p.ref_width = iw / m * m, p.ref_height = ih / m * m;
        KILN_CHECK(!tensor || (p.ref_width == iw && p.ref_height == ih), p.pipeline, ": the image tensor is ", iw, "x",
                   ih, ", not a multiple of ", m);
        return;
    }
    if (p.fill) {
        KILN_CHECK(in.has_image() && in.has_mask(), f.fill_pipeline, " (this transformer takes ", p.cond_channels,
                   " conditioning channels) needs an image and a mask");
        p.pipeline = f.fill_pipeline;
        KILN_CHECK(!p.cfg, p.pipeline, " has no true_cfg_scale (its guidance is embedded: --guidance)");
    }
    if (!in.has_image() && !in.has_mask()) {
        bool image_draws = false;  // the per-step draws (scm_noise_step{i}) are the scheduler's, not the image's
        for (const auto& [name, t] : in.noise) image_draws |= name.rfind("scm_noise_step", 0) != 0;
        KILN_CHECK(!in.strength && !image_draws, p.pipeline, ": strength and noise draws apply with an image");
        return;
    }
    if (in.has_mask())
        KILN_CHECK(f.inpaint_pipeline, p.pipeline, " cannot inpaint: diffusers has no inpainting pipeline for ", f.name,
                   " (a mask applies to Stable Diffusion 3 and Flux)");
    KILN_CHECK(f.img2img_pipeline, p.pipeline, ": diffusers has no image-to-image pipeline for ", f.name,
               " (an image applies to Stable Diffusion 3 and Flux)");
    KILN_CHECK(in.has_image(), p.pipeline, ": a mask needs the image it masks");
    p.img2img = true;
    p.inpaint = in.has_mask() && !p.fill;  // Fill conditions on the mask instead of blending
    if (!p.fill) p.pipeline = p.inpaint ? f.inpaint_pipeline : f.img2img_pipeline;
    p.strength = in.strength.value_or(p.fill ? f.fill_strength : f.default_strength);
    check_float(FloatOption::strength, p.strength);
    auto size = [](const Pixels& px, const Tensor& t) {
        return t.bytes.empty() ? std::pair<int64_t, int64_t>(px.width, px.height)
                               : std::pair<int64_t, int64_t>(t.shape.size() == 4 ? t.shape[3] : 0,
                                                             t.shape.size() == 4 ? t.shape[2] : 0);
    };
    const auto [iw, ih] = size(in.image, in.image_tensor);
    KILN_CHECK(iw > 0 && ih > 0, "the image has no pixels");
    if (p.inpaint) {
        const auto [mw, mh] = size(in.mask, in.mask_tensor);
        KILN_CHECK(mw == iw && mh == ih, "the mask is ", mw, "x", mh, ", the image ", iw, "x", ih,
                   " (they must be the same size)");
    }
    for (const auto& [name, t] : in.noise)
        KILN_CHECK(name == "noise" || name == "image_vae_sample_noise" || name == "masked_image_vae_sample_noise",
                   "noise: '", name, "' is not a draw of ", p.pipeline,
                   " (noise, image_vae_sample_noise, masked_image_vae_sample_noise)");
    p.t_start = strength_t_start(p.steps, p.strength);
    KILN_CHECK(p.t_start < p.steps, p.pipeline, ": strength ", p.strength, " with ", p.steps,
               " steps leaves no step (diffusers raises: the number of inference steps would be < 1)");
}

void plan_eta(const ModelSource& src, const T2IOptions& opt, const Family& f, T2IPlan& p) {
    check_float(FloatOption::eta, opt.eta);
    if (opt.eta <= 0) return;
    KILN_CHECK(f.eta, p.pipeline, ": eta applies to the ", family_with(&Family::eta).name, " pipelines (diffusers' ",
               p.pipeline, " takes none)");
    // diffusers' prepare_extra_step_kwargs passes eta only to a scheduler whose step() takes it (DDIM).
    auto sched = make_t2i_scheduler(src, opt);
    if (sched->takes_eta())
        p.eta = opt.eta;
    else
        p.warnings.push_back("eta applies to DDIMScheduler; " + sched->name() +
                             " ignores it, as in diffusers (--scheduler ddim)");
}
}  // namespace

Shape t2i_noise_shape(const T2IPlan& p, int64_t B) {
    if (p.family && p.family->patchified_noise) return {B, 4 * p.latent_channels, p.latent_h / 2, p.latent_w / 2};
    return {B, p.latent_channels, p.latent_h, p.latent_w};
}

std::optional<double> schedule_mu(const ModelSource& src, const T2IOptions& opt, const T2IPlan& p) {
    const Family& f = *p.family;
    // with the caller's overrides, as diffusers' pipelines read the overridden scheduler.config
    const nlohmann::json scfg = sched::with_overrides(src.config("scheduler"), opt.scheduler_config);
    if (!f.flow_matching || !scfg.value("use_dynamic_shifting", false)) return std::nullopt;
    const int64_t seq = (int64_t)(p.latent_h / p.token_patch) * (p.latent_w / p.token_patch);
    if (f.empirical_mu) return sched::empirical_mu(seq, p.steps);
    return sched::calculate_shift(seq, scfg.value("base_image_seq_len", 256), scfg.value("max_image_seq_len", 4096),
                                  scfg.value("base_shift", 0.5), scfg.value("max_shift", f.max_shift_default));
}

std::unique_ptr<sched::Scheduler> make_t2i_scheduler(const ModelSource& src, const T2IOptions& opt) {
    return sched::make_scheduler(src.config("scheduler"), opt.scheduler, opt.scheduler_config);
}

std::string t2i_pipeline_class(const ModelSource& src) {
    const auto& mi = src.model_index();
    if (mi.is_object() && mi.contains("_class_name") && mi["_class_name"].is_string()) {
        std::string c = mi["_class_name"];
        const Family* f = find_pipeline_family(c);
        if (f && f->text_to_image()) return c;
    }
    const Family* f = model_family(src);
    if (!f || !f->text_to_image()) return "";
    // PixArt: the transformer's micro-conditions (resolution, aspect ratio) make it PixArt-α.
    const bool micro = f->transformer == ComponentKind::pixart &&
                       PixArtConfig::from_json(src.config("transformer")).use_additional_conditions;
    return pipeline_for(*f, micro).name;
}

T2IPlan plan_t2i(const ModelSource& src, const T2IOptions& opt) {
    T2IPlan p;
    p.pipeline = t2i_pipeline_class(src);
    KILN_CHECK(
        !p.pipeline.empty(), src.path(), ": not a text-to-image model (transformer ",
        src.has("transformer") ? src.class_of("transformer") : std::string("missing"),
        "); supported: PixArt-alpha/Sigma, Stable Diffusion 3, Flux, Sana, Sana-Sprint, Z-Image, FLUX.2 [klein]");
    p.family = find_pipeline_family(p.pipeline);
    const Family& f = *p.family;
    KILN_CHECK(src.has("transformer") && src.has("vae") && src.has("scheduler"), src.path(), ": a ", p.pipeline,
               " needs transformer, vae and scheduler components");
    TransformerShape ts;
    int multiple = 0;
    const int sample = plan_latents(src, f, p, ts, multiple);
    p.kontext = f.kontext_pipeline && p.pipeline == f.kontext_pipeline;
    if (opt.steps) p.steps = *opt.steps;
    plan_custom_schedule(src, opt, f, p);
    if (opt.guidance) p.guidance = *opt.guidance;
    check_float(FloatOption::guidance, p.guidance);
    KILN_CHECK(p.steps >= 1 && p.steps <= 1000, "steps must be in 1..1000, got ", p.steps);
    plan_size(opt, f, sample, multiple, p);
    const int64_t prompts = opt.text.prompt_embeds.shape.size() == 3 ? opt.text.prompt_embeds.shape[0] : 1;
    check_host_memory(p.pipeline, prompts * std::max(1, opt.images_per_prompt), p.latent_channels, p.latent_h,
                      p.latent_w, p.height, p.width);
    const auto& mi = src.model_index();
    const bool distilled = mi.is_object() && mi.contains("is_distilled") && mi["is_distilled"].is_boolean() &&
                           mi["is_distilled"].get<bool>();
    plan_guidance(opt, f, ts.layers, distilled, p);
    plan_eta(src, opt, f, p);
    plan_images(opt, f, p);
    return p;
}

}  // namespace kiln::models
