// kiln_generate: checks the parameters against the model (a size query stops there), then runs the DiT or the
// text-to-image pipeline under the context's lock and writes the pixels into the caller's buffer.
#include <cmath>
#include <optional>
#include <set>

#include "lib/capi_internal.h"
#include "models/pipelines/dit_pipeline.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"
#include "models/schedulers/scheduler.h"
#include "models/text/tokenizers/tokenizer.h"

namespace kiln::capi {

exec::Mode jit_mode(int m) {
    switch (m) {
        case KILN_JIT_DEFAULT:
        case KILN_JIT_REGIONAL:
            return exec::Mode::regional;
        case KILN_JIT_EAGER:
            return exec::Mode::eager;
        case KILN_JIT_FULL:
            return exec::Mode::full;
    }
    fail(KILN_INVALID_ARGUMENT, "jit_mode ", m, " is not a kiln_jit_mode");
}

namespace {

// One generate call, resolved: everything checked before any heavy work.
struct Request {
    bool dit = false;
    models::GenerateOptions g;
    models::T2IOptions t;
    models::T2IPlan plan;
    models::PromptOptions texts;  // prompts empty: t.text came as prompt_embeds
    bool keep_encoders = false;
    bool keep_transformer = false;
    int width = 0, height = 0, count = 0;
};

Tensor read_latents(const kiln_generate_params& p, const Shape& expected) {
    KILN_ARG(p.latents_ndim >= 1 && p.latents_ndim <= 8 && p.latents_shape, "latents_shape/latents_ndim (",
             p.latents_ndim, ") do not describe the latents");
    Shape s(p.latents_shape, p.latents_shape + p.latents_ndim);
    KILN_ARG(s == expected, "latents have shape ", shape_str(s), ", this call needs ", shape_str(expected));
    Tensor t(DType::f32, s);
    std::memcpy(t.bytes.data(), p.latents, t.nbytes());
    return t;
}

void check_scheduler(const models::ModelSource& src, const std::string& name) {
    if (name.empty()) return;
    try {
        (void)sched::make_scheduler(src.config("scheduler"), name);
    } catch (const Error& e) {
        fail(KILN_UNSUPPORTED, e.what());
    }
}

// scheduler_config: a JSON object of fields that replace the scheduler config's, checked against the scheduler.
nlohmann::json scheduler_overrides(const models::ModelSource& src, const std::string& name, const char* text) {
    if (!text || !*text) return nlohmann::json::object();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        KILN_ARG(false, "scheduler_config is not JSON: ", e.what());
    }
    KILN_ARG(j.is_object(), "scheduler_config must be a JSON object, got ", j.dump());
    try {
        (void)sched::make_scheduler(src.config("scheduler"), name, j);
    } catch (const Error& e) {
        KILN_ARG(false, "scheduler_config: ", e.what());
    }
    return j;
}

// noise_dtype: NULL or "" is f32; f16 and bf16 are the other dtypes diffusers pipelines run in.
DType noise_dtype(const char* s) {
    const std::string v = s ? s : "";
    if (v.empty() || v == "f32" || v == "float32") return DType::f32;
    if (v == "f16" || v == "float16") return DType::f16;
    if (v == "bf16" || v == "bfloat16") return DType::bf16;
    KILN_ARG(false, "noise_dtype '", v, "' (f32, f16 or bf16)");
    return DType::f32;
}

// A float that is NaN, infinite or outside its option's range (models::float_ranges()): KILN_INVALID_ARGUMENT.
void check_float_arg(models::FloatOption o, double v, const std::string& what = "") {
    if (const std::string problem = models::float_problem(o, v, what); !problem.empty())
        fail(KILN_INVALID_ARGUMENT, problem);
}

// Every double field of kiln_generate_params and the option whose range it takes: the ranges of the CLI's flags and
// of the C++ options, the same for every family. zero_default: 0 is the pipeline's default, not a value.
struct FloatField {
    double kiln_generate_params::*field;
    models::FloatOption option;
    bool zero_default;
};
constexpr FloatField kFloatFields[] = {
    {&kiln_generate_params::guidance, models::FloatOption::guidance, true},
    {&kiln_generate_params::true_cfg_scale, models::FloatOption::true_cfg_scale, true},
    {&kiln_generate_params::strength, models::FloatOption::strength, true},
    {&kiln_generate_params::eta, models::FloatOption::eta, false},
    {&kiln_generate_params::skip_layer_guidance_scale, models::FloatOption::skip_layer_guidance_scale, true},
    {&kiln_generate_params::skip_layer_guidance_start, models::FloatOption::skip_layer_guidance_start, false},
    {&kiln_generate_params::skip_layer_guidance_stop, models::FloatOption::skip_layer_guidance_stop, false},
    {&kiln_generate_params::cfg_truncation, models::FloatOption::cfg_truncation, true},
    {&kiln_generate_params::cfg_normalization, models::FloatOption::cfg_normalization, false},
};

// The ranges of the numbers every call checks, whatever the model.
void check_ranges(const kiln_generate_params& p) {
    KILN_ARG(p.steps >= 0 && p.steps <= 1000, "steps is ", p.steps, " (1..1000, or 0 for the pipeline's)");
    for (const FloatField& f : kFloatFields)
        if (!(f.zero_default && p.*f.field == 0)) check_float_arg(f.option, p.*f.field);
    auto list = [](const double* v, int n, const char* name, const char* count, models::FloatOption o) {
        KILN_ARG(n >= 0 && (n == 0 || v), name, " / ", count, " (", n, ") do not describe a list");
        for (int i = 0; i < n; ++i) check_float_arg(o, v[i], std::string(name) + "[" + std::to_string(i) + "]");
    };
    list(p.sigmas, p.sigma_count, "sigmas", "sigma_count", models::FloatOption::sigma);
    list(p.timesteps, p.timestep_count, "timesteps", "timestep_count", models::FloatOption::timestep);
    KILN_ARG(p.width >= 0 && p.height >= 0, "width/height are ", p.width, "x", p.height, " (0 = the model's)");
    KILN_ARG(p.prompt_count >= 0 && p.class_label_count >= 0, "prompt_count/class_label_count are negative");
    KILN_ARG(!p.latents || p.latents_shape, "latents given without latents_shape");
    KILN_ARG(p.vae_tile_size >= 0 && (p.vae_tile_size == 0 || p.vae_tiling), "vae_tile_size is ", p.vae_tile_size,
             " (it needs vae_tiling)");
    KILN_ARG(p.images_per_prompt >= 0 && p.images_per_prompt <= 1000, "images_per_prompt is ", p.images_per_prompt,
             " (1..1000, or 0 for one)");
}

// The fields of models::CommonOptions, as every pipeline takes them (scheduler_config: scheduler_overrides; the
// latents, whose shape depends on the pipeline: read_latents; progress: run).
models::CommonOptions common_options(const kiln_generate_params& p) {
    models::CommonOptions c;
    c.seed = p.seed;
    c.scheduler = p.scheduler ? p.scheduler : "";
    c.noise_dtype = noise_dtype(p.noise_dtype);
    c.mode = jit_mode(raw_enum(p.jit_mode));
    c.keep_intermediates = p.intermediates != nullptr;
    c.tiled_vae = p.vae_tiling != 0;
    c.vae_tile_size = p.vae_tile_size;
    c.host_loop = p.host_loop != 0;
    return c;
}

void check_true_cfg(const kiln_model& m, const kiln_generate_params& p) {
    KILN_ARG(p.true_cfg_scale == 0 || (m.family && m.family->true_cfg), "true_cfg_scale applies to Flux (", m.pipeline,
             "'s guidance scale is guidance)");
}

// DiT: class labels, checked against the model's; its one size; nothing of the text pipelines.
Request resolve_labels(const kiln_model& m, const kiln_generate_params& p, const models::CommonOptions& common) {
    KILN_ARG(p.prompt_count == 0 && p.prompt_embeds_count == 0 && !p.negative_prompt && p.negative_prompt_count == 0 &&
                 p.prompt_2_count == 0 && p.prompt_3_count == 0 && p.negative_prompt_2_count == 0 &&
                 p.negative_prompt_3_count == 0 && p.clip_skip == 0 && !p.complex_human_instruction &&
                 p.text_encoder_layer_count == 0,
             m.src.path(), " is a class-conditional DiT model: prompts do not apply (give class_labels)");
    KILN_ARG(p.cfg_truncation == 0 && p.cfg_normalization == 0, m.src.path(),
             " is a DiT model: cfg_truncation and cfg_normalization apply to ",
             models::pipeline_for(models::family_with(&models::Family::z_image_loop)).name);
    KILN_ARG(p.eta == 0, m.src.path(), " is a DiT model: eta applies to the PixArt pipelines");
    KILN_ARG(!p.image && !p.mask && !p.image_tensor && !p.mask_tensor && p.strength == 0 && p.noise_count == 0 &&
                 p.max_area == 0 && p.no_auto_resize == 0,
             m.src.path(), " is a DiT model: diffusers has no image-to-image pipeline for it (images apply to SD3 and ",
             "Flux)");
    KILN_ARG(p.sigma_count == 0 && p.timestep_count == 0, m.src.path(),
             " is a DiT model: custom sigmas and timesteps apply to the text pipelines (",
             models::pipeline_for(models::family(models::FamilyId::dit)).name, " takes none)");
    KILN_ARG(p.skip_guidance_layer_count == 0, m.src.path(), " is a DiT model: skip-layer guidance applies to ",
             models::pipeline_for(models::family_with(&models::Family::skip_layer_guidance)).name);
    KILN_ARG(p.class_label_count > 0 && p.class_labels, m.src.path(),
             " is a class-conditional DiT model: give class_labels and class_label_count");
    KILN_ARG((p.width == 0 || p.width == m.default_width) && (p.height == 0 || p.height == m.default_height),
             m.src.path(), " draws ", m.default_width, "x", m.default_height, " images only, not ", p.width, "x",
             p.height);
    std::set<int> ids;
    for (auto& [id, name] : m.labels) ids.insert(id);
    for (int i = 0; i < p.class_label_count; ++i)
        KILN_ARG(ids.count(p.class_labels[i]), "class_labels[", i, "] = ", p.class_labels[i],
                 " is not a class of this model (", m.labels.size(), " classes)");
    Request r;
    r.dit = true;
    static_cast<models::CommonOptions&>(r.g) = common;
    r.g.labels.assign(p.class_labels, p.class_labels + p.class_label_count);
    r.g.images_per_label = std::max(1, p.images_per_prompt);
    if (p.steps) r.g.steps = p.steps;
    if (p.guidance != 0 || p.guidance_exact) r.g.guidance = p.guidance;
    r.count = (int)r.g.labels.size() * r.g.images_per_label;
    r.width = m.default_width, r.height = m.default_height;
    if (p.latents) {
        const auto& tc = m.src.config("transformer");
        const int64_t S = tc.value("sample_size", 0);
        r.g.latents_init = read_latents(p, {r.count, tc.value("in_channels", 4), S, S});
    }
    return r;
}

// A list of texts (negative_prompts, prompts_2, ...): count entries, none NULL.
std::vector<std::string> text_list(const char* const* v, int count, const char* name) {
    KILN_ARG(count >= 0 && (count == 0 || v), name, " / its count (", count, ") do not describe a list");
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
        KILN_ARG(v[i], name, "[", i, "] is NULL");
        out.push_back(v[i]);
    }
    return out;
}

