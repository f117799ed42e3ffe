#pragma once
// diffusers' text-to-image pipelines on Kiln, from the text conditioning on: PixArt-α and PixArt-Σ, Stable
// Diffusion 3 and Flux (the families of models/registry/registry.h), each followed step by step from the
// point where encode_prompt has returned (latents, scheduler loop with guidance on the host, VAE decode).
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "models/core/weights.h"
#include "models/pipelines/dit_pipeline.h"
#include "models/pipelines/image_input.h"
#include "models/registry/registry.h"
#include "models/schedulers/scheduler.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/torch_rng.h"

namespace kiln::models {

// What encode_prompt returns, under diffusers' names; an absent tensor is empty (numel() == 0).
//   PixArt: prompt_embeds [B, L, D] (T5), prompt_attention_mask [B, L] (1 = keep), negative_* likewise.
//   SD3:    prompt_embeds [B, 77 + L_t5, D], pooled_prompt_embeds [B, P], negative_* likewise.
//   Flux:   prompt_embeds [B, L, D] (T5), pooled_prompt_embeds [B, P] (CLIP); negatives unused (no CFG).
// Negative tensors with batch 1 apply to every prompt row.
struct TextConditioning {
    Tensor prompt_embeds, negative_prompt_embeds, pooled_prompt_embeds, negative_pooled_prompt_embeds;
    Tensor prompt_attention_mask, negative_prompt_attention_mask;

