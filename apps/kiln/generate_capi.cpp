#include "apps/kiln/generate_capi.h"

#include <cstring>

#include "runtime/core/error.h"

namespace kiln::app {

std::string device_name(kiln_context* ctx) {
    kiln_device_info d = KILN_DEVICE_INFO_INIT;
    capi_check(kiln_context_get_device(ctx, &d));
    return d.name;
}

models::GenerateResult generate_labels(kiln_context* ctx, const std::string& model, const models::GenerateOptions& g) {
    ModelPtr m = open_model(ctx, model);
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = g.labels.data();
    p.class_label_count = (int)g.labels.size();
    KILN_CHECK(g.steps >= 1, "--steps is ", g.steps, " (at least 1)");
    p.steps = g.steps;
    p.guidance = g.guidance > 1 ? g.guidance : 1.0;  // <= 1 is no guidance; the C API's 0 means the default
    p.seed = g.seed;
    if (!g.scheduler.empty()) p.scheduler = g.scheduler.c_str();
    p.jit_mode = g.mode == exec::Mode::eager  ? KILN_JIT_EAGER
                 : g.mode == exec::Mode::full ? KILN_JIT_FULL
                                              : KILN_JIT_REGIONAL;
    Tensor latents;
    if (g.latents_init) {
        latents = g.latents_init->astype(DType::f32);
        p.latents = latents.data<float>();
        p.latents_shape = latents.shape.data();
        p.latents_ndim = (int)latents.shape.size();
    }
    auto progress = [](int step, int total, void* user) {
        auto* fn = static_cast<const std::function<void(int, int)>*>(user);
        if (interrupted()) return 1;  // Ctrl-C: KILN_CANCELLED at this step boundary
        if (step > 0 && *fn) (*fn)(step, total);
        return 0;
    };
    p.progress = progress;
    p.progress_user = const_cast<std::function<void(int, int)>*>(&g.progress);
    kiln_generate_stats stats = KILN_GENERATE_STATS_INIT;
    p.stats = &stats;
    kiln_result* inter = nullptr;
    if (g.keep_intermediates) p.intermediates = &inter;
    p.vae_tiling = g.tiled_vae;
    p.vae_tile_size = g.vae_tile_size;

    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    capi_check(kiln_generate(m.get(), &p, &img));  // the size query
    models::GenerateResult r;
    r.image = Tensor(DType::f32, {img.count, img.height, img.width, 3});
    img.data = r.image.bytes.data();
    img.capacity = r.image.nbytes();
    const kiln_status st = kiln_generate(m.get(), &p, &img);
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

}  // namespace kiln::app