// The texts besides the prompts: one for every prompt, or one per prompt (checked by models::check_prompts).
models::PromptOptions prompt_texts(const kiln_generate_params& p) {
    KILN_ARG(!(p.negative_prompt && p.negative_prompt_count > 0), "give negative_prompt or negative_prompts, not both");
    models::PromptOptions po;
    po.negatives = text_list(p.negative_prompts, p.negative_prompt_count, "negative_prompts");
    if (p.negative_prompt) po.negatives = {p.negative_prompt};
    po.prompts_2 = text_list(p.prompts_2, p.prompt_2_count, "prompts_2");
    po.prompts_3 = text_list(p.prompts_3, p.prompt_3_count, "prompts_3");
    po.negatives_2 = text_list(p.negative_prompts_2, p.negative_prompt_2_count, "negative_prompts_2");
    po.negatives_3 = text_list(p.negative_prompts_3, p.negative_prompt_3_count, "negative_prompts_3");
    return po;
}

// prompt_embeds: encode_prompt's outputs under diffusers' names, each name once; prompt_embeds [B, L, D] present.
models::TextConditioning read_prompt_embeds(const kiln_generate_params& p, const models::PromptOptions& po) {
    KILN_ARG(po.negatives.empty() && po.prompts_2.empty() && po.prompts_3.empty() && po.negatives_2.empty() &&
                 po.negatives_3.empty() && p.max_sequence_length == 0 && p.clip_skip == 0 &&
                 !p.complex_human_instruction && p.text_encoder_layer_count == 0,
             "negative prompts, prompts_2, prompts_3, max_sequence_length, clip_skip, complex_human_instruction and "
             "text_encoder_layers apply to prompts; with prompt_embeds give negative_prompt_embeds");
    std::map<std::string, Tensor> named;
    for (int i = 0; i < p.prompt_embeds_count; ++i) {
        Tensor t = read_tensor(p.prompt_embeds[i], i, "prompt_embeds");
        const std::string name = p.prompt_embeds[i].name;
        KILN_ARG(!named.count(name), "prompt_embeds[", i, "]: '", name, "' given twice");
        named[name] = std::move(t);
    }
    models::TextConditioning text = models::TextConditioning::from(named);
    KILN_ARG(text.named().size() == named.size(),
             "prompt_embeds: a name is not one of prompt_embeds, "
             "negative_prompt_embeds, pooled_prompt_embeds, negative_pooled_prompt_embeds, prompt_attention_mask, "
             "negative_prompt_attention_mask");
    const Tensor& pe = text.prompt_embeds;
    KILN_ARG(!pe.bytes.empty() && pe.shape.size() == 3, "prompt_embeds: 'prompt_embeds' [B, L, D] is missing",
             pe.shape.empty() ? "" : " (got " + shape_str(pe.shape) + ")");
    return text;
}

