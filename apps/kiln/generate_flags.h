#pragma once
// kiln generate's flags: one table (generate_flags.cpp) registers each flag with its help and the field it fills,
// says which models it applies to, and names its key in the image's settings. A new option is one row here, one
// field of GenerateFlags, and where it goes in kiln_generate_params (generate_capi.cpp).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "apps/kiln/commands.h"
#include "models/core/generate_options.h"
#include "models/pipelines/image_input.h"
#include "models/pipelines/text_encode.h"

namespace kiln::app {

// What the flags hold once parsed (CLI11 writes the fields; defaults are the flags' defaults).
struct GenerateFlags {
    std::string model, labels = "0", out = "kiln.png", scheduler, mode = "regional", latents, dump;
    std::vector<std::string> scheduler_config;  // KEY=VALUE
    std::vector<std::string> prompts;
    models::PromptOptions texts;  // the text lists the flags fill (not the prompts: --prompt-file has its own)
    std::string prompt_embeds, prompt_file, vram_budget, sigmas, timesteps, skip_layers;
    double slg_scale = 2.8, slg_start = 0.01, slg_stop = 0.2, eta = 0;
    int steps = 25, device = -1, upscale = 1, quality = 95, images = 1, width = 0, height = 0, max_sequence_length = 0,
        vae_tile = 0, clip_skip = 0;
    double guidance = 4.0, true_cfg = 1.0;
    uint64_t seed = 0;
    std::string noise_dtype = "f32";
    bool grid = false, no_binning = false, keep_encoders = false, vae_tiling = false, profile = false,
         host_loop = false;
    std::vector<std::string> loras;  // --lora FILE[:SCALE]
    std::string lora_apply = "runtime";
    bool lora_allow_unmatched = false;
    // Images in (appended in 0.2): --image, --image-tensor, --mask, --mask-tensor, --strength, --noise.
    std::string image, image_tensor, mask, mask_tensor, noise;
    double strength = 0.6;
    uint64_t max_area = 0;
    bool no_auto_resize = false;
    std::string complex_human_instruction;  // --complex-human-instruction TEXT|@FILE|none (complex_instruction())
    // FLUX.2 [klein]'s --text-encoder-layers (a comma list: text_encoder_layers()); Z-Image's --cfg-truncation and
    // --cfg-normalization (alone: 1).
    std::string text_encoder_layers;
    double cfg_truncation = 1.0, cfg_normalization = 0.0;
    ComponentFlags parts;               // --diffusion-model, --vae, ... (apps/component_flags.h's rows)
    std::vector<CLI::Option*> options;  // one per row of generate_flags(), in its order (nullptr: not registered)

    bool given(const std::string& flag) const;  // the flag ("--steps") was on the command line
    // The first flag given of those that apply only to text models, then of the sizes ("" if none): what a DiT
    // model refuses.
    std::string first_text_only_given() const;
};

// Which models a flag applies to: DiT refuses the text models' flags, naming the first one given.
enum class FlagScope { any, text, size };
// A check CLI11 applies to the value.
enum class FlagCheck { none, non_negative, noise_dtype };

// A float flag: its field and the range it takes (models::float_ranges(), the C API's and the pipelines' too).
struct FloatFlag {
    double GenerateFlags::*field;
    models::FloatOption range;
};

// A row of the table. target: the field it fills (a bool field is a flag without value), a text list of
// GenerateFlags::texts, or a function that registers a flag shared with other commands.
struct GenerateFlag {
    const char* names;  // CLI11's: "--steps", "-o,--output", "--images,--num-images-per-prompt"
    std::variant<std::string GenerateFlags::*, int GenerateFlags::*, FloatFlag, uint64_t GenerateFlags::*,
                 bool GenerateFlags::*, std::vector<std::string> GenerateFlags::*, std::string ComponentFlags::*,
                 std::vector<std::string> models::PromptOptions::*, void (*)(CLI::App&)>
        target;
    const char* help;  // nullptr: the shared registration's help
    FlagScope scope = FlagScope::any;
    bool show_default = false;    // help shows the default value
    bool one_per_prompt = false;  // one value per occurrence; repeated, one per --prompt
    FlagCheck check = FlagCheck::none;
    const char* settings_key = nullptr;  // the text lists: their key in the image's settings ("negative")
    const char* alone = nullptr;         // the value of the flag given without one (--cfg-normalization: "1")
};

const std::vector<GenerateFlag>& generate_flags();
// Registers every row on app, filling f.options.
void add_generate_flags(CLI::App& app, GenerateFlags& f);

// --text-encoder-layers as PromptOptions::text_encoder_layers takes them: not given: none (the pipeline's); else the
// comma list's integers ("9,18,27", "-2"), at least one. An entry that is not an integer: kiln::Error, one line.
std::vector<int> text_encoder_layers(const GenerateFlags& f);

// Every float flag's value against its range, whatever the model: kiln::Error with one line naming the flag
// ("--guidance is nan: not a finite number (...)"). run_generate calls it before anything else.
void check_float_flags(const GenerateFlags& f);

// --complex-human-instruction as PromptOptions::complex_human_instruction takes it: not given: nullopt (the pipeline's
// default); "none" (or an empty TEXT or FILE): ""; @FILE: the file's lines joined by "\n" (a final newline and CRs
// before newlines dropped), as diffusers joins the list; else TEXT itself. An unreadable file: kiln::Error, one line.
std::optional<std::string> complex_instruction(const GenerateFlags& f);

// The options every pipeline shares, from the flags: seed, noise dtype, scheduler and its config, JIT mode,
// intermediates (--dump), loop, VAE tiling. Not the latents (read once the model's checks have passed) nor progress.
models::CommonOptions common_options(const GenerateFlags& f);
// The images in from the flags: the files read (a missing, unreadable or truncated one: kiln::Error), the
// tensors and the named draws.
models::ImageInputs image_inputs(const GenerateFlags& f);

}  // namespace kiln::app
