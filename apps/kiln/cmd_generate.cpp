// kiln generate: the DiT pipeline (class labels) or a text-to-image pipeline (PixArt, SD3, Flux) end to end, PNG out.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/kiln/commands.h"
#include "apps/kiln/generate_args.h"
#include "apps/kiln/generate_capi.h"
#include "apps/kiln/generate_flags.h"
#include "apps/kiln/png.h"
#include "apps/kiln/profile.h"
#include "models/layouts/lora.h"
#include "models/pipelines/dit_pipeline.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/core/safetensors.h"

namespace kiln::app {

namespace {
// A progress bar on a terminal, a few lines otherwise.
// Ctrl-C during a generation stops it at the next step boundary (the progress callback throws; the device loop
// and the C API free everything on the way out). A second Ctrl-C kills the process as usual.
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
    g_interrupted = true;
    ::signal(SIGINT, SIG_DFL);
}
}  // namespace

void install_interrupt_handler() { ::signal(SIGINT, on_sigint); }
bool interrupted() { return g_interrupted; }

namespace {
// The settings' noise dtype, named only when it is not the default f32.
std::string noise_setting(DType dt) { return dt == DType::f32 ? "" : std::string(" noise_dtype=") + dtype_name(dt); }

std::function<void(int, int)> progress_printer(std::chrono::steady_clock::time_point& t0) {
    const bool tty = platform::is_terminal(stderr);
    install_interrupt_handler();
    return [&t0, tty](int i, int n) {
        if (interrupted()) {
            if (tty) std::fprintf(stderr, "\n");
            KILN_FAIL("interrupted (Ctrl-C) after step ", i, " of ", n, "; nothing written");
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (tty) {
            int w = 30, f = i * w / n;
            std::fprintf(stderr, "\r  denoise [%s%s] %d/%d  %.1fs", std::string((size_t)f, '#').c_str(),
                         std::string((size_t)(w - f), '.').c_str(), i, n, s);
            if (i == n) std::fprintf(stderr, "\n");
        } else if (i == n || i % std::max(1, n / 5) == 0) {
            std::fprintf(stderr, "  denoise %d/%d  %.1fs\n", i, n, s);
        }
    };
}

// One `kiln generate`: the flags, the model, and where it runs. Generation goes through libkiln's C API (api), as
// an app calls it; --profile reads what the C API does not expose (the transformer's per-step RunStats, the
// device's memory peaks) and so runs the C++ pipelines on a vk::Context (ctx), as `kiln bench` does.
struct Session {
    const GenerateFlags& o;
    ModelSpec spec;
    std::string model;  // what the messages and the image's metadata name
    models::ModelSource src;
    ContextPtr api;
    std::unique_ptr<vk::Context> ctx;
    std::string device;  // its name
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();

    void open_device() {
        const uint64_t budget = o.vram_budget.empty() ? 0 : exec::parse_bytes(o.vram_budget);
        if (o.profile) {
            ctx = std::make_unique<vk::Context>(cli_settings(o.device));
            if (budget) ctx->set_vram_budget(budget);
            device = ctx->info().name;
        } else {
            api = open_context(o.device, budget);
            device = device_name(api.get());
        }
    }
};

// The figures of a generation, then its images (and --dump's intermediates).
void finish(const Session& s, const models::GenerateResult& r, int n_steps, const std::string& settings,
            const std::string& out, const std::string& dump) {
    std::fprintf(stderr, "  plan+upload %.0f ms, denoise %.0f ms (%.1f ms/step), decode %.0f ms\n", r.plan_ms,
                 r.denoise_ms, r.denoise_ms / n_steps, r.decode_ms);
    if (r.device_loop)
        std::fprintf(stderr, "  loop on the device: host busy %.2f ms/step (loop planned in %.1f ms)\n",
                     (r.denoise_host_ms - r.loop_plan_ms) / n_steps, r.loop_plan_ms);
    else
        std::fprintf(stderr, "  loop on the host: host busy %.2f ms/step\n", r.denoise_host_ms / n_steps);
    const auto& tc = r.transformer_counters;
    std::fprintf(stderr, "  transformer %.1f MiB (weights + activations; %.0f MiB allocated)\n",
                 (double)(tc.weight_bytes + tc.activation_bytes_planned) / (1 << 20),
                 (double)tc.device_bytes / (1 << 20));
    if (!tc.stream_note.empty())
        std::fprintf(stderr, "  streaming: %s, %.1f MiB per step, ring copies %s\n", tc.stream_note.c_str(),
                     (double)tc.streamed_bytes_per_run / (1 << 20), tc.copy_queue.c_str());
    write_images(r.image, out, s.o.grid, s.o.upscale, s.o.quality,
                 {{"Software", "kiln"}, {"kiln:model", s.model}, {"kiln:settings", settings}});
    if (!dump.empty()) write_safetensors(dump, r.intermediates);
}

// --profile: the transformer's per-step figures and the memory peaks since rss_reset's reset_peaks().
void profile(vk::Context& ctx, const models::GenerateResult& r, bool rss_reset) {
    std::vector<StepFigures> steps;
    for (size_t i = 0; i < r.transformer_runs.size(); ++i) steps.push_back({r.step_ms[i], r.transformer_runs[i]});
    if (!steps.empty()) {
        std::fprintf(stderr,
                     "  profile: transformer per denoising step (ms; idle_pre = device idle before the step)\n");
        print_steps(stderr, steps);
    } else if (!r.step_ms.empty()) {  // device loop: no host work per step to time, only completions
        std::vector<double> s = r.step_ms;
        std::sort(s.begin(), s.end());
        std::fprintf(stderr,
                     "  profile: loop on the device, %zu steps, step completions %.2f ms apart (median; min %.2f, max "
                     "%.2f); per-step GPU/host figures: --host-loop\n",
                     s.size(), s[s.size() / 2], s.front(), s.back());
    }
    const auto& tc = r.transformer_counters;
    std::fprintf(stderr, "  profile: transformer activations %.2f MiB planned (%.2f MiB unplanned); peak %s\n",
                 (double)tc.activation_bytes_planned / (1 << 20), (double)tc.activation_bytes_naive / (1 << 20),
                 peaks_line(read_peaks(ctx, rss_reset)).c_str());
}

// ---- DiT: class labels ----

std::string dit_settings(const GenerateFlags& o, const models::GenerateOptions& g) {
    return "labels=" + o.labels + (o.images > 1 ? " images=" + std::to_string(o.images) : "") +
           " steps=" + std::to_string(g.steps) + " guidance=" + std::to_string(g.guidance) +
           " seed=" + std::to_string(g.seed) + noise_setting(g.noise_dtype) +
           " scheduler=" + (g.scheduler.empty() ? "model" : g.scheduler) +
           (g.scheduler_config.empty() ? "" : " scheduler_config=" + g.scheduler_config.dump()) +
           " mode=" + exec::mode_name(g.mode) + (o.latents.empty() ? "" : " latents=" + o.latents);
}

void run_labels(Session& s) {
    const GenerateFlags& o = s.o;
    const std::string bad = o.first_text_only_given();
    KILN_CHECK(bad.empty(), s.model, " is a class-conditional DiT model: ", bad,
               " does not apply (use --class-labels)");
    models::GenerateOptions g;
    static_cast<models::CommonOptions&>(g) = common_options(o);
    g.labels = parse_labels(o.labels, s.src.model_index());
    g.images_per_label = o.images;
    const size_t n_images = g.labels.size() * (size_t)o.images;
    KILN_CHECK(o.out != "-" || o.grid || n_images == 1, "-o -: ", n_images,
               " images do not fit one standard output (add --grid)");
    g.steps = o.steps;
    g.guidance = o.guidance;
    if (!o.latents.empty()) g.latents_init = SafeTensors::open(o.latents).read("latents_init");
    g.progress = progress_printer(s.t0);
    s.open_device();
    std::fprintf(stderr, "kiln: %s on %s, %zu image(s), %d steps, guidance %.2f, seed %llu, mode %s\n", s.model.c_str(),
                 s.device.c_str(), n_images, g.steps, g.guidance, (unsigned long long)g.seed, exec::mode_name(g.mode));
    s.t0 = std::chrono::steady_clock::now();
    models::GenerateResult r;
    if (s.ctx) {
        const bool rss_reset = reset_peaks(*s.ctx);
        r = models::generate_dit(*s.ctx, s.src, g);
        profile(*s.ctx, r, rss_reset);
    } else {
        r = generate_labels(s.api.get(), s.model, g);
    }
    finish(s, r, g.steps, dit_settings(o, g), o.out, o.dump);
}

// ---- Text-to-image: PixArt, SD3, Flux ----

// A flag of one family's pipeline given for another: one line naming the flag, the pipeline it applies to and this one.
void check_family_flags(const GenerateFlags& o, const models::Family* family, const std::string& pipeline) {
    const std::pair<const char*, bool models::Family::*> only[] = {
        {"--text-encoder-layers", &models::Family::text_encoder_layers_option},
        {"--cfg-truncation", &models::Family::z_image_loop},
        {"--cfg-normalization", &models::Family::z_image_loop},
    };
    for (const auto& [flag, member] : only)
        KILN_CHECK(!o.given(flag) || (family && family->*member), flag, " applies to ",
                   models::family_with(member).pipelines[0].name, "; this model's pipeline is ", pipeline);
}

// The pipeline's options from the flags (not the texts, which each job sets, nor the latents).
models::T2IOptions text_options(const Session& s, const models::Family* family) {
    const GenerateFlags& o = s.o;
    const bool flux = family && family->id == models::FamilyId::flux;
    const std::string pipeline = models::t2i_pipeline_class(s.src);
    check_family_flags(o, family, pipeline.empty() ? "not a text-to-image one" : pipeline);
    models::T2IOptions t;
    static_cast<models::CommonOptions&>(t) = common_options(o);
    if (o.given("--steps")) t.steps = o.steps;
    if (o.given("--guidance")) t.guidance = o.guidance;
    // Flux's true CFG, as diffusers' has_neg_prompt: only above 1 and with a negative prompt (or, from
    // --prompt-embeds, both negative embeddings). negative_prompt_2 alone does not count: it only replaces what T5
    // reads of the negative prompt.
    bool negative_given = !o.texts.negatives.empty();
    if (!o.prompt_embeds.empty() && o.given("--true-cfg")) {
        const auto file = SafeTensors::open(o.prompt_embeds);  // the header only
        negative_given = file.find("negative_prompt_embeds") && file.find("negative_pooled_prompt_embeds");
    }
    if (o.given("--true-cfg")) {
        KILN_CHECK(flux,
                   "--true-cfg applies to Flux (diffusers' true_cfg_scale); this pipeline's guidance scale is "
                   "--guidance");
        if (o.true_cfg > 1 && !negative_given)
            std::fprintf(stderr,
                         "kiln: warning: --true-cfg %g without a negative prompt: no classifier-free guidance (as "
                         "diffusers%s)\n",
                         o.true_cfg,
                         o.texts.negatives_2.empty() ? "" : "; --negative-prompt-2 alone does not turn it on");
        else
            t.true_cfg_scale = o.true_cfg;
    }
    t.sigmas = parse_numbers(o.sigmas, "--sigmas");
    t.timesteps = parse_numbers(o.timesteps, "--timesteps");
    t.eta = o.eta;
    t.skip_guidance_layers = parse_indices(o.skip_layers, "--skip-guidance-layers", "a block index");
    t.skip_layer_guidance_scale = o.slg_scale;
    t.skip_layer_guidance_start = o.slg_start;
    t.skip_layer_guidance_stop = o.slg_stop;
    t.cfg_truncation = o.cfg_truncation;
    t.cfg_normalization = o.cfg_normalization;
    if (o.given("--width")) t.width = o.width;
    if (o.given("--height")) t.height = o.height;
    t.resolution_binning = !o.no_binning;
    t.images_per_prompt = o.images;
    for (const std::string& a : o.loras) {
        auto [path, scale] = layouts::parse_lora_arg(a);
        t.lora.files.push_back({path, scale});
    }
    t.lora.apply = o.lora_apply;
    t.lora.allow_unmatched = o.lora_allow_unmatched;
    t.inputs = image_inputs(o);
    return t;
}

// One generation per --prompt list, or per line of --prompt-file; none: one from --prompt-embeds.
std::vector<std::vector<std::string>> text_jobs(const Session& s, const models::T2IPlan& plan) {
    const GenerateFlags& o = s.o;
    std::vector<std::vector<std::string>> jobs;
    if (!o.prompt_file.empty()) {
        KILN_CHECK(o.prompts.empty() && o.prompt_embeds.empty(), "--prompt-file replaces --prompt and --prompt-embeds");
        jobs = read_prompt_file(o.prompt_file);
    } else if (!o.prompts.empty()) {
        jobs.push_back(o.prompts);
    }
    KILN_CHECK(!jobs.empty() || !o.prompt_embeds.empty(), s.model, " is a text-to-image model (", plan.pipeline,
               "): give --prompt TEXT (or --prompt-embeds FILE)");
    KILN_CHECK(o.prompts.empty() || o.prompt_embeds.empty(), "give either --prompt or --prompt-embeds, not both");
    return jobs;
}

// Every text but the prompts, which each job sets; checked against the pipeline for every job now.
models::PromptOptions job_texts(const Session& s, const std::vector<std::vector<std::string>>& jobs) {
    const GenerateFlags& o = s.o;
    models::PromptOptions texts = o.texts;
    texts.max_sequence_length = o.max_sequence_length;
    texts.clip_skip = o.clip_skip;
    texts.complex_human_instruction = complex_instruction(o);
    texts.text_encoder_layers = text_encoder_layers(o);
    KILN_CHECK(texts.text_encoder_layers.empty() || o.prompt_embeds.empty(),
               "--text-encoder-layers applies to --prompt; --prompt-embeds holds encoded prompts");
    KILN_CHECK(!o.clip_skip || o.prompt_embeds.empty(),
               "--clip-skip applies to --prompt; --prompt-embeds holds encoded prompts");
    KILN_CHECK(!texts.complex_human_instruction || o.prompt_embeds.empty(),
               "--complex-human-instruction applies to --prompt; --prompt-embeds holds encoded prompts");
    for (const GenerateFlag& f : generate_flags()) {
        if (!f.settings_key) continue;  // the text lists
        const auto& v = texts.*std::get<std::vector<std::string> models::PromptOptions::*>(f.target);
        KILN_CHECK(v.empty() || o.prompt_embeds.empty(), f.names,
                   " applies to --prompt; with --prompt-embeds the file gives the negative and per-encoder "
                   "embeddings");
        KILN_CHECK(v.size() <= 1 || o.prompt_file.empty(), "--prompt-file: give ", f.names,
                   " once (it applies to every line), not ", v.size(), " times");
    }
    for (auto& job : jobs) {
        texts.prompts = job;
        models::check_prompts(s.src, texts);
    }
    return texts;
}

// The settings written into the image: the texts as given (a list joined by " | "), then the call.
std::string text_settings(const GenerateFlags& o, const models::T2IPlan& plan, const models::T2IOptions& t,
                          const std::vector<std::string>& prompts, const models::PromptOptions& texts) {
    auto joined = [](const char* key, const std::vector<std::string>& v) {
        std::string out;
        for (auto& p : v) out += (out.empty() ? "" : " | ") + p;
        return v.empty() ? std::string() : std::string(" ") + key + "=" + out;
    };
    std::string settings = joined("prompt", prompts).substr(prompts.empty() ? 0 : 1);
    for (const GenerateFlag& f : generate_flags())
        if (f.settings_key)
            settings +=
                joined(f.settings_key, texts.*std::get<std::vector<std::string> models::PromptOptions::*>(f.target));
    const nlohmann::json& sched_config = t.scheduler_config;
    settings +=
        " pipeline=" + plan.pipeline + " size=" + std::to_string(plan.width) + "x" + std::to_string(plan.height) +
        " steps=" + std::to_string(plan.steps) + " guidance=" + std::to_string(plan.guidance) +
        " seed=" + std::to_string(t.seed) + noise_setting(t.noise_dtype) +
        (t.true_cfg_scale ? " true_cfg=" + std::to_string(*t.true_cfg_scale) : "") +
        " mode=" + exec::mode_name(t.mode) + (o.images > 1 ? " images=" + std::to_string(o.images) : "") +
        (o.sigmas.empty() ? "" : " sigmas=" + o.sigmas) + (o.timesteps.empty() ? "" : " timesteps=" + o.timesteps) +
        (plan.eta > 0 ? " eta=" + std::to_string(plan.eta) : "") +
        (t.scheduler.empty() ? "" : " scheduler=" + t.scheduler) +
        (sched_config.empty() ? "" : " scheduler_config=" + sched_config.dump()) +
        (o.skip_layers.empty()
             ? ""
             : " skip_guidance_layers=" + o.skip_layers + " skip_layer_guidance_scale=" + std::to_string(o.slg_scale) +
                   " skip_layer_guidance_start=" + std::to_string(o.slg_start) +
                   " skip_layer_guidance_stop=" + std::to_string(o.slg_stop)) +
        (o.clip_skip ? " clip_skip=" + std::to_string(o.clip_skip) : "") +
        (o.given("--complex-human-instruction") ? " complex_human_instruction=" + o.complex_human_instruction : "") +
        (o.given("--text-encoder-layers") ? " text_encoder_layers=" + o.text_encoder_layers : "") +
        (plan.family->z_image_loop ? " cfg_truncation=" + std::to_string(t.cfg_truncation) +
                                         " cfg_normalization=" + std::to_string(t.cfg_normalization)
                                   : "") +
        (o.prompt_embeds.empty() ? "" : " prompt_embeds=" + o.prompt_embeds) +
        (o.latents.empty() ? "" : " latents=" + o.latents) +
        (plan.img2img ? " strength=" + std::to_string(plan.strength) : "") +
        (o.image.empty() ? "" : " image=" + o.image) + (o.mask.empty() ? "" : " mask=" + o.mask) +
        (o.noise.empty() ? "" : " noise=" + o.noise) +
        (plan.kontext && o.max_area ? " max_area=" + std::to_string(o.max_area) : "") +
        (plan.kontext && o.no_auto_resize ? " auto_resize=false" : "");
    return settings;
}

void text_line(const GenerateFlags& o, size_t n, double tokenize_ms, double encode_ms, uint64_t needed,
               uint64_t allocated, bool reused) {
    std::fprintf(stderr,
                 "  text: %zu prompt(s), tokenize %.1f ms, encode %.0f ms; largest encoder %.1f MiB (weights + "
                 "activations; %.0f MiB allocated), %s\n",
                 n, tokenize_ms, encode_ms, (double)needed / (1 << 20), (double)allocated / (1 << 20),
                 o.keep_encoders ? (reused ? "resident (reused)" : "kept resident") : "freed");
}

// One job: through the C API (api), or with --profile the prompts encoded and the pipeline run on ctx (resident:
// --keep-encoders' encoders, kept from one job to the next). header() prints the job's line before the
// transformer runs.
models::GenerateResult run_text_job(Session& s, models::T2IOptions& t, const models::T2IPlan& plan,
                                    const models::PromptOptions& texts, const std::vector<std::string>& prompts,
                                    ModelPtr& api_model, models::EncoderCache& resident,
                                    const std::function<void()>& header) {
    const GenerateFlags& o = s.o;
    models::GenerateResult r;
    if (!s.ctx) {
        TextRequest q;
        q.texts = texts;
        q.texts.prompts = prompts;
        q.keep_encoders = o.keep_encoders;
        header();
        s.t0 = std::chrono::steady_clock::now();
        kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
        r = generate_text(api_model.get(), t, q, st);
        if (!prompts.empty())
            text_line(o, prompts.size(), st.tokenize_ms, st.encode_ms, st.text_encoder_bytes,
                      st.text_encoder_device_bytes, st.text_encoders_reused != 0);
        return r;
    }
    const bool rss_reset = reset_peaks(*s.ctx);
    std::vector<std::pair<std::string, Tensor>> text_dump;
    if (!prompts.empty()) {
        models::PromptOptions po = texts;
        po.prompts = prompts;
        po.cfg = plan.cfg;
        po.mode = t.mode;
        po.keep_intermediates = t.keep_intermediates;
        if (o.keep_encoders) po.keep = &resident;
        po.lora = t.lora;  // the LoRAs' text-encoder modules
        // Without --keep-encoders each encoder's device memory is freed as soon as it has run, before the
        // transformer's weights are uploaded: the peak is the largest, not the sum.
        auto enc = models::encode_prompts(s.ctx.get(), s.src, po);
        text_line(o, prompts.size(), enc.tokenize_ms, enc.encode_ms, enc.peak_needed_bytes, enc.peak_device_bytes,
                  enc.reused_encoders != 0);
        t.text = models::TextConditioning::from(enc.tensors);
        text_dump = std::move(enc.intermediates);
    }
    header();
    s.t0 = std::chrono::steady_clock::now();
    r = models::generate_t2i(*s.ctx, s.src, t);
    profile(*s.ctx, r, rss_reset);
    r.intermediates.insert(r.intermediates.begin(), text_dump.begin(), text_dump.end());
    return r;
}

// NAME-<job>.png (or .jpg; NAME-<job>.safetensors for --dump): the files of one line of --prompt-file.
std::string numbered(const std::string& path, const std::string& ext, size_t job) {
    std::string base = path;
    if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0)
        base.resize(base.size() - ext.size());
    return base + "-" + std::to_string(job) + ext;
}

void run_text(Session& s) {
    const GenerateFlags& o = s.o;
    const std::string pipeline = models::t2i_pipeline_class(s.src);
    KILN_CHECK(!o.given("--class-labels"), s.model, " is a text-to-image model (",
               pipeline.empty() ? s.src.class_of("transformer") : pipeline,
               "): --class-labels does not apply (use --prompt-embeds)");
    const models::Family* family = models::model_family(s.src);
    const bool flux = family && family->id == models::FamilyId::flux;
    models::T2IOptions t = text_options(s, family);
    const auto plan = models::plan_t2i(s.src, t);  // defaults and size checks before any heavy work
    std::vector<std::vector<std::string>> jobs = text_jobs(s, plan);
    const models::PromptOptions texts = job_texts(s, jobs);
    if (flux && !plan.cfg && !(texts.negatives.empty() && texts.negatives_2.empty()))
        std::fprintf(stderr,
                     "kiln: warning: %s runs classifier-free guidance only with --true-cfg > 1 (diffusers' "
                     "true_cfg_scale): --negative-prompt and --negative-prompt-2 are ignored\n",
                     pipeline.c_str());
    if (!o.latents.empty()) t.latents_init = SafeTensors::open(o.latents).read("latents_init");
    if (!o.prompt_embeds.empty()) t.text = models::TextConditioning::read(SafeTensors::open(o.prompt_embeds));
    if (jobs.empty()) jobs.push_back({});  // one generation from --prompt-embeds
    if (o.out == "-") {                    // one PNG to standard output: one generation of one image, or a grid
        KILN_CHECK(jobs.size() == 1, "-o -: --prompt-file writes one image file per line (give -o NAME.png)");
        const int64_t rows = jobs[0].empty() ? (t.text.prompt_embeds.shape.empty() ? 1 : t.text.prompt_embeds.shape[0])
                                             : (int64_t)jobs[0].size();
        KILN_CHECK(o.grid || rows * o.images == 1, "-o -: ", rows * o.images,
                   " images do not fit one standard output (add --grid)");
    }
    s.open_device();
    ModelPtr api_model = s.api ? open_model(s.api.get(), s.spec) : nullptr;
    models::EncoderCache resident;  // --keep-encoders: encoders stay uploaded from one prompt to the next
    for (size_t job = 0; job < jobs.size(); ++job) {
        const auto& prompts = jobs[job];
        t.progress = progress_printer(s.t0);
        auto header = [&] {
            char true_cfg[48] = "";
            if (flux && plan.cfg) std::snprintf(true_cfg, sizeof true_cfg, ", true CFG %.2f", plan.cfg_scale);
            std::fprintf(stderr, "kiln: %s (%s) on %s, %dx%d, %d steps, guidance %.2f%s, seed %llu, mode %s%s\n",
                         s.model.c_str(), plan.pipeline.c_str(), s.device.c_str(), plan.width, plan.height, plan.steps,
                         plan.guidance, true_cfg, (unsigned long long)t.seed, exec::mode_name(t.mode),
                         o.images > 1 ? (", " + std::to_string(o.images) + " images per prompt").c_str() : "");
        };
        const models::GenerateResult r = run_text_job(s, t, plan, texts, prompts, api_model, resident, header);
        const std::string settings = text_settings(o, plan, t, prompts, texts);
        if (jobs.size() == 1) {
            finish(s, r, plan.steps, settings, o.out, o.dump);
        } else {
            const std::string ext = image_extension(o.out);
            finish(s, r, plan.steps, settings, numbered(o.out, ext.empty() ? ".png" : ext, job),
                   o.dump.empty() ? "" : numbered(o.dump, ".safetensors", job));
        }
    }
}

models::ModelSource open_source(const ModelSpec& spec) {
    if (spec.model.rfind("synthetic:", 0) == 0) return models::ModelSource::synthetic(spec.model.substr(10));
    if (!spec.assembled()) return models::ModelSource::open(spec.model);
    return models::ModelSource::assemble(converter::assemble(component_files(spec)));
}

void run_generate(const GenerateFlags& o) {
    check_float_flags(o);  // NaN, infinities and values out of range, for every family, before the model is opened
    KILN_CHECK(o.vae_tile == 0 || o.vae_tiling, "--vae-tile-size needs --vae-tiling");
    if (o.out != "-") check_output_path(o.out, "-o");  // "-": standard output
    KILN_CHECK(o.upscale >= 1 && o.upscale <= 64, "--upscale ", o.upscale, " (1..64)");
    KILN_CHECK(o.quality >= 1 && o.quality <= 100, "--quality ", o.quality, " (1..100)");
    KILN_CHECK(o.images >= 1 && o.images <= 1000, "--images ", o.images, " (1..1000)");
    if (const std::string ext = std::filesystem::path(o.out).extension().string();
        !ext.empty() && image_extension(o.out).empty())
        std::fprintf(stderr, "kiln: warning: -o %s: '%s' is not .png, .jpg or .jpeg; writing PNG\n", o.out.c_str(),
                     ext.c_str());
    if (!o.dump.empty()) check_output_path(o.dump, "--dump");
    ModelSpec spec{o.model, o.parts};
    if (spec.model.empty() && !spec.assembled()) spec.model = default_model();
    Session s{o, spec, spec.display(), open_source(spec)};
    KILN_CHECK(s.src.incomplete().empty(), s.model, ": ", s.src.incomplete());
    for (const std::string& note : s.src.notes()) std::fprintf(stderr, "kiln: %s\n", note.c_str());
    const models::Family* family = models::model_family(s.src);
    if (family && family->id == models::FamilyId::dit)
        run_labels(s);
    else
        run_text(s);
}
}  // namespace