// Images in: pixels (RGBA8) or preprocessed tensors, the strength, the named draws. The pipeline's checks (which
// models take them, sizes, strength range) are plan_t2i's.
models::Pixels read_pixels(const kiln_image* im, const char* what) {
    models::Pixels px;
    if (!im) return px;
    const kiln_image img = read_struct(im, what);
    KILN_ARG(raw_enum(img.format) == KILN_PIXELS_RGBA8, what, "->format must be KILN_PIXELS_RGBA8");
    KILN_ARG(img.width > 0 && img.height > 0 && img.width <= 65536 && img.height <= 65536, what, " is ", img.width, "x",
             img.height);
    KILN_ARG(img.data, what, "->data is NULL");
    px.width = img.width, px.height = img.height;
    const auto* d = static_cast<const uint8_t*>(img.data);
    px.rgba.assign(d, d + (size_t)img.width * img.height * 4);
    return px;
}

models::ImageInputs read_image_inputs(const kiln_generate_params& p) {
    models::ImageInputs in;
    in.image = read_pixels(p.image, "image");
    in.mask = read_pixels(p.mask, "mask");
    KILN_ARG(!(p.image && p.image_tensor) && !(p.mask && p.mask_tensor),
             "give the image (and the mask) as pixels or as a tensor, not both");
    if (p.image_tensor) in.image_tensor = read_tensor(*p.image_tensor, 0, "image_tensor");
    if (p.mask_tensor) in.mask_tensor = read_tensor(*p.mask_tensor, 0, "mask_tensor");
    if (p.strength != 0) in.strength = p.strength;
    KILN_ARG(p.max_area >= 0, "max_area is ", p.max_area, " (0 = the pipeline's)");
    if (p.max_area) in.max_area = p.max_area;
    in.auto_resize = p.no_auto_resize == 0;
    KILN_ARG(p.noise_count >= 0 && (p.noise_count == 0 || p.noise), "noise/noise_count do not describe the draws");
    for (int i = 0; i < p.noise_count; ++i) {
        Tensor t = read_tensor(p.noise[i], i, "noise");
        KILN_ARG(!in.noise.count(p.noise[i].name), "noise[", i, "]: '", p.noise[i].name, "' given twice");
        in.noise[p.noise[i].name] = std::move(t);
    }
    return in;
}

