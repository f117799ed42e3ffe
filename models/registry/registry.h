#pragma once
// The model family registry: the one table of the diffusers / transformers classes Kiln reads, and one
// descriptor per pipeline family (its pipeline classes, transformer, defaults, latent layout, conditioning,
// text encoders and the call options that apply). Everything else asks here, by enum or descriptor field; only
// registry.cpp spells class names. Pure C++ (no Vulkan): the converter links it too.
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::models {

enum class Role { transformer, vae, text_encoder, tokenizer };

// What Kiln builds for a component class.
enum class ComponentKind {
    dit,
    pixart,
    sd3,
    flux,                  // transformers
    flux2,                 // Flux2Transformer2DModel (FLUX.2 [klein], [dev])
    sana,                  // SanaTransformer2DModel (Sana, Sana-Sprint)
    z_image,               // ZImageTransformer2DModel (Z-Image, Z-Image-Turbo)
    vae,                   // the KL autoencoder
    vae_flux2,             // the KL autoencoder with FLUX.2's latent batch-norm statistics (models/vae/vae.h)
    dc_ae,                 // the deep-compression autoencoder (Sana's VAE)
    clip_text,             // CLIP text model: pooler_output
    clip_text_projection,  // CLIP text model with the text_projection: text_embeds
    t5_encoder,
    gemma2,  // Gemma2Model: last_hidden_state (Sana's text encoder)
    qwen3,   // Qwen3Model / Qwen3ForCausalLM: any hidden_states (Z-Image's and FLUX.2 [klein]'s text encoder)
    clip_tokenizer,
    t5_tokenizer,
    gemma_tokenizer,  // SentencePiece BPE with byte fallback (models/text/tokenizers/gemma_tokenizer.h)
    qwen2_tokenizer,  // byte-level BPE with Qwen's regex, Qwen2 / Qwen3 (models/text/tokenizers/qwen_tokenizer.h)
};

struct ComponentClass {
    const char* name;  // diffusers' _class_name, transformers' architectures[0] or tokenizer_class
    ComponentKind kind;
    Role role;
    // Where the class keeps the weights Kiln reads: "model." for transformers' *ForCausalLM wrappers (their
    // base_model_prefix), "" for the others.
    const char* weights_prefix = "";
};

// Every class Kiln reads, in the order messages list them.
const std::vector<ComponentClass>& component_classes();
// nullptr when Kiln does not read the class.
const ComponentClass* find_component_class(std::string_view name);
// The class of a kind as diffusers saves it (the slow tokenizer where a fast one maps to the same kind).
const char* class_name(ComponentKind kind);
Role role_of(ComponentKind kind);
// "A, B, C": the classes of the given roles (every role when empty), for messages.
std::string class_list(const std::vector<Role>& roles = {});

// Tokenizer folders as transformers saves them (save_pretrained): each tokenizer kind reads its model files, all
// required, and the shared files when present. A folder's kind is its tokenizer_config.json's tokenizer_class, else
// the first format (in this order) whose model files it holds. A new tokenizer is one entry here and one class above.
struct TokenizerFormat {
    ComponentKind kind;
    std::vector<std::string> model_files;  // CLIP: vocab.json, merges.txt; T5: spiece.model; Gemma: tokenizer.model
};
const std::vector<TokenizerFormat>& tokenizer_formats();
const TokenizerFormat& tokenizer_format(ComponentKind kind);  // throws for a kind that is not a tokenizer
// tokenizer_config.json, special_tokens_map.json, added_tokens.json: read by every tokenizer when present.
const std::vector<std::string>& tokenizer_shared_files();
// Every file some tokenizer reads: the formats' model files, then the shared ones.
const std::vector<std::string>& tokenizer_file_names();
// The tokenizer class of a folder: `config_class` (tokenizer_config.json's tokenizer_class; "" when it has none) as
// given, even a class Kiln does not read (so that the error names it), else the class of the first format whose
// model files are all `present`; "" when none.
std::string tokenizer_class_of(const std::string& config_class, const std::function<bool(const std::string&)>& present);
// "" when every model file of tokenizer kind `kind` is `present` (and non-empty: present() says), else one phrase:
// "CLIPTokenizer needs vocab.json and merges.txt; missing merges.txt".
std::string missing_tokenizer_files(ComponentKind kind, const std::function<bool(const std::string&)>& present);

enum class FamilyId { dit, pixart, sd3, flux, sana, sana_sprint, z_image, flux2_klein };

// How the guidance scale reaches the model.
enum class Conditioning {
    class_labels,  // DiT: class labels, classifier-free guidance against the null class
    cfg,           // PixArt, SD3: classifier-free guidance with the negative prompt, scale = guidance
    embedded,      // Flux, Sana-Sprint: guidance is a transformer input; Flux: classifier-free guidance only via
                   // true_cfg_scale
};

// How a family's pipeline builds the text its decoder-LLM encoder reads (tokenizer.apply_chat_template of one user
// message, add_generation_prompt=True).
enum class ChatTemplate {
    none,
    qwen_thinking,     // Z-Image: enable_thinking=True ("<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n")
    qwen_no_thinking,  // FLUX.2 [klein]: enable_thinking=False (the same + "<think>\n\n</think>\n\n")
};

// A text encoder of a family, as its pipeline's encode_prompt runs it.
struct TextEncoderUse {
    const char* component;  // "text_encoder", "text_encoder_2", ...
    ComponentKind kind;
    int prompt;             // the prompt list it reads: 1 prompt, 2 prompt_2, 3 prompt_3 (and their negatives)
    int max_tokens;         // 77 (CLIP); 0: the pipeline's max_sequence_length (T5)
    bool optional = false;  // SD3's T5: absent, its part of prompt_embeds is zeros
    // Its name among single files and their flags (--clip-l, --clip-g, --t5xxl): "clip_l", "clip_g", "t5xxl"; "" for
    // families that have none.
    const char* file_role = "";
};

struct PipelineClass {
    const char* name;
    int max_sequence_length = 0;    // T5 tokens by default (0: no T5)
    bool micro_conditions = false;  // PixArt-α: the pipeline of a transformer with use_additional_conditions
};

// One pipeline family. The defaults are the pipelines' __call__ defaults.
struct Family {
    FamilyId id;
    const char* name;                      // "PixArt"
    std::vector<PipelineClass> pipelines;  // the first is the default for the transformer
    ComponentKind transformer;
    int steps = 0;
    double guidance = 0;
    int default_sample_size = 0;          // latent side without --width/--height; 0: the transformer's sample_size
    int default_size_pixels = 0;          // image side without --width/--height whatever the VAE (Z-Image: 1024)
    int schnell_max_sequence_length = 0;  // Flux without a guidance embedding (FLUX.1-schnell): T5 tokens
    // Latents: Flux packs 2x2 patches into tokens, so sizes are multiples of vae_scale_factor x 2 (others:
    // x patch size), and rounds a size off that multiple down with a warning (the others raise).
    bool packed_2x2 = false;
    bool round_size_down = false;
    Conditioning conditioning = Conditioning::cfg;
    bool attention_mask = false;      // prompt_attention_mask goes to the transformer (PixArt)
    bool pooled_projections = false;  // pooled_prompt_embeds goes to the transformer (SD3, Flux)
    bool timestep_fraction = false;   // the transformer takes t / 1000 (Flux)
    bool timestep_scale = false;      // the transformer takes t * its config's timestep_scale (Sana)
    bool flow_matching = false;       // flow-matching sigmas in [0, 1]; dynamic shift's max_shift default below
    double max_shift_default = 0;
    bool linspace_sigmas = false;  // the pipeline passes sigmas linspace(1, 1/N, N) (Flux; others: the scheduler's)
    bool vae_shift = false;        // latents / scaling_factor + shift_factor for the VAE (PixArt: no shift)
    // Sana: the prompt goes to the text encoder after the complex_human_instruction (default_instruction's lines,
    // joined by "\n"), and the embeddings are those of <bos> + the last max_sequence_length - 1 positions
    // (models/pipelines/sana_pipeline.h).
    bool complex_human_instruction = false;
    // Sana-Sprint: the embedded guidance reaches the transformer as guidance * its config's guidance_embeds_scale.
    bool scaled_guidance_input = false;
    // Qwen3-encoded families (Z-Image, FLUX.2 [klein]): the chat template around each prompt, and the hidden_states
    // entries the prompt embeddings stack on features, layer-major (klein's text_encoder_out_layers 9, 18, 27;
    // Z-Image's -2). Klein keeps every position (padding too); Z-Image only each prompt's unmasked rows.
    ChatTemplate chat_template = ChatTemplate::none;
    std::vector<int> text_encoder_layers;
    bool text_encoder_layers_option = false;  // the pipeline takes them as an argument (klein)
    // FLUX.2 [klein]: the initial noise is drawn 2x2-patchified, [B, 4C, h/2, w/2] (channel c*4 + dy*2 + dx), and
    // packed by flattening; ids are 4-axis (t, h, w, l); mu = compute_empirical_mu(image tokens, steps); the VAE
    // decodes x * sqrt(bn.running_var + eps) + bn.running_mean, unpatchified; CFG (negative "") only when guidance > 1
    // and model_index.json's is_distilled is false.
    bool patchified_noise = false, empirical_mu = false, bn_latents = false, distilled_flag = false;
    // Z-Image: CFG iff guidance > 0, pred = pos + g (pos - neg), cfg_truncation and cfg_normalization, the transformer
    // takes (1000 - t) / 1000 and lists of per-item latents and caption rows (models/pipelines/z_image_pipeline.h).
    bool z_image_loop = false;
    std::vector<TextEncoderUse> encoders;  // in encode_prompt's order; empty: class-conditional
    const char* encoders_summary = "";     // for messages: "one text encoder (T5)"
    // The call options that apply.
    bool clip_skip = false, skip_layer_guidance = false, eta = false, true_cfg = false;
    bool custom_timesteps = false, custom_sigmas = false, resolution_binning = false;
    // use_resolution_binning's aspect-ratio tables exist for these transformer sample sizes (the square bin's side
    // is sample_size * vae_scale_factor).
    std::vector<int> bin_sample_sizes;

    // Images in: the image-to-image and inpainting pipelines (nullptr: diffusers has none for the family), and
    // their default strength.
    const char* img2img_pipeline = nullptr;
    const char* inpaint_pipeline = nullptr;
    double default_strength = 0.6;
    // Flux Fill (FLUX.1-Fill-dev): known by a transformer that takes more channels than it returns (the masked
    // image's latents and the mask); its pipeline, and the defaults that differ.
    const char* fill_pipeline = nullptr;
    double fill_guidance = 30, fill_strength = 1;
    // Flux Kontext (FLUX.1-Kontext-dev): known by its pipeline class in model_index.json (one of `pipelines`); the
    // reference image's preferred sizes (w, h), pipeline_flux_kontext.py's PREFERRED_KONTEXT_RESOLUTIONS.
    const char* kontext_pipeline = nullptr;
    std::vector<std::pair<int, int>> kontext_resolutions;

    bool text_to_image() const { return !encoders.empty(); }
};

const std::vector<Family>& families();
const Family& family(FamilyId id);
// The family of a pipeline class (nullptr: not one Kiln runs); *pipeline receives its entry when asked.
const Family* find_pipeline_family(std::string_view pipeline_class, const PipelineClass** pipeline = nullptr);
// The family whose transformer is `kind` (nullptr for a kind that is not a family's transformer).
const Family* transformer_family(ComponentKind kind);
// The family's pipeline class for its transformer (PixArt with micro-conditions: PixArt-α).
const PipelineClass& pipeline_for(const Family& f, bool micro_conditions = false);
// The first family where a call option applies (e.g. &Family::true_cfg), for messages that name it.
const Family& family_with(bool Family::*option);
// The family a single file's transformer names ("flux", "sd3", "z_image", "flux2": layouts::Detected::family), or
// nullptr.
const Family* file_family(std::string_view name);

}  // namespace kiln::models