Run add_generate(CLI::App& app) {
    auto o = std::make_shared<GenerateFlags>();
    add_generate_flags(app, *o);
    app.footer(
        "Examples:\n  kiln generate -o digits.png --class-labels 0,1,2,3,4,5,6,7,8,9 --grid --upscale 4\n"
        "  kiln generate --model dit-xl-2-256.kiln --class-labels 207,360 --steps 25 -o out.png\n"
        "  kiln generate --model sd3-medium.kiln --prompt \"a photo of a cat on a chair\" --negative-prompt blurry -o "
        "cat.png\n"
        "  kiln generate --model sd3-medium.kiln --prompt cat --prompt dog --negative-prompt blurry --negative-prompt "
        "dark --prompt-3 \"a long description for T5 only\" --grid\n"
        "  kiln generate --model flux-schnell.kiln --prompt \"a castle\" --prompt \"a lighthouse\" --steps 4 "
        "--guidance 0\n"
        "  kiln generate --model pixart-sigma.kiln --prompt-file prompts.txt --keep-encoders -o out.png\n"
        "  kiln generate --model pixart-sigma.kiln --prompt \"a fox\" --scheduler dpm++2m-sde-karras --seed 7\n"
        "  kiln generate --model pixart-sigma.kiln --prompt \"a fox\" --scheduler ddim --eta 1 --steps 50\n"
        "  kiln generate --diffusion-model flux1-dev-Q4_K_S.gguf --vae ae.safetensors --clip-l clip_l.safetensors "
        "--t5xxl t5xxl_fp16.safetensors --prompt \"a castle\"\n"
        "  kiln generate --model sd3.5_medium.safetensors --clip-l clip_l.safetensors --clip-g clip_g.safetensors "
        "--t5xxl t5xxl_fp16.safetensors --prompt \"a cat\"\n"
        "  kiln generate --model flux-dev.kiln --prompt \"the castle at night\" --image castle.png --strength 0.6\n"
        "  kiln generate --model sd3-medium.kiln --prompt \"a tabby cat\" --image cat.png --mask mask.png\n"
        "  kiln generate --model flux-dev.kiln --prompt \"a castle\" --lora watercolor.safetensors:0.8\n"
        "  kiln generate --model sd3-folder --prompt-embeds embeds.safetensors --width 1024 --height 768");
    return [o] { run_generate(*o); };
}

}  // namespace kiln::app