// The text pipelines' schedule and guidance: steps, guidance, sigmas, timesteps, eta, skip-layer guidance, size,
// Z-Image's cfg_truncation and cfg_normalization.
void text_schedule(const kiln_generate_params& p, models::T2IOptions& t) {
    if (p.steps) t.steps = p.steps;
    if (p.guidance != 0 || p.guidance_exact) t.guidance = p.guidance;
    KILN_ARG(p.sigma_count >= 0 && (p.sigma_count == 0 || p.sigmas), "sigmas / sigma_count (", p.sigma_count,
             ") do not describe a list");
    t.sigmas.assign(p.sigmas, p.sigmas + p.sigma_count);
    KILN_ARG(p.timestep_count >= 0 && (p.timestep_count == 0 || p.timesteps), "timesteps / timestep_count (",
             p.timestep_count, ") do not describe a list");
    t.timesteps.assign(p.timesteps, p.timesteps + p.timestep_count);
    t.eta = p.eta;
    KILN_ARG(p.skip_guidance_layer_count >= 0 && (p.skip_guidance_layer_count == 0 || p.skip_guidance_layers),
             "skip_guidance_layers / skip_guidance_layer_count (", p.skip_guidance_layer_count,
             ") do not describe a list");
    t.skip_guidance_layers.assign(p.skip_guidance_layers, p.skip_guidance_layers + p.skip_guidance_layer_count);
    if (p.skip_layer_guidance_scale != 0) t.skip_layer_guidance_scale = p.skip_layer_guidance_scale;
    if (p.skip_layer_guidance_start != 0 || p.skip_layer_guidance_stop != 0) {
        t.skip_layer_guidance_start = p.skip_layer_guidance_start;
        t.skip_layer_guidance_stop = p.skip_layer_guidance_stop;
    }
    if (p.width) t.width = p.width;
    if (p.height) t.height = p.height;
    t.resolution_binning = p.no_resolution_binning == 0;
    if (p.cfg_truncation != 0) t.cfg_truncation = p.cfg_truncation;  // checked against the family by plan_t2i
    t.cfg_normalization = p.cfg_normalization;
}

