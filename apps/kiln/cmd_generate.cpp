// kiln generate: DiTPipeline (class labels) or a text-to-image pipeline (PixArt, SD3, Flux) end to end, PNG out.
#include <signal.h>
#include <unistd.h>

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
#include "apps/kiln/png.h"
#include "apps/kiln/profile.h"
#include "models/dit_pipeline.h"
#include "models/t2i_pipeline.h"
#include "models/text/tokenizer.h"
#include "models/text_encode.h"
#include "runtime/core/error.h"
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
    const bool tty = isatty(2);
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

// diffusers' negative_prompt, prompt_2, prompt_3, negative_prompt_2 and negative_prompt_3: the flag, its key in the
// image's settings, the list it fills and its help. Each is given once (for every prompt) or once per --prompt.
struct TextList {
    const char* flag;
    const char* key;
    std::vector<std::string> models::PromptOptions::*list;
    const char* help;
};
const TextList kTextLists[] = {
    {"--negative-prompt", "negative", &models::PromptOptions::negatives,
     "Text models: the negative prompt (diffusers' negative_prompt; default \"\"; PixArt, SD3)"},
    {"--prompt-2", "prompt_2", &models::PromptOptions::prompts_2,
     "SD3: the prompt CLIP-G reads; Flux: the prompt T5 reads (diffusers' prompt_2; default: the prompt)"},
    {"--prompt-3", "prompt_3", &models::PromptOptions::prompts_3,
     "SD3: the prompt T5 reads (diffusers' prompt_3; default: the prompt)"},
    {"--negative-prompt-2", "negative_2", &models::PromptOptions::negatives_2,
     "SD3: the negative prompt CLIP-G reads (diffusers' negative_prompt_2; default: --negative-prompt)"},
    {"--negative-prompt-3", "negative_3", &models::PromptOptions::negatives_3,
     "SD3: the negative prompt T5 reads (diffusers' negative_prompt_3; default: --negative-prompt)"}};
}  // namespace

