#include "apps/kiln/generate_capi.h"

#include <cstring>

#include "apps/kiln/generate_params.h"
#include "runtime/core/error.h"

namespace kiln::app {

std::string device_name(kiln_context* ctx) {
    kiln_device_info d = KILN_DEVICE_INFO_INIT;
    capi_check(kiln_context_get_device(ctx, &d));
    return d.name;
}

namespace {

kiln_jit_mode jit_mode(exec::Mode m) {
    return m == exec::Mode::eager ? KILN_JIT_EAGER : m == exec::Mode::full ? KILN_JIT_FULL : KILN_JIT_REGIONAL;
}

// The options every pipeline shares, as kiln_generate_params holds them (strings and latents owned by `store`).
struct CommonStore {
    std::string scheduler_config;
    Tensor latents;
};
void set_common(kiln_generate_params& p, const models::CommonOptions& c, CommonStore& store) {
    p.seed = c.seed;
    p.noise_dtype = dtype_name(c.noise_dtype);
    if (!c.scheduler.empty()) p.scheduler = c.scheduler.c_str();
    store.scheduler_config = c.scheduler_config.empty() ? "" : c.scheduler_config.dump();
    if (!store.scheduler_config.empty()) p.scheduler_config = store.scheduler_config.c_str();
    p.jit_mode = jit_mode(c.mode);
    if (c.latents_init) {  // float32, as the C API takes them
        store.latents = c.latents_init->astype(DType::f32);
        p.latents = store.latents.data<float>();
        p.latents_shape = store.latents.shape.data();
        p.latents_ndim = (int)store.latents.shape.size();
    }
    p.vae_tiling = c.tiled_vae;
    p.vae_tile_size = c.vae_tile_size;
    p.host_loop = c.host_loop;
}

// The two kiln_generate calls (size query, then into a buffer sized by it), with Ctrl-C as cancel and the
// result as the C++ pipeline gives it.
models::GenerateResult run(kiln_model* m, kiln_generate_params& p, bool keep_intermediates,
                           const std::function<void(int, int)>& on_step, kiln_generate_stats& stats) {
    auto progress = [](int step, int total, void* user) {
        auto* fn = static_cast<const std::function<void(int, int)>*>(user);
        if (interrupted()) return 1;  // Ctrl-C: KILN_CANCELLED at this step boundary
        if (step > 0 && *fn) (*fn)(step, total);
        return 0;
    };
    p.progress = progress;
    p.progress_user = const_cast<std::function<void(int, int)>*>(&on_step);
    p.stats = &stats;
    kiln_result* inter = nullptr;
    if (keep_intermediates) p.intermediates = &inter;

    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    capi_check(kiln_generate(m, &p, &img));  // the size query
    models::GenerateResult r;
    r.image = Tensor(DType::f32, {img.count, img.height, img.width, 3});
    img.data = r.image.bytes.data();
    img.capacity = r.image.nbytes();
    const kiln_status st = kiln_generate(m, &p, &img);
    KILN_CHECK(!(st == KILN_CANCELLED && interrupted()), "interrupted (Ctrl-C); nothing written");
    capi_check(st);
    ResultPtr owned(inter);
    for (int i = 0; i < kiln_result_count(inter); ++i) {
        kiln_tensor t;
        capi_check(kiln_result_get(inter, i, &t));
        r.intermediates.push_back({t.name, tensor_of(t)});
    }
    r.plan_ms = stats.plan_ms, r.denoise_ms = stats.denoise_ms, r.decode_ms = stats.decode_ms;
    r.device_loop = stats.device_loop != 0;
    r.denoise_host_ms = stats.denoise_host_ms, r.loop_plan_ms = stats.loop_plan_ms;
    r.transformer_counters.weight_bytes = stats.transformer_weight_bytes;
    r.transformer_counters.activation_bytes_planned = stats.transformer_activation_bytes;
    r.transformer_counters.device_bytes = stats.transformer_device_bytes;
    return r;
}

}  // namespace

models::GenerateResult generate_labels(kiln_context* ctx, const std::string& model, const models::GenerateOptions& g) {
    ModelPtr m = open_model(ctx, model);
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = g.labels.data();
    p.class_label_count = (int)g.labels.size();
    p.images_per_prompt = g.images_per_label;
    KILN_CHECK(g.steps >= 1, "--steps is ", g.steps, " (at least 1)");
    p.steps = g.steps;
    p.guidance = g.guidance == 0 ? 1.0 : g.guidance;  // 0 is no guidance here; the C API's 0 means the default
    CommonStore store;
    set_common(p, g, store);
    kiln_generate_stats stats = KILN_GENERATE_STATS_INIT;
    return run(m.get(), p, g.keep_intermediates, g.progress, stats);
}

models::GenerateResult generate_text(kiln_model* m, const models::T2IOptions& t, const TextRequest& q,
                                     kiln_generate_stats& stats) {
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    // The text lists as C arrays of the strings in q.
    std::vector<const char*> lists[6];
    auto list = [&](int k, const std::vector<std::string>& v, const char* const*& ptr, int& count) {
        for (auto& s : v) lists[k].push_back(s.c_str());
        ptr = lists[k].empty() ? nullptr : lists[k].data();
        count = (int)lists[k].size();
    };
    const models::PromptOptions& x = q.texts;
    list(0, x.prompts, p.prompts, p.prompt_count);
    list(1, x.negatives, p.negative_prompts, p.negative_prompt_count);
    list(2, x.prompts_2, p.prompts_2, p.prompt_2_count);
    list(3, x.prompts_3, p.prompts_3, p.prompt_3_count);
    list(4, x.negatives_2, p.negative_prompts_2, p.negative_prompt_2_count);
    list(5, x.negatives_3, p.negative_prompts_3, p.negative_prompt_3_count);
    p.max_sequence_length = x.max_sequence_length;
    p.clip_skip = x.clip_skip;
    p.complex_human_instruction = x.complex_human_instruction ? x.complex_human_instruction->c_str() : nullptr;
    p.keep_encoders = q.keep_encoders;
    p.images_per_prompt = t.images_per_prompt;
    // --prompt-embeds: the conditioning tensors as views (they outlive the call).
    std::vector<std::pair<std::string, Tensor>> named;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<kiln_tensor> views;
    if (x.prompts.empty()) {
        named = t.text.named();
        shapes.reserve(named.size());
        for (auto& [name, tensor] : named) {
            shapes.emplace_back(tensor.shape.begin(), tensor.shape.end());
            kiln_tensor v;
            v.name = name.c_str();
            v.dtype = c_dtype(tensor.dtype);
            v.ndim = (int)tensor.shape.size();
            v.shape = shapes.back().data();
            v.data = tensor.bytes.data();
            views.push_back(v);
        }
        p.prompt_embeds = views.data();
        p.prompt_embeds_count = (int)views.size();
    }
    if (t.width) p.width = *t.width;
    if (t.height) p.height = *t.height;
    p.no_resolution_binning = !t.resolution_binning;
    if (t.steps) p.steps = *t.steps;
    set_guidance(p, t, x);
    p.sigmas = t.sigmas.empty() ? nullptr : t.sigmas.data();
    p.sigma_count = (int)t.sigmas.size();
    p.timesteps = t.timesteps.empty() ? nullptr : t.timesteps.data();
    p.timestep_count = (int)t.timesteps.size();
    p.eta = t.eta;
    p.skip_guidance_layers = t.skip_guidance_layers.empty() ? nullptr : t.skip_guidance_layers.data();
    p.skip_guidance_layer_count = (int)t.skip_guidance_layers.size();
    p.skip_layer_guidance_scale = t.skip_layer_guidance_scale;
    p.skip_layer_guidance_start = t.skip_layer_guidance_start;
    p.skip_layer_guidance_stop = t.skip_layer_guidance_stop;
    std::vector<kiln_lora> loras;
    for (const models::LoraRequest& l : t.lora.files) loras.push_back({l.path.c_str(), l.scale});
    p.loras = loras.empty() ? nullptr : loras.data();
    p.lora_count = (int)loras.size();
    KILN_CHECK(t.lora.apply == "merge" || t.lora.apply == "runtime", "--lora-apply ", t.lora.apply,
               ": runtime or merge");
    p.lora_apply = t.lora.apply == "runtime" ? KILN_LORA_APPLY_RUNTIME : KILN_LORA_APPLY_MERGE;
    p.lora_allow_unmatched = t.lora.allow_unmatched;
    // Images in: pixels as RGBA8 kiln_images, tensors and draws as views (t outlives the call).
    const models::ImageInputs& in = t.inputs;
    kiln_image image = KILN_IMAGE_INIT, mask = KILN_IMAGE_INIT;
    auto pixels = [](const models::Pixels& px, kiln_image& im) {
        im.format = KILN_PIXELS_RGBA8;
        im.data = const_cast<uint8_t*>(px.rgba.data());
        im.capacity = px.rgba.size();
        im.width = px.width, im.height = px.height, im.count = 1;
        return &im;
    };
    if (!in.image.empty()) p.image = pixels(in.image, image);
    if (!in.mask.empty()) p.mask = pixels(in.mask, mask);
    std::vector<std::vector<int64_t>> in_shapes;
    in_shapes.reserve(2 + in.noise.size());
    auto view = [&](const char* name, const Tensor& tensor) {
        in_shapes.emplace_back(tensor.shape.begin(), tensor.shape.end());
        kiln_tensor v;
        v.name = name;
        v.dtype = c_dtype(tensor.dtype);
        v.ndim = (int)tensor.shape.size();
        v.shape = in_shapes.back().data();
        v.data = tensor.bytes.data();
        return v;
    };
    kiln_tensor image_tensor, mask_tensor;
    if (!in.image_tensor.bytes.empty()) p.image_tensor = &(image_tensor = view("image_tensor", in.image_tensor));
    if (!in.mask_tensor.bytes.empty()) p.mask_tensor = &(mask_tensor = view("mask_tensor", in.mask_tensor));
    std::vector<kiln_tensor> draws;
    for (auto& [name, tensor] : in.noise) draws.push_back(view(name.c_str(), tensor));
    p.noise = draws.empty() ? nullptr : draws.data();
    p.noise_count = (int)draws.size();
    if (in.strength) p.strength = *in.strength;
    if (in.max_area) p.max_area = *in.max_area;
    p.no_auto_resize = !in.auto_resize;
    CommonStore store;
    set_common(p, t, store);
    return run(m, p, t.keep_intermediates, t.progress, stats);
}

}  // namespace kiln::app