// prompt_embeds: the tensors this pipeline needs beyond prompt_embeds, checked before any work.
void check_embeds_for(const kiln_model& m, const models::T2IPlan& plan, const models::TextConditioning& tx) {
    const bool pixart = plan.family->attention_mask;  // PixArt's transformer reads prompt_attention_mask
    auto need = [&](const Tensor& t, const char* name, const char* why) {
        KILN_ARG(!t.bytes.empty(), m.pipeline, " needs prompt_embeds '", name, "'", why);
    };
    if (pixart)
        need(tx.prompt_attention_mask, "prompt_attention_mask", "");
    else
        need(tx.pooled_prompt_embeds, "pooled_prompt_embeds", "");
    if (plan.cfg) {
        need(tx.negative_prompt_embeds, "negative_prompt_embeds", " with guidance > 1 (or guidance 1)");
        if (pixart)
            need(tx.negative_prompt_attention_mask, "negative_prompt_attention_mask", " with guidance > 1");
        else
            need(tx.negative_pooled_prompt_embeds, "negative_pooled_prompt_embeds", " with guidance > 1");
    }
}

// loras: the files and scales, checked for presence and finiteness here; read (and refused) at the transformer's load.
void lora_options(const kiln_generate_params& p, models::LoraOptions& l) {
    KILN_ARG(p.lora_count >= 0 && (p.lora_count == 0 || p.loras), "loras / lora_count (", p.lora_count,
             ") do not describe a list");
    for (int i = 0; i < p.lora_count; ++i) {
        KILN_ARG(p.loras[i].path && *p.loras[i].path, "loras[", i, "].path is NULL or empty");
        check_float_arg(models::FloatOption::lora_scale, p.loras[i].scale, "loras[" + std::to_string(i) + "].scale");
        l.files.push_back({p.loras[i].path, p.loras[i].scale});
    }
    KILN_ARG(p.lora_apply >= KILN_LORA_APPLY_DEFAULT && p.lora_apply <= KILN_LORA_APPLY_RUNTIME, "lora_apply ",
             p.lora_apply, " is not a kiln_lora_apply");
    l.apply = p.lora_apply == KILN_LORA_APPLY_MERGE ? "merge" : "runtime";
    l.allow_unmatched = p.lora_allow_unmatched != 0;
}