    static TextConditioning read(const SafeTensors& st);  // the tensors of those names that the file has
    static TextConditioning from(const std::map<std::string, Tensor>& named);  // likewise, from a map
    std::vector<std::pair<std::string, Tensor>> named() const;                 // the present ones, by name
    // num_images_per_prompt: every row of the tensors with the prompts' batch B, n times in a row (prompts a, b and
    // n = 2 give a, a, b, b, as diffusers' encode_prompt repeats prompt_embeds); a batch-1 negative with B > 1
    // stays one row, applied to all.
    TextConditioning repeat_each(int n) const;
};

struct Transformers;
struct T2IOptions;
// Keeps the transformer of generate_t2i planned, recorded and uploaded between calls (the C API's keep_transformer):
// a call with the same graphs (input shapes, mode, skip layers, LoRA files and how they apply) reuses it and writes
// only its inputs, runtime LoRA scales included; another call replaces it. Not thread-safe; one per model.
class TransformerCache {
public:
    TransformerCache();
    ~TransformerCache();
    TransformerCache(const TransformerCache&) = delete;
    TransformerCache& operator=(const TransformerCache&) = delete;
    bool resident() const;
    void clear();  // frees it
    // New scales for the resident transformer's runtime LoRAs (one per file, in order), written to the device now
    // (nothing recorded or uploaded again); they replace the scales of later calls that reuse it, until it is
    // replaced. Throws with one line when none is resident, it has no LoRAs, they were merged (their scales are
    // baked into the weights), the count differs, or a scale is not finite.
    void set_lora_scales(const std::vector<double>& scales);
    struct Entry;

private:
    friend Transformers& resident_transformers(vk::Context&, TransformerCache*, std::unique_ptr<Transformers>&,
                                               const T2IOptions&, bool&);
    std::unique_ptr<Entry> entry_;
};

// A text-to-image call: the text conditioning and what the four pipelines take beyond the common options.
struct T2IOptions : CommonOptions {
    TextConditioning text;
    std::optional<int> steps;        // default: the pipeline's (PixArt 20, SD3 28, Flux 28)
    std::optional<double> guidance;  // default: the pipeline's (PixArt 4.5, SD3 7.0, Flux 3.5)
    // Flux only: diffusers' true_cfg_scale (default 1, off). Above 1, classifier-free guidance on top of the embedded
    // guidance: negative + s * (prompt - negative), from the batch [negative, prompt] (text.negative_* needed;
    // diffusers runs it only when a negative prompt is given, and so must the caller).
    std::optional<double> true_cfg_scale;
    // diffusers' sigmas. SD3, Flux: the flow-matching schedule before the scheduler's shift (static or mu), one per
    // step in [0, 1]; the step count is their count. PixArt with EulerDiscreteScheduler (--scheduler euler): the
    // whole schedule, its final sigma included (one step fewer than values). Empty: the pipeline's (Flux
    // linspace(1, 1/N, N), SD3 from the scheduler's timesteps).
    std::vector<double> sigmas;
    // PixArt: diffusers' timesteps, training timesteps one per step, strictly decreasing in [0,
    // num_train_timesteps); the step count is their count. DPM-Solver (integers) and Euler take them, DDIM does not;
    // SD3 and Flux pipelines take sigmas instead. Not with sigmas.
    std::vector<double> timesteps;
    // PixArt: diffusers' eta, for DDIMScheduler (--scheduler ddim): 0 deterministic, 1 DDPM's variance. Above 0
    // every step adds eta-weighted noise from the seed's generator, drawn after the initial latents as diffusers
    // draws it (the device loop holds every step's: steps x latents). Other schedulers ignore it with a warning,
    // as diffusers does.
    double eta = 0;
    // SD3 only: diffusers' skip-layer guidance (SD3.5's SLG). With classifier-free guidance, at the steps i with
    // start * N < i < stop * N, one more transformer call on the prompt rows with these blocks left out, and
    // noise_pred += (noise_pred_text - noise_pred_skip) * scale. Empty: off (diffusers' default None).
    std::vector<int> skip_guidance_layers;
    double skip_layer_guidance_scale = 2.8, skip_layer_guidance_start = 0.01, skip_layer_guidance_stop = 0.2;
    std::optional<int> height, width;  // default: transformer sample_size * vae_scale_factor (Flux: 128 * vsf)
    // PixArt's use_resolution_binning (diffusers default true). Kiln implements binning only where it maps the
    // size to itself (square at the bin's native side); at other sizes it generates unbinned, with a warning.
    bool resolution_binning = true;
    int images_per_prompt = 1;  // diffusers' num_images_per_prompt: text rows repeated (repeat_each)
    LoraOptions lora;  // LoRAs on the transformer and CLIP encoders (SD3, Flux); each file's summary goes to stderr
    TransformerCache* keep_transformer = nullptr;  // keep the transformer resident here; nullptr: freed on return
    // Images in (SD3, Flux): --image, --mask, --strength, --noise (image_input.h). An image makes the call
    // diffusers' img2img pipeline, an image and a mask its inpainting pipeline.
    ImageInputs inputs;
    // Z-Image: diffusers' cfg_truncation (classifier-free guidance is dropped at the steps whose (1000 - t) / 1000
    // exceeds it; above 1: never) and cfg_normalization (> 0: each sample's guided prediction is scaled down to at
    // most cfg_normalization x the norm of its positive prediction; True is 1.0; 0: off).
    double cfg_truncation = 1.0, cfg_normalization = 0.0;
};

// The call as resolved from the model and the options, before any heavy work.
struct T2IPlan {
    std::string pipeline;            // diffusers pipeline class
    const Family* family = nullptr;  // its registry descriptor (models/registry/registry.h)
    int steps = 0, height = 0, width = 0;
    double guidance = 0;   // PixArt, SD3: the CFG scale; Flux: the embedded guidance
    bool cfg = false;      // classifier-free guidance batch (PixArt, SD3 with guidance > 1; Flux with true_cfg > 1)
    double cfg_scale = 1;  // the scale of that guidance: guidance (PixArt, SD3), true_cfg_scale (Flux)
    std::vector<int> slg_steps;  // SD3 skip-layer guidance: the steps that make the extra call (empty: off)
    double eta = 0;              // PixArt with DDIM: eta applied (0 where the scheduler ignores it)
    int vae_scale_factor = 8, latent_channels = 4, latent_h = 0, latent_w = 0;
    int token_patch = 1;  // latent pixels per image token on a side: the patch size (Flux: 2, its 2x2 packing)
    // Where the call differs from what was asked (a size rounded, binning not applied); generate_t2i prints them
    // once per generation (plan_t2i itself prints nothing: callers plan more than once).
    std::vector<std::string> warnings;
    // Images in: the strength and the steps it skips (diffusers' get_timesteps: the loop runs steps - t_start).
    bool img2img = false, inpaint = false;
    // Flux Fill: the transformer reads cond_channels more per token (masked-image latents and the mask).
    bool fill = false;
    int cond_channels = 0;
    // Flux Kontext: a reference image of ref_width x ref_height pixels whose tokens follow the latents' (0 x 0:
    // none, plain text-to-image at Kontext's size).
    bool kontext = false;
    int ref_width = 0, ref_height = 0;
    double strength = 1;
    int t_start = 0;
};

// The pipeline class of a text-to-image model: model_index.json's _class_name when it names a text-to-image
// pipeline of the registry, else the one of the transformer's family (PixArt with micro-conditions: PixArt-α).
// "" when not text-to-image.
std::string t2i_pipeline_class(const ModelSource& src);

// Defaults and size checks (a size that is not a multiple of vae_scale_factor * patch, or whose latents and images
// the host cannot hold -> kiln::Error). t2i_plan.cpp.
T2IPlan plan_t2i(const ModelSource& src, const T2IOptions& opt);

// The shape of the initial latents (latents_init, --latents) for B images: [B, C, h, w]; FLUX.2 [klein] draws them
// 2x2-patchified, [B, 4C, h/2, w/2].
Shape t2i_noise_shape(const T2IPlan& p, int64_t B);

// mu for a flow-matching scheduler with use_dynamic_shifting (nullopt otherwise), from the image token count (Flux:
// the packed sequence; SD3, Z-Image: the patches): calculate_shift, or FLUX.2's compute_empirical_mu.
std::optional<double> schedule_mu(const ModelSource& src, const T2IOptions& opt, const T2IPlan& p);

// The scheduler a call runs: the model's scheduler config, opt.scheduler's class, opt.scheduler_config's fields.
std::unique_ptr<sched::Scheduler> make_t2i_scheduler(const ModelSource& src, const T2IOptions& opt);

GenerateResult generate_t2i(vk::Context& ctx, const ModelSource& src, const T2IOptions& opt);

// Shared by the pipelines' loops (t2i_pipeline.cpp, z_image_pipeline.cpp):
class LatentDecoder;
struct VaeOptions;
// The initial latents of a text-to-image call without images in: opt.latents_init, --noise's "noise", else `shape`
// drawn from gen (torch.randn in opt.noise_dtype), as diffusers' prepare_latents.
Tensor initial_noise(const T2IOptions& opt, const Shape& shape, TorchCpuGenerator& gen);
// The VAE's run: tiled as asked, eager when the transformer is, else one full recording.
VaeOptions vae_options(const T2IOptions& opt);
// VAE decode of latents already scaled for it, then (decoded / 2 + 0.5) clamped to [0, 1], NHWC, into res.image;
// with `keep`, the intermediates under the fixtures' names: the decoder's input as `input_name` (nullptr:
// final_latents_scaled), decoded, image.
void decode_images(LatentDecoder& vx, const std::vector<float>& z, const Shape& nchw, bool keep, GenerateResult& res,
                   const char* input_name = nullptr);

}  // namespace kiln::models
