// kiln generate's flag table: every flag, its help, the field it fills and the models it applies to, in the order
// `kiln generate --help` lists them.
#include "apps/kiln/generate_flags.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "apps/kiln/commands.h"
#include "apps/kiln/generate_args.h"
#include "apps/kiln/png.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"

namespace kiln::app {

namespace {
using F = GenerateFlags;
using P = models::PromptOptions;
using O = models::FloatOption;
constexpr FlagScope kAny = FlagScope::any, kText = FlagScope::text, kSize = FlagScope::size;
#define KILN_PER_PROMPT ". Once for every prompt, or repeated: one per --prompt"

// Rows: names, field, help, scope, show default, one per prompt, check, settings key.
std::vector<GenerateFlag> flag_table();
const std::vector<GenerateFlag> kFlags = flag_table();

// Images in (docs/images-in.md): img2img, inpainting, Flux Fill and Kontext.
std::vector<GenerateFlag> image_rows() {
    return {
        {"--image", &F::image,
         "SD3, Flux: start from this PNG or JPEG (diffusers' img2img pipelines): resized to --width x --height "
         "(default: the model's, as diffusers) with a Lanczos-3 filter, VAE-encoded, noised to the strength's first "
         "step",
         kText},
        {"--image-tensor", &F::image_tensor,
         "Instead of --image: safetensors with diffusers' preprocessed image 'image_preprocessed' [1, 3, H, W] in [-1, "
         "1] (exact runs; resized with nearest neighbours if its size differs)",
         kText},
        {"--mask", &F::mask,
         "SD3, Flux, with --image: inpaint (diffusers' inpaint pipelines). A PNG or JPEG the image's size, read as "
         "grayscale; >= 128 after the resize is repainted, the rest blended back after each step",
         kText},
        {"--mask-tensor", &F::mask_tensor,
         "Instead of --mask: safetensors with diffusers' 'mask_preprocessed' [1, 1, H, W] (1 = repaint)", kText},
        {"--strength", FloatFlag{&F::strength, O::strength},
         "With --image: how far the image is noised, in (0, 1]; the loop runs the last int(steps * strength) steps "
         "(default: the pipeline's, 0.6)",
         kText},
        {"--noise", &F::noise,
         "safetensors with diffusers' random draws by name: noise, image_vae_sample_noise, "
         "masked_image_vae_sample_noise, scm_noise_step{i} (Sana-Sprint's step i) (float32); each one present "
         "replaces that draw of --seed's generator",
         kText},
        {"--max-area", &F::max_area,
         "Flux Kontext: diffusers' max_area, the output's area in pixels at the aspect of --width / --height (default "
         "1048576 = 1024^2)",
         kText},
        {"--no-auto-resize", &F::no_auto_resize,
         "Flux Kontext: the reference image at its own size (diffusers' _auto_resize=False) instead of the preferred "
         "resolution nearest its aspect",
         kText},
    };
}

// LoRAs (docs/lora.md).
std::vector<GenerateFlag> lora_rows() {
    return {
        {"--lora", &F::loras,
         "SD3, Flux: a LoRA, FILE[:SCALE] (repeatable; SCALE default 1 = diffusers' adapter weight x its "
         "joint_attention_kwargs scale): diffusers/PEFT, kohya, ComfyUI/BFL or XLabs safetensors, applied as trained "
         "(alpha / rank x B A per module; docs/lora.md). Each file's matched tensor count is printed",
         kText},
        {"--lora-apply", &F::lora_apply,
         "How --lora is applied: runtime (the default: a low-rank side path beside each targeted linear, y = W x + "
         "s B (A x), s device data; the base weights untouched, quantized ones included) or merge (folded into the "
         "f32/f16/bf16 weights at load, as diffusers' fuse_lora; no per-step cost)",
         kText, true},
        {"--lora-allow-unmatched", &F::lora_allow_unmatched,
         "LoRA keys that match no module of the model are a warning (applied: the rest, as diffusers) instead of an "
         "error",
         kText},
    };
}

// The text models' prompt and conditioning rows.
std::vector<GenerateFlag> prompt_rows() {
    return {
        {"--prompt", &F::prompts,
         "Text models: the prompt (UTF-8); repeat for several images, batched as diffusers batches a list of prompts",
         kText, false, true},
        // diffusers' negative_prompt, prompt_2, prompt_3, negative_prompt_2 and negative_prompt_3.
        {"--negative-prompt", &P::negatives,
         "Text models: the negative prompt (diffusers' negative_prompt; default \"\"; PixArt, SD3)" KILN_PER_PROMPT,
         kText, false, true, FlagCheck::none, "negative"},
        {"--prompt-2", &P::prompts_2,
         "SD3: the prompt CLIP-G reads; Flux: the prompt T5 reads (diffusers' prompt_2; default: the "
         "prompt)" KILN_PER_PROMPT,
         kText, false, true, FlagCheck::none, "prompt_2"},
        {"--prompt-3", &P::prompts_3,
         "SD3: the prompt T5 reads (diffusers' prompt_3; default: the prompt)" KILN_PER_PROMPT, kText, false, true,
         FlagCheck::none, "prompt_3"},
        {"--negative-prompt-2", &P::negatives_2,
         "SD3: the negative prompt CLIP-G reads (diffusers' negative_prompt_2; default: "
         "--negative-prompt)" KILN_PER_PROMPT,
         kText, false, true, FlagCheck::none, "negative_2"},
        {"--negative-prompt-3", &P::negatives_3,
         "SD3: the negative prompt T5 reads (diffusers' negative_prompt_3; default: --negative-prompt)" KILN_PER_PROMPT,
         kText, false, true, FlagCheck::none, "negative_3"},
        {"--prompt-file", &F::prompt_file,
         "Text models: one generation per non-empty line of this UTF-8 file ('-' = stdin); images NAME-<line>.png (or "
         ".jpg)",
         kText},
        {"--keep-encoders", &F::keep_encoders,
         "Text models: keep the text encoders on the device between the prompts of --prompt-file (no re-planning or "
         "re-upload; costs their memory)",
         kText},
        {"--max-sequence-length", &F::max_sequence_length, "Text models: T5 token count (default: the pipeline's)",
         kText},
        {"--complex-human-instruction", &F::complex_human_instruction,
         "Sana, Sana-Sprint: diffusers' complex_human_instruction, the text each prompt is appended to before Gemma-2 "
         "encodes it (default: the pipeline's 8 lines asking for an 'Enhanced prompt', ending 'User Prompt: '). "
         "TEXT: that text; @FILE: the UTF-8 file's lines, joined by newlines as diffusers joins the list; none: no "
         "instruction (diffusers' None), the prompt alone to --max-sequence-length tokens. With one, the prompt is "
         "encoded to n + max_sequence_length - 2 tokens (n: the instruction's) and the embeddings of <bos> and the "
         "last max_sequence_length - 1 are kept. Negative prompts never get it",
         kText},
        {"--clip-skip", &F::clip_skip,
         "SD3: diffusers' clip_skip: the prompts' CLIP embeddings from hidden_states[-(N + 2)] instead of the "
         "penultimate layer's (the negative prompts keep it, as diffusers)",
         kText, false, false, FlagCheck::non_negative},
        {"--text-encoder-layers", &F::text_encoder_layers,
         "FLUX.2 [klein] (Flux2KleinPipeline): diffusers' text_encoder_out_layers, comma-separated: the Qwen3 "
         "hidden_states whose outputs the prompt embeddings stack on features, in order (transformers' numbering: 0 = "
         "the embeddings, i = after layer i, negative from the end, e.g. -2). Default: the pipeline's 9,18,27. The "
         "transformer expects as many as it was trained with (its joint_attention_dim = their count x Qwen3's width)",
         kText},
        {"--prompt-embeds", &F::prompt_embeds,
         "Text models: safetensors with encode_prompt's outputs (prompt_embeds, negative_prompt_embeds, "
         "pooled_prompt_embeds, negative_pooled_prompt_embeds, prompt_attention_mask, negative_prompt_attention_mask); "
         "skips the text encoders, one image per prompt_embeds row",
         kText},
        {"--no-resolution-binning", &F::no_binning,
         "PixArt: generate at exactly --width x --height (diffusers' use_resolution_binning=False)", kText},
    };
}

// The rows, with apps/component_flags.h's after --model.
std::vector<GenerateFlag> flag_table() {
    std::vector<GenerateFlag> rows = {
        {"--model", &F::model,
         "Kiln model file, diffusers pipeline folder, or a single file as published (Stability's SD3/SD3.5 file, a "
         "Flux "
         "file with --vae etc.): DiT (class labels), PixArt-alpha/Sigma, SD3 or Flux (text); default: built-in "
         "dit-digits; synthetic:dit-xl-2-256 = real architecture, random weights"},
        {"--class-labels", &F::labels, "DiT: comma-separated class ids or label names, one image each (default 0)"},
    };
    const std::vector<GenerateFlag> prompts = prompt_rows();  // after --class-labels
    rows.insert(rows.end(), prompts.begin(), prompts.end());
    rows.insert(
        rows.end(),
        {
            {"--width", &F::width, "Text models: image width (default: the model's)", kSize},
            {"--height", &F::height, "Text models: image height (default: the model's)", kSize},
            {"--images,--num-images-per-prompt", &F::images,
             "Images per prompt or class label (diffusers' num_images_per_prompt), each from its own noise, all in one "
             "batch; prompts are encoded once. --prompt a --prompt b --images 2 draws a, a, b, b",
             kAny, true},
            {"--steps", &F::steps, "Denoising steps (default: the pipeline's; DiT 25)"},
            {"--guidance", FloatFlag{&F::guidance, O::guidance},
             "Guidance scale, 1 = off (default: the pipeline's; DiT 4.0; Flux: embedded). Z-Image guides whenever it "
             "is "
             "above 0: Z-Image-Turbo runs with 0 (its default is diffusers' 5.0)"},
            {"--true-cfg", FloatFlag{&F::true_cfg, O::true_cfg_scale},
             "Flux: diffusers' true_cfg_scale. Above 1 with --negative-prompt: classifier-free guidance on top of the "
             "embedded --guidance, negative + s * (prompt - negative), at twice the transformer work (default 1: off)",
             kText},
            {"--cfg-truncation", FloatFlag{&F::cfg_truncation, O::cfg_truncation},
             "Z-Image (ZImagePipeline): diffusers' cfg_truncation. Classifier-free guidance is left out of the steps "
             "whose (1000 - t) / 1000, the fraction of the way from noise to image, exceeds F: those steps use the "
             "prompt's prediction alone. 1 or more: every step guided (default 1.0)",
             kText, true},
            {"--cfg-normalization", FloatFlag{&F::cfg_normalization, O::cfg_normalization},
             "Z-Image (ZImagePipeline): diffusers' cfg_normalization. Each image's guided prediction is scaled down "
             "where its norm exceeds F times the norm of the prompt's prediction. Given without F: 1.0 (diffusers' "
             "True); default 0: off (False)",
             kText, false, false, FlagCheck::none, nullptr, "1"},
            {"--sigmas", &F::sigmas,
             "diffusers' sigmas, comma-separated (default: the pipeline's; the step count is theirs). SD3, Flux: one "
             "per "
             "step in [0, 1], the flow-matching schedule before the scheduler's shift. PixArt with --scheduler euler: "
             "Euler's whole schedule, the final sigma included (one step fewer than values)",
             kText},
            {"--eta", FloatFlag{&F::eta, O::eta},
             "PixArt with --scheduler ddim: diffusers' eta, 0 = deterministic DDIM, 1 = DDPM's variance. Above 0 every "
             "step adds noise drawn from --seed's generator after the initial noise, as diffusers draws it (default 0)",
             kText},
            {"--timesteps", &F::timesteps,
             "PixArt: diffusers' timesteps, comma-separated training timesteps, one per step, strictly decreasing in "
             "[0, "
             "num_train_timesteps), e.g. 999,845,730,587,443,310,193,116,53,13 (default: the scheduler's spacing; the "
             "step count is theirs). DPM-Solver (integers) and --scheduler euler take them; DDIM does not",
             kText},
            {"--skip-guidance-layers", &F::skip_layers,
             "SD3 (SD3.5): diffusers' skip-layer guidance, the blocks to leave out, comma-separated (e.g. 7,8,9 for "
             "SD3.5 Medium). With classifier-free guidance, the steps in the window make one more transformer call on "
             "the prompt rows without those blocks: noise += (text - skip) * scale. Runs the loop on the host",
             kText},
            {"--skip-layer-guidance-scale", FloatFlag{&F::slg_scale, O::skip_layer_guidance_scale},
             "Skip-layer guidance scale", kText, true},
            {"--skip-layer-guidance-start", FloatFlag{&F::slg_start, O::skip_layer_guidance_start},
             "Skip-layer guidance from the steps after this fraction of them", kText, true},
            {"--skip-layer-guidance-stop", FloatFlag{&F::slg_stop, O::skip_layer_guidance_stop},
             "Skip-layer guidance until the steps before this fraction of them", kText, true},
            {"--seed", &F::seed,
             "Seed of the initial noise: the noise diffusers draws with generator=torch.manual_seed(SEED) (PyTorch's "
             "CPU "
             "generator, float32), so the same seed gives diffusers' image",
             kAny, true},
            {"--noise-dtype", &F::noise_dtype,
             "The dtype the seeded noise is drawn in, as diffusers draws it in the pipeline's torch_dtype: f32 "
             "(torch.float32), f16 (torch.float16) or bf16 (torch.bfloat16). A seed gives other noise in each; the "
             "model "
             "runs in f32 either way",
             kAny, true, false, FlagCheck::noise_dtype},
            {"--scheduler", &F::scheduler,
             "Override the model's scheduler: ddim, dpm (DPM-Solver++ 2M), euler, euler_a (Euler ancestral: each step "
             "adds noise from --seed's generator, as diffusers draws it), or a diffusers class name; presets "
             "dpm++2m-karras, dpm++2m-sde, dpm++2m-sde-karras, euler-karras (the class with use_karras_sigmas / "
             "algorithm_type=sde-dpmsolver++, as --scheduler-config sets them)"},
            {"--scheduler-config", &F::scheduler_config,
             "A scheduler config field, KEY=VALUE (repeatable): diffusers' Scheduler.from_config(config, KEY=VALUE), "
             "e.g. use_karras_sigmas=true (DPM++ 2M Karras), timestep_spacing=trailing. VALUE is JSON (true, 2, "
             "0.5, \"text\") or else a string; a field the scheduler does not read is an error"},
            {"--mode", &F::mode, "JIT mode: eager | full | regional", kAny, true},
            {"--latents", &F::latents,
             "safetensors with tensor 'latents_init' [B, C, h, w]: exact initial noise (Flux packs it)"},
            {"--host-loop", &F::host_loop,
             "Run the denoising loop on the host (read back every step; guidance and scheduler on the CPU) instead of "
             "on "
             "the device; same result. Also KILN_DEVICE_LOOP=0"},
            {"--dump", &F::dump, "Write intermediates (step{i}_latents, step{i}_noise_pred, decoded, image)"},
            {"-o,--output", &F::out,
             "Image path: NAME.jpg or NAME.jpeg writes JPEG, anything else PNG; several images become NAME-0.png, "
             "NAME-1.png, ... (or --grid). The settings (model, labels or prompt, steps, guidance, seed, mode) go into "
             "the "
             "file: PNG tEXt chunks, JPEG comments. '-': one PNG to standard output (several images need --grid)",
             kAny, true},
            {"--quality", &F::quality, "JPEG quality, 1..100 (with -o NAME.jpg)", kAny, true},
            {"--grid", &F::grid, "Write all images into one grid image"},
            {"--vae-tiling", &F::vae_tiling,
             "Decode in overlapping tiles of the VAE's sample_size, as diffusers' vae.enable_tiling() (less memory; "
             "seams "
             "blended)"},
            {"--vae-tile-size", &F::vae_tile,
             "With --vae-tiling: tile side in pixels (diffusers' vae.tile_sample_min_size; SD3/Flux VAEs say 1024, so "
             "1024 px images need a smaller tile to be tiled)"},
            {"--upscale", &F::upscale, "Nearest-neighbour upscale of the image, 1..64 (the demo model draws 32x32)",
             kAny, true},
            {"--device", &F::device, "Vulkan device index (see `kiln devices`)"},
            {"--vram-budget", &F::vram_budget, kVramBudgetHelp},
            {"--f16-activations", &add_f16_activations_flag, nullptr},
            {"--transfer-queue", &add_transfer_queue_option, nullptr},
            {"--precision", &add_precision_option, nullptr},
            {"--profile", &F::profile,
             "Print per denoising step: wall, GPU, host and host CPU time of the transformer run, device idle (between "
             "submissions, and before the step: host work between steps), submissions, barriers; and peak device "
             "memory "
             "and host RSS"},
        });
    const std::vector<GenerateFlag> loras = lora_rows();  // before --seed
    rows.insert(
        std::find_if(rows.begin(), rows.end(), [](const GenerateFlag& r) { return std::string(r.names) == "--seed"; }),
        loras.begin(), loras.end());
    const std::vector<GenerateFlag> images = image_rows();  // before --host-loop
    rows.insert(std::find_if(rows.begin(), rows.end(),
                             [](const GenerateFlag& r) { return std::string(r.names) == "--host-loop"; }),
                images.begin(), images.end());
    std::vector<GenerateFlag> files;
    for (const ComponentFlag& c : component_flags()) files.push_back({c.names, c.field, c.help});
    rows.insert(rows.begin() + 1, files.begin(), files.end());  // beside --model, in --help too
    return rows;
}
#undef KILN_PER_PROMPT

// CLI11's first long name of a row: "--images" of "--images,--num-images-per-prompt", "--output" of "-o,--output".
std::string long_name(const char* names) {
    std::string s = names;
    const size_t dd = s.find("--");
    s = s.substr(dd);
    return s.substr(0, s.find(','));
}

// Registers one row on app: its field (a bool field as a flag without value), or its shared registration.
struct AddRow {
    CLI::App& app;
    GenerateFlags& f;
    const GenerateFlag& row;
    CLI::Option* operator()(bool F::*m) const { return app.add_flag(row.names, f.*m, row.help); }
    CLI::Option* operator()(std::vector<std::string> P::*m) const {
        return app.add_option(row.names, f.texts.*m, row.help);
    }
    CLI::Option* operator()(std::string ComponentFlags::*m) const {
        return app.add_option(row.names, f.parts.*m, row.help);
    }
    CLI::Option* operator()(FloatFlag m) const { return app.add_option(row.names, f.*m.field, row.help); }
    CLI::Option* operator()(void (*add)(CLI::App&)) const {
        add(app);
        return app.get_option_no_throw(long_name(row.names));
    }
    template <class T>
    CLI::Option* operator()(T F::*m) const {
        return app.add_option(row.names, f.*m, row.help);
    }
};

CLI::Option* add_flag_row(CLI::App& app, GenerateFlags& f, const GenerateFlag& row) {
    CLI::Option* op = std::visit(AddRow{app, f, row}, row.target);
    if (row.one_per_prompt) op->expected(1)->take_all();
    if (row.check == FlagCheck::non_negative) op->check(CLI::NonNegativeNumber);
    if (row.check == FlagCheck::noise_dtype) op->check(CLI::IsMember({"f32", "f16", "bf16"}));
    if (row.show_default) op->capture_default_str();
    if (row.alone)  // CLI11 takes default_str for a flag without value; --help shows "[FLOAT]", not it
        op->expected(0, 1)->default_str(row.alone)->option_text("[FLOAT]");
    return op;
}
}  // namespace

const std::vector<GenerateFlag>& generate_flags() { return kFlags; }

void add_generate_flags(CLI::App& app, GenerateFlags& f) {
    f.options.clear();
    for (const GenerateFlag& row : kFlags) f.options.push_back(add_flag_row(app, f, row));
}

void check_float_flags(const GenerateFlags& f) {
    for (const GenerateFlag& row : kFlags)
        if (const auto* ff = std::get_if<FloatFlag>(&row.target))
            models::check_float(ff->range, f.*ff->field, long_name(row.names));
}

std::optional<std::string> complex_instruction(const GenerateFlags& f) {
    if (!f.given("--complex-human-instruction")) return std::nullopt;
    const std::string& v = f.complex_human_instruction;
    if (v == "none") return std::string();
    if (v.empty() || v[0] != '@') return v;
    const std::string path = v.substr(1);
    std::ifstream in(path, std::ios::binary);
    KILN_CHECK(in.good() && !std::filesystem::is_directory(path), "--complex-human-instruction ", v, ": cannot open ",
               path, " (a text file of the instruction's lines)");
    std::string text, line;
    for (bool first = true; std::getline(in, line); first = false) {  // "a\nb\n" and "a\r\nb" give "a\nb"
        if (!line.empty() && line.back() == '\r') line.pop_back();
        text += (first ? "" : "\n") + line;
    }
    KILN_CHECK(!in.bad(), "--complex-human-instruction ", v, ": error reading ", path);
    return text;
}

std::vector<int> text_encoder_layers(const GenerateFlags& f) {
    if (!f.given("--text-encoder-layers")) return {};
    std::vector<int> v = parse_indices(f.text_encoder_layers, "--text-encoder-layers",
                                       "an integer (a hidden_states index: 9,18,27; -2)");
    KILN_CHECK(!v.empty(), "--text-encoder-layers is empty: give the hidden_states indices, e.g. 9,18,27");
    return v;
}

bool GenerateFlags::given(const std::string& flag) const {
    for (size_t i = 0; i < kFlags.size() && i < options.size(); ++i)
        if (long_name(kFlags[i].names) == flag) return options[i] && options[i]->count() > 0;
    return false;
}

std::string GenerateFlags::first_text_only_given() const {
    for (FlagScope scope : {FlagScope::text, FlagScope::size})
        for (size_t i = 0; i < kFlags.size() && i < options.size(); ++i)
            if (kFlags[i].scope == scope && options[i] && options[i]->count()) return options[i]->get_name();
    return "";
}

models::CommonOptions common_options(const GenerateFlags& f) {
    models::CommonOptions c;
    c.seed = f.seed;
    c.noise_dtype = parse_dtype(f.noise_dtype, "--noise-dtype");
    c.scheduler = f.scheduler;
    c.scheduler_config = parse_key_values(f.scheduler_config, "--scheduler-config");
    c.mode = exec::parse_mode(f.mode);
    c.keep_intermediates = !f.dump.empty();
    c.host_loop = f.host_loop;
    c.tiled_vae = f.vae_tiling;
    c.vae_tile_size = f.vae_tile;
    return c;
}

models::ImageInputs image_inputs(const GenerateFlags& f) {
    models::ImageInputs in;
    KILN_CHECK(f.image.empty() || f.image_tensor.empty(), "give --image or --image-tensor, not both");
    KILN_CHECK(f.mask.empty() || f.mask_tensor.empty(), "give --mask or --mask-tensor, not both");
    if (!f.image.empty()) in.image = read_image(f.image);
    if (!f.mask.empty()) in.mask = read_image(f.mask);
    auto tensor = [](const std::string& path, const char* name, const char* flag) {
        const auto st = SafeTensors::open(path);
        KILN_CHECK(st.find(name), flag, " ", path, ": no tensor '", name, "'");
        return st.read(name);
    };
    if (!f.image_tensor.empty()) in.image_tensor = tensor(f.image_tensor, "image_preprocessed", "--image-tensor");
    if (!f.mask_tensor.empty()) in.mask_tensor = tensor(f.mask_tensor, "mask_preprocessed", "--mask-tensor");
    if (f.given("--strength")) in.strength = f.strength;
    if (f.given("--max-area")) in.max_area = (int64_t)f.max_area;
    in.auto_resize = !f.no_auto_resize;
    if (!f.noise.empty()) {
        const auto st = SafeTensors::open(f.noise);
        for (const char* name : {"noise", "image_vae_sample_noise", "masked_image_vae_sample_noise"})
            if (st.find(name)) in.noise[name] = st.read(name);
        for (int i = 0; i < 1000; ++i)  // Sana-Sprint's SCMScheduler: every step's noise
            if (const std::string name = "scm_noise_step" + std::to_string(i); st.find(name))
                in.noise[name] = st.read(name);
        KILN_CHECK(!in.noise.empty(), "--noise ", f.noise,
                   ": none of noise, image_vae_sample_noise, masked_image_vae_sample_noise, scm_noise_step{i}");
    }
    return in;
}

}  // namespace kiln::app