// PixArt, SD3, Flux: prompts (or prompt_embeds) and the texts beside them, the schedule, planned by plan_t2i.
Request resolve_text(const kiln_model& m, const kiln_generate_params& p, const models::CommonOptions& common) {
    KILN_ARG(p.class_label_count == 0, m.src.path(), " is a text-to-image model (", m.pipeline,
             "): class_labels do not apply (give prompts)");
    KILN_ARG(p.prompt_count >= 0 && p.prompt_embeds_count >= 0, "prompt_count/prompt_embeds_count are negative");
    KILN_ARG(!(p.prompt_count > 0 && p.prompt_embeds_count > 0), "give prompts or prompt_embeds, not both");
    KILN_ARG((p.prompt_count > 0 && p.prompts) || (p.prompt_embeds_count > 0 && p.prompt_embeds), m.src.path(),
             " is a text-to-image model (", m.pipeline, "): give prompts and prompt_count (or prompt_embeds)");
    Request r;
    static_cast<models::CommonOptions&>(r.t) = common;
    const int per = std::max(1, p.images_per_prompt);
    r.t.images_per_prompt = per;
    models::PromptOptions& po = r.texts;
    po = prompt_texts(p);
    if (p.prompt_embeds_count > 0) {
        r.t.text = read_prompt_embeds(p, po);
        r.count = (int)r.t.text.prompt_embeds.shape[0] * per;
    }
    for (int i = 0; i < p.prompt_count; ++i) {
        KILN_ARG(p.prompts[i], "prompts[", i, "] is NULL");
        po.prompts.push_back(p.prompts[i]);
    }
    po.clip_skip = p.clip_skip;
    KILN_ARG(p.text_encoder_layer_count >= 0 && (p.text_encoder_layer_count == 0 || p.text_encoder_layers),
             "text_encoder_layers / text_encoder_layer_count (", p.text_encoder_layer_count,
             ") do not describe a list");
    po.text_encoder_layers.assign(p.text_encoder_layers, p.text_encoder_layers + p.text_encoder_layer_count);
    if (p.complex_human_instruction) po.complex_human_instruction = std::string(p.complex_human_instruction);
    if (!po.prompts.empty()) models::check_prompts(m.src, po);  // lengths, UTF-8, which texts apply
    KILN_ARG(p.max_sequence_length >= 0, "max_sequence_length is ", p.max_sequence_length);
    po.max_sequence_length = p.max_sequence_length;
    text_schedule(p, r.t);
    // Flux's true CFG runs only with negative conditioning, as diffusers' has_neg_prompt: negative_prompt (not
    // negative_prompt_2 alone, which only replaces T5's negative text) or both negative embeddings.
    const bool has_negative = !po.negatives.empty() || (!r.t.text.negative_prompt_embeds.bytes.empty() &&
                                                        !r.t.text.negative_pooled_prompt_embeds.bytes.empty());
    if (p.true_cfg_scale != 0 && has_negative) r.t.true_cfg_scale = p.true_cfg_scale;
    r.keep_encoders = p.keep_encoders != 0;
    r.keep_transformer = p.keep_transformer != 0;
    lora_options(p, r.t.lora);
    r.t.inputs = read_image_inputs(p);
    r.plan = models::plan_t2i(m.src, r.t);
    if (!r.t.lora.files.empty()) {  // read and checked now: a bad LoRA stops the call before any heavy work
        try {
            const bool encoders_run = !po.prompts.empty();
            if (r.keep_transformer)  // unchanged files are not read again (docs/lora.md)
                r.t.lora.loaded =
                    m.lora_files->load(m.src, r.plan.family->name, r.t.lora, encoders_run, r.t.lora.loaded_from);
            else
                r.t.lora.loaded = models::load_model_loras(m.src, r.plan.family->name, r.t.lora, encoders_run);
        } catch (const Error& e) {
            fail(e.kind() == ErrorKind::io ? KILN_IO : KILN_INVALID_ARGUMENT, e.what());
        }
    }
    if (!r.keep_transformer) m.lora_files->clear();
    if (!po.prompts.empty()) r.count = p.prompt_count * per;
    if (po.prompts.empty()) check_embeds_for(m, r.plan, r.t.text);
    r.width = r.plan.width, r.height = r.plan.height;
    if (p.latents) r.t.latents_init = read_latents(p, models::t2i_noise_shape(r.plan, r.count));
    return r;
}

// The one mapping from kiln_generate_params to the pipelines' options: every check before any heavy work.
Request resolve(const kiln_model& m, const kiln_generate_params& p) {
    check_ranges(p);
    models::CommonOptions common = common_options(p);
    if (m.kind == KILN_MODEL_COMPONENT)
        fail(KILN_UNSUPPORTED, m.src.path(),
             " is not a pipeline Kiln generates with (components: ", m.components.size(), "); use kiln_forward");
    check_scheduler(m.src, common.scheduler);
    common.scheduler_config = scheduler_overrides(m.src, common.scheduler, p.scheduler_config);
    check_true_cfg(m, p);
    KILN_ARG(m.kind != KILN_MODEL_CLASS_LABELS || p.lora_count == 0, m.src.path(),
             " is a class-label model: loras apply to the text-to-image transformers");
    return m.kind == KILN_MODEL_CLASS_LABELS ? resolve_labels(m, p, common) : resolve_text(m, p, common);
}