Run add_generate(CLI::App& app) {
    struct Opts {
        std::string model, labels = "0", out = "kiln.png", scheduler, mode = "regional", latents, dump;
        std::vector<std::string> scheduler_config;  // KEY=VALUE
        std::vector<std::string> prompts;
        models::PromptOptions texts;  // the kTextLists the options fill (not the prompts: --prompt-file has its own)
        std::string prompt_embeds, prompt_file, vram_budget, sigmas, timesteps, skip_layers;
        double slg_scale = 2.8, slg_start = 0.01, slg_stop = 0.2, eta = 0;
        int steps = 25, device = -1, upscale = 1, quality = 95, images = 1, width = 0, height = 0,
            max_sequence_length = 0, vae_tile = 0, clip_skip = 0;
        double guidance = 4.0, true_cfg = 1.0;
        uint64_t seed = 0;
        std::string noise_dtype = "f32";
        bool grid = false, no_binning = false, keep_encoders = false, vae_tiling = false, profile = false,
             host_loop = false;
        CLI::Option *labels_opt = nullptr, *steps_opt = nullptr, *guidance_opt = nullptr, *true_cfg_opt = nullptr;
        std::vector<CLI::Option*> text_opts, size_opts;
    };
    auto o = std::make_shared<Opts>();
    app.add_option("--model", o->model,
                   "Kiln model file or diffusers pipeline folder: DiT (class labels), PixArt-alpha/Sigma, SD3 or Flux "
                   "(text); default: built-in dit-digits; synthetic:dit-xl-2-256 = real architecture, random weights");
    o->labels_opt = app.add_option("--class-labels", o->labels,
                                   "DiT: comma-separated class ids or label names, one image each (default 0)");
    o->text_opts.push_back(app.add_option("--prompt", o->prompts,
                                          "Text models: the prompt (UTF-8); repeat for several images, batched as "
                                          "diffusers batches a list of prompts")
                               ->expected(1)
                               ->take_all());
    for (const TextList& l : kTextLists)
        o->text_opts.push_back(
            app.add_option(l.flag, o->texts.*l.list,
                           std::string(l.help) + ". Once for every prompt, or repeated: one per --prompt")
                ->expected(1)
                ->take_all());
    o->text_opts.push_back(app.add_option("--prompt-file", o->prompt_file,
                                          "Text models: one generation per non-empty line of this UTF-8 file ('-' = "
                                          "stdin); images NAME-<line>.png (or .jpg)"));
    o->text_opts.push_back(app.add_flag("--keep-encoders", o->keep_encoders,
                                        "Text models: keep the text encoders on the device between the prompts of "
                                        "--prompt-file (no re-planning or re-upload; costs their memory)"));
    o->text_opts.push_back(app.add_option("--max-sequence-length", o->max_sequence_length,
                                          "Text models: T5 token count (default: the pipeline's)"));
    o->text_opts.push_back(
        app.add_option("--clip-skip", o->clip_skip,
                       "SD3: diffusers' clip_skip: the prompts' CLIP embeddings from hidden_states[-(N + 2)] instead "
                       "of the penultimate layer's (the negative prompts keep it, as diffusers)")
            ->check(CLI::NonNegativeNumber));
    o->text_opts.push_back(app.add_option(
        "--prompt-embeds", o->prompt_embeds,
        "Text models: safetensors with encode_prompt's outputs (prompt_embeds, negative_prompt_embeds, "
        "pooled_prompt_embeds, negative_pooled_prompt_embeds, prompt_attention_mask, negative_prompt_attention_mask); "
        "skips the text encoders, one image per prompt_embeds row"));
    o->text_opts.push_back(app.add_flag("--no-resolution-binning", o->no_binning,
                                        "PixArt: generate at exactly --width x --height (diffusers' "
                                        "use_resolution_binning=False)"));
    o->size_opts.push_back(app.add_option("--width", o->width, "Text models: image width (default: the model's)"));
    o->size_opts.push_back(app.add_option("--height", o->height, "Text models: image height (default: the model's)"));
    app.add_option("--images,--num-images-per-prompt", o->images,
                   "Images per prompt or class label (diffusers' num_images_per_prompt), each from its own noise, all "
                   "in one batch; prompts are encoded once. --prompt a --prompt b --images 2 draws a, a, b, b")
        ->capture_default_str();
    o->steps_opt = app.add_option("--steps", o->steps, "Denoising steps (default: the pipeline's; DiT 25)");
    o->guidance_opt = app.add_option("--guidance", o->guidance,
                                     "Guidance scale, 1 = off (default: the pipeline's; DiT 4.0; Flux: embedded)");
    o->true_cfg_opt = app.add_option(
        "--true-cfg", o->true_cfg,
        "Flux: diffusers' true_cfg_scale. Above 1 with --negative-prompt: classifier-free guidance on top of the "
        "embedded --guidance, negative + s * (prompt - negative), at twice the transformer work (default 1: off)");
    o->text_opts.push_back(o->true_cfg_opt);
    o->text_opts.push_back(app.add_option(
        "--sigmas", o->sigmas,
        "diffusers' sigmas, comma-separated (default: the pipeline's; the step count is theirs). SD3, Flux: one per "
        "step in [0, 1], the flow-matching schedule before the scheduler's shift. PixArt with --scheduler euler: "
        "Euler's whole schedule, the final sigma included (one step fewer than values)"));
    o->text_opts.push_back(app.add_option(
        "--eta", o->eta,
        "PixArt with --scheduler ddim: diffusers' eta, 0 = deterministic DDIM, 1 = DDPM's variance. Above 0 every "
        "step adds noise drawn from --seed's generator after the initial noise, as diffusers draws it (default 0)"));
    o->text_opts.push_back(app.add_option(
        "--timesteps", o->timesteps,
        "PixArt: diffusers' timesteps, comma-separated training timesteps, one per step, strictly decreasing in [0, "
        "num_train_timesteps), e.g. 999,845,730,587,443,310,193,116,53,13 (default: the scheduler's spacing; the "
        "step count is theirs). DPM-Solver (integers) and --scheduler euler take them; DDIM does not"));
    o->text_opts.push_back(app.add_option(
        "--skip-guidance-layers", o->skip_layers,
        "SD3 (SD3.5): diffusers' skip-layer guidance, the blocks to leave out, comma-separated (e.g. 7,8,9 for "
        "SD3.5 Medium). With classifier-free guidance, the steps in the window make one more transformer call on "
        "the prompt rows without those blocks: noise += (text - skip) * scale. Runs the loop on the host"));
    o->text_opts.push_back(app.add_option("--skip-layer-guidance-scale", o->slg_scale, "Skip-layer guidance scale")
                               ->capture_default_str());
    o->text_opts.push_back(app.add_option("--skip-layer-guidance-start", o->slg_start,
                                          "Skip-layer guidance from the steps after this fraction of them")
                               ->capture_default_str());
    o->text_opts.push_back(app.add_option("--skip-layer-guidance-stop", o->slg_stop,
                                          "Skip-layer guidance until the steps before this fraction of them")
                               ->capture_default_str());
    app.add_option("--seed", o->seed,
                   "Seed of the initial noise: the noise diffusers draws with generator=torch.manual_seed(SEED) "
                   "(PyTorch's CPU generator, float32), so the same seed gives diffusers' image")
        ->capture_default_str();
    app.add_option("--noise-dtype", o->noise_dtype,
                   "The dtype the seeded noise is drawn in, as diffusers draws it in the pipeline's torch_dtype: f32 "
                   "(torch.float32), f16 (torch.float16) or bf16 (torch.bfloat16). A seed gives other noise in each; "
                   "the model runs in f32 either way")
        ->check(CLI::IsMember({"f32", "f16", "bf16"}))
        ->capture_default_str();
    app.add_option(
        "--scheduler", o->scheduler,
        "Override the model's scheduler: ddim, dpm (DPM-Solver++ 2M), euler, euler_a (Euler ancestral: each step "
        "adds noise from --seed's generator, as diffusers draws it), or a diffusers class name; presets "
        "dpm++2m-karras, dpm++2m-sde, dpm++2m-sde-karras, euler-karras (the class with use_karras_sigmas / "
        "algorithm_type=sde-dpmsolver++, as --scheduler-config sets them)");
    app.add_option(
        "--scheduler-config", o->scheduler_config,
        "A scheduler config field, KEY=VALUE (repeatable): diffusers' Scheduler.from_config(config, KEY=VALUE), "
        "e.g. use_karras_sigmas=true (DPM++ 2M Karras), timestep_spacing=trailing. VALUE is JSON (true, 2, "
        "0.5, \"text\") or else a string; a field the scheduler does not read is an error");
    app.add_option("--mode", o->mode, "JIT mode: eager | full | regional")->capture_default_str();
    app.add_option("--latents", o->latents,
                   "safetensors with tensor 'latents_init' [B, C, h, w]: exact initial noise (Flux packs it)");
    app.add_flag("--host-loop", o->host_loop,
                 "Run the denoising loop on the host (read back every step; guidance and scheduler on the CPU) "
                 "instead of on the device; same result. Also KILN_DEVICE_LOOP=0");
    app.add_option("--dump", o->dump, "Write intermediates (step{i}_latents, step{i}_noise_pred, decoded, image)");
    app.add_option(
           "-o,--output", o->out,
           "Image path: NAME.jpg or NAME.jpeg writes JPEG, anything else PNG; several images become NAME-0.png, "
           "NAME-1.png, ... (or --grid). The settings (model, labels or prompt, steps, guidance, seed, mode) go "
           "into the file: PNG tEXt chunks, JPEG comments. '-': one PNG to standard output (several images "
           "need --grid)")
        ->capture_default_str();
    app.add_option("--quality", o->quality, "JPEG quality, 1..100 (with -o NAME.jpg)")->capture_default_str();
    app.add_flag("--grid", o->grid, "Write all images into one grid image");
    app.add_flag("--vae-tiling", o->vae_tiling,
                 "Decode in overlapping tiles of the VAE's sample_size, as diffusers' vae.enable_tiling() (less "
                 "memory; seams blended)");
    app.add_option("--vae-tile-size", o->vae_tile,
                   "With --vae-tiling: tile side in pixels (diffusers' vae.tile_sample_min_size; SD3/Flux VAEs say "
                   "1024, so 1024 px images need a smaller tile to be tiled)");
    app.add_option("--upscale", o->upscale,
                   "Nearest-neighbour upscale of the image, 1..64 (the demo model draws 32x32)")
        ->capture_default_str();
    app.add_option("--device", o->device, "Vulkan device index (see `kiln devices`)");
    app.add_option("--vram-budget", o->vram_budget, kVramBudgetHelp);
    add_f16_activations_flag(app);
    add_transfer_queue_option(app);
    app.add_flag("--profile", o->profile,
                 "Print per denoising step: wall, GPU, host and host CPU time of the transformer run, device idle "
                 "(between submissions, and before the step: host work between steps), submissions, barriers; and "
                 "peak device memory and host RSS");
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
        "  kiln generate --model sd3-folder --prompt-embeds embeds.safetensors --width 1024 --height 768");
    return [o] {
        KILN_CHECK(o->vae_tile == 0 || o->vae_tiling, "--vae-tile-size needs --vae-tiling");
        if (o->out != "-") check_output_path(o->out, "-o");  // "-": standard output
        KILN_CHECK(o->upscale >= 1 && o->upscale <= 64, "--upscale ", o->upscale, " (1..64)");
        KILN_CHECK(o->quality >= 1 && o->quality <= 100, "--quality ", o->quality, " (1..100)");
        KILN_CHECK(o->images >= 1 && o->images <= 1000, "--images ", o->images, " (1..1000)");
        if (const std::string ext = std::filesystem::path(o->out).extension().string();
            !ext.empty() && image_extension(o->out).empty())
            std::fprintf(stderr, "kiln: warning: -o %s: '%s' is not .png, .jpg or .jpeg; writing PNG\n", o->out.c_str(),
                         ext.c_str());
        if (!o->dump.empty()) check_output_path(o->dump, "--dump");
        const std::string model = o->model.empty() ? default_model() : o->model;
        auto src = model.rfind("synthetic:", 0) == 0 ? models::ModelSource::synthetic(model.substr(10))
                                                     : models::ModelSource::open(model);
        const bool dit = src.has("transformer") && src.class_of("transformer") == "DiTTransformer2DModel";
        const nlohmann::json sched_config = parse_key_values(o->scheduler_config, "--scheduler-config");
        auto given = [](const std::vector<CLI::Option*>& opts) -> std::string {
            for (auto* op : opts)
                if (op->count()) return op->get_name();
            return "";
        };
        std::string settings;
        int n_steps = 1;
        models::GenerateResult r;
        auto finish = [&](const models::GenerateResult& r, int n_steps, const std::string& settings,
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
            write_images(r.image, out, o->grid, o->upscale, o->quality,
                         {{"Software", "kiln"}, {"kiln:model", model}, {"kiln:settings", settings}});
            if (!dump.empty()) write_safetensors(dump, r.intermediates);
        };
        // Generation goes through libkiln's C API (api); --profile (per-step figures and memory peaks, not in the C
        // API) and --host-loop use the C++ pipeline on a vk::Context (ctx).
        auto open_device = [&](ContextPtr& api, std::unique_ptr<vk::Context>& ctx) {
            const uint64_t budget = o->vram_budget.empty() ? 0 : exec::parse_bytes(o->vram_budget);
            if (o->profile || o->host_loop) {
                ctx = std::make_unique<vk::Context>(cli_settings(o->device));
                if (budget) ctx->set_vram_budget(budget);
            } else {
                api = open_context(o->device, budget);
            }
        };
        // --profile: the transformer's per-step figures and the memory peaks since rss_reset's reset_peaks().
        auto profile = [&](vk::Context& ctx, const models::GenerateResult& r, bool rss_reset) {
            if (!o->profile) return;
            std::vector<StepFigures> steps;
            for (size_t i = 0; i < r.transformer_runs.size(); ++i)
                steps.push_back({r.step_ms[i], r.transformer_runs[i]});
            if (!steps.empty()) {
                std::fprintf(
                    stderr, "  profile: transformer per denoising step (ms; idle_pre = device idle before the step)\n");
                print_steps(stderr, steps);
            } else if (!r.step_ms.empty()) {  // device loop: no host work per step to time, only completions
                std::vector<double> s = r.step_ms;
                std::sort(s.begin(), s.end());
                std::fprintf(stderr,
                             "  profile: loop on the device, %zu steps, step completions %.2f ms apart (median; "
                             "min %.2f, max %.2f); per-step GPU/host figures: --host-loop\n",
                             s.size(), s[s.size() / 2], s.front(), s.back());
            }
            const auto& tc = r.transformer_counters;
            std::fprintf(stderr, "  profile: transformer activations %.2f MiB planned (%.2f MiB unplanned); peak %s\n",
                         (double)tc.activation_bytes_planned / (1 << 20), (double)tc.activation_bytes_naive / (1 << 20),
                         peaks_line(read_peaks(ctx, rss_reset)).c_str());
        };
        auto t0 = std::chrono::steady_clock::now();
        if (dit) {
            std::string bad = given(o->text_opts);
            if (bad.empty()) bad = given(o->size_opts);
            KILN_CHECK(bad.empty(), model, " is a class-conditional DiT model: ", bad,
                       " does not apply (use --class-labels)");
            models::GenerateOptions g;
            g.labels = parse_labels(o->labels, src.model_index());
            g.images_per_label = o->images;
            const size_t n_images = g.labels.size() * (size_t)o->images;
            KILN_CHECK(o->out != "-" || o->grid || n_images == 1, "-o -: ", n_images,
                       " images do not fit one standard output (add --grid)");
            g.steps = o->steps;
            g.guidance = o->guidance;
            g.seed = o->seed;
            g.noise_dtype = parse_dtype(o->noise_dtype, "--noise-dtype");
            g.scheduler = o->scheduler;
            g.scheduler_config = sched_config;
            g.mode = exec::parse_mode(o->mode);
            g.keep_intermediates = !o->dump.empty();
            g.host_loop = o->host_loop;
            g.tiled_vae = o->vae_tiling;
            g.vae_tile_size = o->vae_tile;
            if (!o->latents.empty()) g.latents_init = SafeTensors::open(o->latents).read("latents_init");
            g.progress = progress_printer(t0);
            ContextPtr api;
            std::unique_ptr<vk::Context> ctx;
            open_device(api, ctx);
            std::fprintf(stderr, "kiln: %s on %s, %zu image(s), %d steps, guidance %.2f, seed %llu, mode %s\n",
                         model.c_str(), ctx ? ctx->info().name.c_str() : device_name(api.get()).c_str(), n_images,
                         g.steps, g.guidance, (unsigned long long)g.seed, exec::mode_name(g.mode));
            t0 = std::chrono::steady_clock::now();
            if (ctx) {
                const bool rss_reset = reset_peaks(*ctx);
                r = models::generate_dit(*ctx, src, g);
                profile(*ctx, r, rss_reset);
            } else {
                r = generate_labels(api.get(), model, g);
            }
            n_steps = g.steps;
            settings = "labels=" + o->labels + (o->images > 1 ? " images=" + std::to_string(o->images) : "") +
                       " steps=" + std::to_string(g.steps) + " guidance=" + std::to_string(g.guidance) +
                       " seed=" + std::to_string(g.seed) + noise_setting(g.noise_dtype) +
                       " scheduler=" + (g.scheduler.empty() ? "model" : g.scheduler) +
                       (sched_config.empty() ? "" : " scheduler_config=" + sched_config.dump()) +
                       " mode=" + exec::mode_name(g.mode) + (o->latents.empty() ? "" : " latents=" + o->latents);
        } else {
            KILN_CHECK(
                !o->labels_opt->count(), model, " is a text-to-image model (",
                models::t2i_pipeline_class(src).empty() ? src.class_of("transformer") : models::t2i_pipeline_class(src),
                "): --class-labels does not apply (use --prompt-embeds)");
            models::T2IOptions t;
            if (o->steps_opt->count()) t.steps = o->steps;
            if (o->guidance_opt->count()) t.guidance = o->guidance;
            // Flux's true CFG, as diffusers' has_neg_prompt: only above 1 and with a negative prompt (or, from
            // --prompt-embeds, both negative embeddings). negative_prompt_2 alone does not count: it only replaces
            // what T5 reads of the negative prompt.
            const bool flux = models::t2i_pipeline_class(src) == "FluxPipeline";
            bool negative_given = !o->texts.negatives.empty();
            if (!o->prompt_embeds.empty() && o->true_cfg_opt->count()) {
                const auto file = SafeTensors::open(o->prompt_embeds);  // the header only
                negative_given = file.find("negative_prompt_embeds") && file.find("negative_pooled_prompt_embeds");
            }
            if (o->true_cfg_opt->count()) {
                KILN_CHECK(flux,
                           "--true-cfg applies to Flux (diffusers' true_cfg_scale); this pipeline's guidance "
                           "scale is --guidance");
                KILN_CHECK(std::isfinite(o->true_cfg) && o->true_cfg > 0, "--true-cfg ", o->true_cfg,
                           " (> 1 is on, 1 off)");
                if (o->true_cfg > 1 && !negative_given)
                    std::fprintf(stderr,
                                 "kiln: warning: --true-cfg %g without a negative prompt: no classifier-free guidance "
                                 "(as diffusers%s)\n",
                                 o->true_cfg,
                                 o->texts.negatives_2.empty() ? "" : "; --negative-prompt-2 alone does not turn it on");
                else
                    t.true_cfg_scale = o->true_cfg;
            }
            t.sigmas = parse_numbers(o->sigmas, "--sigmas");
            t.timesteps = parse_numbers(o->timesteps, "--timesteps");
            t.eta = o->eta;
            t.skip_guidance_layers = parse_indices(o->skip_layers, "--skip-guidance-layers", "a block index");
            t.skip_layer_guidance_scale = o->slg_scale;
            t.skip_layer_guidance_start = o->slg_start;
            t.skip_layer_guidance_stop = o->slg_stop;
            if (o->size_opts[0]->count()) t.width = o->width;
            if (o->size_opts[1]->count()) t.height = o->height;
            t.resolution_binning = !o->no_binning;
            t.seed = o->seed;
            t.noise_dtype = parse_dtype(o->noise_dtype, "--noise-dtype");
            t.scheduler = o->scheduler;
            t.scheduler_config = sched_config;
            t.mode = exec::parse_mode(o->mode);
            t.keep_intermediates = !o->dump.empty();
            t.host_loop = o->host_loop;
            t.tiled_vae = o->vae_tiling;
            t.vae_tile_size = o->vae_tile;
            t.images_per_prompt = o->images;
            const auto plan = models::plan_t2i(src, t);  // defaults and size checks before any heavy work
            // One generation per --prompt list, or per line of --prompt-file.
            std::vector<std::vector<std::string>> jobs;
            if (!o->prompt_file.empty()) {
                KILN_CHECK(o->prompts.empty() && o->prompt_embeds.empty(),
                           "--prompt-file replaces --prompt and --prompt-embeds");
                jobs = read_prompt_file(o->prompt_file);
            } else if (!o->prompts.empty()) {
                jobs.push_back(o->prompts);
            }
            KILN_CHECK(!jobs.empty() || !o->prompt_embeds.empty(), model, " is a text-to-image model (", plan.pipeline,
                       "): give --prompt TEXT (or --prompt-embeds FILE)");
            KILN_CHECK(o->prompts.empty() || o->prompt_embeds.empty(),
                       "give either --prompt or --prompt-embeds, not both");
            // Every text but the prompts, which each job sets; checked against the pipeline for every job now.
            models::PromptOptions texts = o->texts;
            texts.max_sequence_length = o->max_sequence_length;
            texts.clip_skip = o->clip_skip;
            KILN_CHECK(!o->clip_skip || o->prompt_embeds.empty(),
                       "--clip-skip applies to --prompt; --prompt-embeds holds encoded prompts");
            for (const TextList& l : kTextLists) {
                const auto& v = texts.*l.list;
                KILN_CHECK(v.empty() || o->prompt_embeds.empty(), l.flag,
                           " applies to --prompt; with --prompt-embeds the file gives the negative and per-encoder "
                           "embeddings");
                KILN_CHECK(v.size() <= 1 || o->prompt_file.empty(), "--prompt-file: give ", l.flag,
                           " once (it applies to every line), not ", v.size(), " times");
            }
            for (auto& job : jobs) {
                texts.prompts = job;
                models::check_prompts(src, texts);
            }
            if (flux && !plan.cfg && !(texts.negatives.empty() && texts.negatives_2.empty()))
                std::fprintf(stderr,
                             "kiln: warning: FluxPipeline runs classifier-free guidance only with --true-cfg > 1 "
                             "(diffusers' true_cfg_scale): --negative-prompt and --negative-prompt-2 are ignored\n");
            if (!o->latents.empty()) t.latents_init = SafeTensors::open(o->latents).read("latents_init");
            if (!o->prompt_embeds.empty()) t.text = models::TextConditioning::read(SafeTensors::open(o->prompt_embeds));
            if (jobs.empty()) jobs.push_back({});  // one generation from --prompt-embeds
            if (o->out == "-") {                   // one PNG to standard output: one generation of one image, or a grid
                KILN_CHECK(jobs.size() == 1, "-o -: --prompt-file writes one image file per line (give -o NAME.png)");
                const int64_t rows = jobs[0].empty()
                                         ? (t.text.prompt_embeds.shape.empty() ? 1 : t.text.prompt_embeds.shape[0])
                                         : (int64_t)jobs[0].size();
                KILN_CHECK(o->grid || rows * o->images == 1, "-o -: ", rows * o->images,
                           " images do not fit one standard output (add --grid)");
            }
            ContextPtr api;
            std::unique_ptr<vk::Context> ctx;
            open_device(api, ctx);
            ModelPtr api_model = api ? open_model(api.get(), model) : nullptr;
            const std::string device = ctx ? ctx->info().name : device_name(api.get());
            models::EncoderCache resident;  // --keep-encoders: encoders stay uploaded from one prompt to the next
            auto text_line = [&](size_t n, double tokenize_ms, double encode_ms, uint64_t needed, uint64_t allocated,
                                 bool reused) {
                std::fprintf(stderr,
                             "  text: %zu prompt(s), tokenize %.1f ms, encode %.0f ms; largest encoder %.1f MiB "
                             "(weights + activations; %.0f MiB allocated), %s\n",
                             n, tokenize_ms, encode_ms, (double)needed / (1 << 20), (double)allocated / (1 << 20),
                             o->keep_encoders ? (reused ? "resident (reused)" : "kept resident") : "freed");
            };
            for (size_t job = 0; job < jobs.size(); ++job) {
                const auto& prompts = jobs[job];
                t.progress = progress_printer(t0);
                auto header = [&] {
                    char true_cfg[48] = "";
                    if (flux && plan.cfg) std::snprintf(true_cfg, sizeof true_cfg, ", true CFG %.2f", plan.cfg_scale);
                    std::fprintf(
                        stderr, "kiln: %s (%s) on %s, %dx%d, %d steps, guidance %.2f%s, seed %llu, mode %s%s\n",
                        model.c_str(), plan.pipeline.c_str(), device.c_str(), plan.width, plan.height, plan.steps,
                        plan.guidance, true_cfg, (unsigned long long)t.seed, exec::mode_name(t.mode),
                        o->images > 1 ? (", " + std::to_string(o->images) + " images per prompt").c_str() : "");
                };
                if (!ctx) {
                    TextRequest q;
                    q.texts = texts;
                    q.texts.prompts = prompts;
                    q.keep_encoders = o->keep_encoders;
                    header();
                    t0 = std::chrono::steady_clock::now();
                    kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
                    r = generate_text(api_model.get(), t, q, st);
                    if (!prompts.empty())
                        text_line(prompts.size(), st.tokenize_ms, st.encode_ms, st.text_encoder_bytes,
                                  st.text_encoder_device_bytes, st.text_encoders_reused != 0);
                } else {
                    const bool rss_reset = reset_peaks(*ctx);
                    std::vector<std::pair<std::string, Tensor>> text_dump;
                    if (!prompts.empty()) {
                        models::PromptOptions po = texts;
                        po.prompts = prompts;
                        po.cfg = plan.cfg;
                        po.mode = t.mode;
                        po.keep_intermediates = t.keep_intermediates;
                        if (o->keep_encoders) po.keep = &resident;
                        // Without --keep-encoders each encoder's device memory is freed as soon as it has run,
                        // before the transformer's weights are uploaded: the peak is the largest, not the sum.
                        auto enc = models::encode_prompts(ctx.get(), src, po);
                        text_line(prompts.size(), enc.tokenize_ms, enc.encode_ms, enc.peak_needed_bytes,
                                  enc.peak_device_bytes, enc.reused_encoders != 0);
                        t.text = models::TextConditioning::from(enc.tensors);
                        text_dump = std::move(enc.intermediates);
                    }
                    header();
                    t0 = std::chrono::steady_clock::now();
                    r = models::generate_t2i(*ctx, src, t);
                    profile(*ctx, r, rss_reset);
                    r.intermediates.insert(r.intermediates.begin(), text_dump.begin(), text_dump.end());
                }
                // The texts as given, a list joined by " | ".
                auto joined = [](const char* key, const std::vector<std::string>& v) {
                    std::string out;
                    for (auto& p : v) out += (out.empty() ? "" : " | ") + p;
                    return v.empty() ? std::string() : std::string(" ") + key + "=" + out;
                };
                settings = joined("prompt", prompts).substr(prompts.empty() ? 0 : 1);
                for (const TextList& l : kTextLists) settings += joined(l.key, texts.*l.list);
                settings += " pipeline=" + plan.pipeline + " size=" + std::to_string(plan.width) + "x" +
                            std::to_string(plan.height) + " steps=" + std::to_string(plan.steps) +
                            " guidance=" + std::to_string(plan.guidance) + " seed=" + std::to_string(t.seed) +
                            noise_setting(t.noise_dtype) +
                            (t.true_cfg_scale ? " true_cfg=" + std::to_string(*t.true_cfg_scale) : "") +
                            " mode=" + exec::mode_name(t.mode) +
                            (o->images > 1 ? " images=" + std::to_string(o->images) : "") +
                            (o->sigmas.empty() ? "" : " sigmas=" + o->sigmas) +
                            (o->timesteps.empty() ? "" : " timesteps=" + o->timesteps) +
                            (plan.eta > 0 ? " eta=" + std::to_string(plan.eta) : "") +
                            (t.scheduler.empty() ? "" : " scheduler=" + t.scheduler) +
                            (sched_config.empty() ? "" : " scheduler_config=" + sched_config.dump()) +
                            (o->skip_layers.empty() ? ""
                                                    : " skip_guidance_layers=" + o->skip_layers +
                                                          " skip_layer_guidance_scale=" + std::to_string(o->slg_scale) +
                                                          " skip_layer_guidance_start=" + std::to_string(o->slg_start) +
                                                          " skip_layer_guidance_stop=" + std::to_string(o->slg_stop)) +
                            (o->clip_skip ? " clip_skip=" + std::to_string(o->clip_skip) : "") +
                            (o->prompt_embeds.empty() ? "" : " prompt_embeds=" + o->prompt_embeds) +
                            (o->latents.empty() ? "" : " latents=" + o->latents);
                if (jobs.size() == 1) {
                    finish(r, plan.steps, settings, o->out, o->dump);
                } else {  // NAME-<line>.png or .jpg (and NAME-<line>.safetensors for --dump)
                    auto numbered = [&](const std::string& path, const std::string& ext) {
                        std::string base = path;
                        if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0)
                            base.resize(base.size() - ext.size());
                        return base + "-" + std::to_string(job) + ext;
                    };
                    const std::string ext = image_extension(o->out);
                    finish(r, plan.steps, settings, numbered(o->out, ext.empty() ? ".png" : ext),
                           o->dump.empty() ? "" : numbered(o->dump, ".safetensors"));
                }
            }
            return;
        }
        finish(r, n_steps, settings, o->out, o->dump);
    };
}

}  // namespace kiln::app