// What encoding the prompts measured (kiln_generate_stats' text fields).
struct TextStats {
    double tokenize_ms = 0, encode_ms = 0;
    uint64_t needed = 0, allocated = 0;
    bool reused = false;
};

// Runs the pipeline: image [count, H, W, 3] floats in [0, 1], timings, intermediates when asked for.
models::GenerateResult run(vk::Context& ctx, kiln_model& m, Request& r, const kiln_generate_params& p, TextStats& ts) {
    auto progress = [&p](int step, int total) {
        if (p.progress && p.progress(step, total, p.progress_user) != 0) throw Cancelled{};
    };
    if (r.dit) {
        progress(0, r.g.steps);
        r.g.progress = progress;
        return models::generate_dit(ctx, m.src, r.g);
    }
    progress(0, r.plan.steps);
    if (!r.keep_encoders) m.encoders.reset();
    if (!r.keep_transformer) m.transformer.reset();
    if (r.keep_transformer && !m.transformer) m.transformer = std::make_unique<models::TransformerCache>();
    r.t.keep_transformer = m.transformer.get();
    if (r.texts.prompts.empty()) {  // prompt_embeds
        r.t.progress = progress;
        return models::generate_t2i(ctx, m.src, r.t);
    }
    if (r.keep_encoders && !m.encoders) m.encoders = std::make_unique<models::EncoderCache>();
    models::PromptOptions po = r.texts;
    po.cfg = r.plan.cfg;
    po.mode = r.t.mode;
    po.keep_intermediates = r.t.keep_intermediates;
    po.keep = m.encoders.get();
    // The LoRAs' text-encoder modules, read in resolve_text.
    po.lora = r.t.lora;
    auto enc = models::encode_prompts(&ctx, m.src, po);  // without keep, the encoders' memory is freed on return
    ts.tokenize_ms = enc.tokenize_ms, ts.encode_ms = enc.encode_ms;
    ts.needed = enc.peak_needed_bytes, ts.allocated = enc.peak_device_bytes, ts.reused = enc.reused_encoders;
    auto get = [&](const char* n) {
        auto it = enc.tensors.find(n);
        return it == enc.tensors.end() ? Tensor() : it->second;
    };
    r.t.text.prompt_embeds = get("prompt_embeds");
    r.t.text.negative_prompt_embeds = get("negative_prompt_embeds");
    r.t.text.pooled_prompt_embeds = get("pooled_prompt_embeds");
    r.t.text.negative_pooled_prompt_embeds = get("negative_pooled_prompt_embeds");
    r.t.text.prompt_attention_mask = get("prompt_attention_mask");
    r.t.text.negative_prompt_attention_mask = get("negative_prompt_attention_mask");
    r.t.progress = progress;
    auto res = models::generate_t2i(ctx, m.src, r.t);
    res.intermediates.insert(res.intermediates.begin(), enc.intermediates.begin(), enc.intermediates.end());
    return res;
}

void write_pixels(const Tensor& im, const kiln_image& out) {
    const size_t n = (size_t)out.count * out.width * out.height;
    if (im.shape != Shape{out.count, out.height, out.width, 3} || im.dtype != DType::f32)
        fail(KILN_INTERNAL, "the pipeline returned an image of shape ", shape_str(im.shape), ", expected ",
             shape_str({out.count, out.height, out.width, 3}));
    const float* src = im.data<float>();
    if (out.format == KILN_PIXELS_RGB_F32) {
        std::memcpy(out.data, src, n * 3 * sizeof(float));
        return;
    }
    auto* px = static_cast<uint8_t*>(out.data);
    for (size_t i = 0; i < n; ++i) {
        for (int c = 0; c < 3; ++c)
            px[i * 4 + c] = (uint8_t)std::nearbyint(std::clamp(src[i * 3 + c], 0.f, 1.f) * 255.f);
        px[i * 4 + 3] = 255;
    }
}

}  // namespace
}  // namespace kiln::capi

using namespace kiln;
using namespace kiln::capi;

extern "C" KILN_API kiln_status kiln_generate(kiln_model* model, const kiln_generate_params* params, kiln_image* out) {
    return guarded(KILN_INVALID_ARGUMENT, [&] {
        KILN_ARG(model, "model is NULL");
        check_alive(*model->device);
        model->src.check_unchanged();  // a model file changed on disk since kiln_model_open: KILN_IO, before any work
        const auto p = read_struct(params, "params");
        auto img = read_struct(out, "out");
        const int format = raw_enum(img.format);
        KILN_ARG(format == KILN_PIXELS_RGBA8 || format == KILN_PIXELS_RGB_F32, "out->format ", format,
                 " is not a kiln_pixel_format");
        if (p.intermediates) *p.intermediates = nullptr;
        std::optional<kiln_generate_stats> stats;
        if (p.stats) stats = read_struct(p.stats, "params->stats");
        Request r = resolve(*model, p);
        img.width = r.width, img.height = r.height, img.count = r.count;
        img.required_bytes = (size_t)r.width * r.height * r.count * (img.format == KILN_PIXELS_RGBA8 ? 4 : 12);
        write_struct(out, img);
        if (stats) {
            stats->steps = r.dit ? r.g.steps : r.plan.steps;
            stats->guidance = r.dit ? r.g.guidance : r.plan.guidance;
            stats->width = r.width, stats->height = r.height;
            write_struct(p.stats, *stats);
        }
        if (!img.data) return;  // the size query
        if (img.capacity < img.required_bytes)
            fail(KILN_BUFFER_TOO_SMALL, "out->capacity is ", img.capacity, " bytes, ", img.required_bytes, " needed (",
                 r.count, " image(s) of ", r.width, "x", r.height, ")");
        std::lock_guard<std::mutex> lock(model->device->mutex);
        models::GenerateResult res;
        TextStats ts;
        try {
            res = run(*model->device->vk, *model, r, p, ts);
        } catch (const Error& e) {
            if (dynamic_cast<const StatusError*>(&e)) throw;
            // Past the checks above, a failure is the model's files, the device, or a bug: the message says which.
            throw StatusError(status_of_current_exception(KILN_INTERNAL), e.what());
        }
        const Tensor& im = res.image;
        std::unique_ptr<kiln_result> inter;
        if (p.intermediates) {
            inter = std::make_unique<kiln_result>();
            for (auto& [name, t] : res.intermediates) inter->outputs.push_back({name, std::move(t)});
        }
        if (stats) {
            const auto& tc = res.transformer_counters;
            stats->plan_ms = res.plan_ms, stats->denoise_ms = res.denoise_ms, stats->decode_ms = res.decode_ms;
            stats->transformer_weight_bytes = tc.weight_bytes;
            stats->transformer_activation_bytes = tc.activation_bytes_planned;
            stats->transformer_device_bytes = tc.device_bytes;
            stats->device_loop = res.device_loop;
            stats->denoise_host_ms = res.denoise_host_ms;
            stats->loop_plan_ms = res.loop_plan_ms;
            stats->tokenize_ms = ts.tokenize_ms, stats->encode_ms = ts.encode_ms;
            stats->text_encoder_bytes = ts.needed, stats->text_encoder_device_bytes = ts.allocated;
            stats->text_encoders_reused = ts.reused;
            stats->blocks_streamed = tc.blocks_streamed;
            stats->streamed_bytes_per_step = tc.streamed_bytes_per_run;
            stats->copy_batches_per_step = tc.copy_batches_per_run;
            stats->transformer_reused = res.transformer_reused;
            write_struct(p.stats, *stats);
        }
        write_pixels(im, img);
        if (inter) *p.intermediates = inter.release();
    });
}

extern "C" KILN_API kiln_status kiln_model_set_lora_scales(kiln_model* model, const double* scales, int count) {
    return guarded(KILN_INVALID_ARGUMENT, [&] {
        KILN_ARG(model, "model is NULL");
        check_alive(*model->device);
        KILN_ARG(count >= 0 && (count == 0 || scales), "scales / count (", count, ") do not describe a list");
        for (int i = 0; i < count; ++i)
            check_float_arg(models::FloatOption::lora_scale, scales[i], "scales[" + std::to_string(i) + "]");
        std::lock_guard<std::mutex> lock(model->device->mutex);
        KILN_ARG(model->transformer && model->transformer->resident(), model->src.path(),
                 ": no resident transformer (generate with keep_transformer 1 first)");
        model->transformer->set_lora_scales(std::vector<double>(scales, scales + count));
    });
}
