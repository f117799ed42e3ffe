/* libkiln: diffusion transformers (DiT, PixArt, SD3, Flux) on any GPU through Vulkan compute. The stable C API.
 *
 * C99; opaque handles; no C++ type crosses it. Link with `find_package(Kiln)` -> Kiln::kiln, or pkg-config kiln.
 *
 * Errors: every function that can fail returns a kiln_status; kiln_last_error() gives the message of the calling
 * thread's last call (empty after a success). No exception or abort crosses the API on any input; a NULL pointer
 * where one is required is KILN_INVALID_ARGUMENT.
 *
 * Structs the caller fills carry `struct_size` (set it to sizeof the struct; the *_INIT macros do, and zero the
 * rest, which means "default" everywhere). A library older than the header accepts a larger struct only when the
 * fields it does not know are zero (else KILN_UNSUPPORTED); a newer library reads an older, smaller struct with
 * defaults for the fields it lacks.
 *
 * Threads: distinct contexts work concurrently on distinct threads. Calls on one context and its models from
 * several threads at once are serialized by a mutex per context (they block, one after the other; never UB).
 * Destroying a handle while another thread uses it is the caller's bug. A context's device stays alive while
 * any of its models does, so models and contexts may be destroyed in any order.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(KILN_BUILDING_LIBRARY)
#define KILN_API __declspec(dllexport)
#else
#define KILN_API
#endif
#else
#define KILN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

/* Initializer of a struct: struct_size set, every other field zero (C: designated, so -Wextra stays quiet). */
#ifdef __cplusplus
#define KILN_INIT_(T)               \
    ([] {                           \
        T v_{};                     \
        v_.struct_size = sizeof(T); \
        return v_;                  \
    }())
#else
#define KILN_INIT_(T) \
    { .struct_size = sizeof(T) }
#endif

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_INVALID_ARGUMENT = 1, /* a NULL handle, an out-of-range value, inputs that do not fit the model */
    KILN_NOT_FOUND = 2,        /* no such file, device, component or label */
    KILN_IO = 3,               /* a model file that cannot be read: truncated, corrupt, unreadable */
    KILN_UNSUPPORTED = 4,      /* a model class, scheduler or struct version this library does not handle */
    KILN_OUT_OF_MEMORY = 5,    /* host or device memory */
    KILN_DEVICE_LOST = 6,      /* the Vulkan device was lost; destroy the context */
    KILN_CANCELLED = 7,        /* the progress callback returned non-zero */
    KILN_BUFFER_TOO_SMALL = 8, /* kiln_image.capacity < required_bytes (nothing was generated) */
    KILN_INTERNAL = 9          /* a bug in Kiln; the message says where */
} kiln_status;

/* "0.1.0"; the library's, which may differ from the KILN_VERSION_* the caller compiled with. */
KILN_API const char* kiln_version(void);
/* major * 10000 + minor * 100 + patch. */
KILN_API int kiln_version_number(void);
/* The message of the calling thread's last failed call ("" after a success). Valid until its next kiln_ call. */
KILN_API const char* kiln_last_error(void);
/* "KILN_OK", "KILN_NOT_FOUND", ...; "KILN_UNKNOWN_STATUS" for other values. */
KILN_API const char* kiln_status_name(kiln_status s);

/* ---- Devices ------------------------------------------------------------------------------------------------- */

typedef struct kiln_device_info {
    size_t struct_size;
    int index;
    char name[256];
    char type[32];        /* "discrete", "integrated", "virtual", "cpu", "other" */
    char driver[256];     /* driver name and version */
    char api_version[32]; /* Vulkan version, "1.3.255" */
    uint64_t device_local_bytes;
    int unified_memory; /* 1: a device-local heap is host-visible */
    int usable;         /* 1: has the features Kiln needs (16-bit storage, subgroup arithmetic) */
    /* Appended (an older caller's smaller struct ends before them): the features Kiln uses, 1 = present. */
    int fp16_storage;        /* storageBuffer16BitAccess */
    int fp16_arithmetic;     /* shaderFloat16 */
    int int8_arithmetic;     /* shaderInt8 */
    int int64;               /* shaderInt64 */
    int subgroup_arithmetic; /* subgroup arithmetic in compute shaders */
    int cooperative_matrix;
    int buffer_device_address;
    int timestamps; /* compute-queue timestamps */
    uint32_t subgroup_size;
    uint32_t max_shared_memory_bytes; /* maxComputeSharedMemorySize */
    uint64_t max_storage_buffer_range;
    uint64_t max_allocation_bytes; /* maxMemoryAllocationSize */
    int memory_budget;             /* VK_EXT_memory_budget: the driver reports heap usage */
    /* Appended in 0.1: a transfer-only queue family (a DMA engine), which kiln_context_options.transfer_queue = 1
       uses for streamed weight copies; and maxPerStageDescriptorStorageBuffers. */
    int transfer_queue;
    uint32_t max_storage_buffers_per_stage;
    /* Appended in 0.1, after the above: uniform texel buffers in every format Kiln reads through them (RGBA32F,
       RGBA16F, RGBA16_UINT, R32F, R16F, R16_UINT: its "tex" kernels, 2-3x faster on CPU devices), and
       maxTexelBufferElements. */
    int texel_buffers;
    uint32_t max_texel_buffer_elements;
    /* Appended in 0.1, after the above: subgroup size control (Vulkan 1.3's subgroupSizeControl and
       computeFullSubgroups for compute): the sizes a pipeline may require, minSubgroupSize .. maxSubgroupSize (0 .. 0
       without it). Kiln's cooperative-matrix kernels require subgroup_size where it is present. */
    int subgroup_size_control;
    uint32_t subgroup_size_min, subgroup_size_max;
} kiln_device_info;
#define KILN_DEVICE_INFO_INIT KILN_INIT_(kiln_device_info)

/* Number of Vulkan devices (0 when there is no driver: not an error). */
KILN_API kiln_status kiln_device_count(int* count);
/* Fills *info for device `index` (0 .. count-1; else KILN_NOT_FOUND). info->struct_size must be set. */
KILN_API kiln_status kiln_device_get_info(int index, kiln_device_info* info);

/* ---- Context: one Vulkan device ------------------------------------------------------------------------------ */

typedef struct kiln_context kiln_context;

typedef struct kiln_context_options {
    size_t struct_size;
    int device;     /* Vulkan device index; -1 = KILN_DEVICE if set, else the best (discrete > integrated > ...) */
    int validation; /* 0 = KILN_VALIDATION environment variable decides, 1 = on, -1 = off */
    /* Device memory one model may use for weights and activations (0: the device's memory heap). Block weights
       over it stay in host memory and stream through a ring of device slots (regional mode). Appended in 0.1. */
    uint64_t vram_budget_bytes;
    /* Where streamed block weights are copied into their ring slots. 0 = the KILN_TRANSFER_QUEUE environment
       variable decides (default: inside each step's compute submission); -1 = inside the step; 1 = on the device's
       transfer-only queue where it has one (kiln_device_info.transfer_queue), in batches ordered by timeline
       semaphores, else inside the step; 2 = those batches on the compute queue. Appended in 0.1. */
    int transfer_queue;
    /* Activations only linears read (on a GPU also attention's q, k, v and output) stored as f16, accumulating in
       f32 (outputs move by about 3e-4 relative). 0 = the KILN_ACT_F16 environment variable decides (default off),
       1 = on, -1 = off.
       Appended in 0.1. */
    int f16_activations;
    /* Operands of the cooperative-matrix kernels (linear and attention, on devices that have them): 0 = the
       KILN_PRECISION environment variable decides (default exact), -1 = exact (each split into two f16 parts:
       f32-like results), 1 = fast (each rounded to one f16, accumulating in f32: half the matrix operations, about
       1e-3 relative). Appended in 0.2. */
    int fast_precision;
} kiln_context_options;
/* device -1 (auto), validation from the environment. */
#ifdef __cplusplus
#define KILN_CONTEXT_OPTIONS_INIT                                   \
    ([] {                                                           \
        kiln_context_options o_ = KILN_INIT_(kiln_context_options); \
        o_.device = -1;                                             \
        return o_;                                                  \
    }())
#else
#define KILN_CONTEXT_OPTIONS_INIT \
    { .struct_size = sizeof(kiln_context_options), .device = -1 }
#endif

/* Creates a context on a device. options NULL = KILN_CONTEXT_OPTIONS_INIT. *out is NULL on failure. */
KILN_API kiln_status kiln_context_create(const kiln_context_options* options, kiln_context** out);
/* Releases the caller's handle (NULL is fine); the device goes when its last model does. */
KILN_API void kiln_context_destroy(kiln_context* ctx);
/* The context's device. */
KILN_API kiln_status kiln_context_get_device(const kiln_context* ctx, kiln_device_info* info);

/* ---- Model ----------------------------------------------------------------------------------------------------- */

typedef struct kiln_model kiln_model;

typedef enum kiln_model_kind {
    KILN_MODEL_CLASS_LABELS = 1, /* DiT: generate from class labels */
    KILN_MODEL_TEXT = 2,         /* PixArt, SD3, Flux: generate from prompts */
    KILN_MODEL_COMPONENT = 3     /* a single component (kiln_forward only) */
} kiln_model_kind;

typedef struct kiln_model_info {
    size_t struct_size;
    kiln_model_kind kind;
    const char* pipeline; /* "DiTPipeline", "PixArtSigmaPipeline", ... ("" for a single component); owned by model */
    int component_count;  /* names: kiln_model_component */
    int class_count;      /* class labels (0 for text models); names: kiln_model_class_label */
    int default_width;    /* image size without width/height given */
    int default_height;
} kiln_model_info;
#define KILN_MODEL_INFO_INIT KILN_INIT_(kiln_model_info)

/* Opens a Kiln model file (from kiln-convert), a diffusers pipeline folder, or "synthetic:NAME" (a real
 * architecture with random weights: dit-xl-2-256, ...). Missing path -> KILN_NOT_FOUND, unreadable -> KILN_IO.
 * The weights are read from the file at each generate/forward; the model keeps the context alive. */
KILN_API kiln_status kiln_model_open(kiln_context* ctx, const char* path, kiln_model** out);
/* The files people download, one per component, as stable-diffusion.cpp's flags name them. Each path is a single
 * file in its publisher's layout (Black Forest Labs' or ComfyUI's Flux keys, Stability's SD3/SD3.5 single file, an
 * LDM-layout VAE, CLIP/T5 files with transformers' keys, city96's GGUF), a diffusers component folder or a Kiln
 * file; NULL or "": not given. Configs, scheduler and tokenizers: from `config`, a diffusers pipeline folder (only its
 * *.json and tokenizer files are read), else the published model the transformer's shapes identify (FLUX.1-dev/
 * schnell, SD3 medium, SD3.5 medium/large), its tokenizers from `tokenizers` or the Hugging Face cache (HF_HOME).
 * Appended in 0.2. */
typedef struct kiln_model_files {
    size_t struct_size;
    const char* model;           /* a single file holding one or more components (Stability's SD3 file holds all) */
    const char* diffusion_model; /* the transformer: flux1-dev.safetensors, flux1-dev-Q4_K_S.gguf, ... */
    const char* vae;             /* ae.safetensors, ... */
    const char* clip_l;
    const char* clip_g;
    const char* t5xxl;
    const char* config;     /* a diffusers pipeline folder of the same model */
    const char* tokenizers; /* a folder holding tokenizer/, tokenizer_2/, ... */
    /* Appended in 0.2: Z-Image, FLUX.2 [klein]: the Qwen3 text encoder (stable-diffusion.cpp's --llm): a single
     * file (transformers' names, or a llama.cpp GGUF), a transformers folder or a Kiln file. */
    const char* llm;
} kiln_model_files;
#define KILN_MODEL_FILES_INIT KILN_INIT_(kiln_model_files)

/* Opens the pipeline those files make. A file of the wrong kind for its field, components of different models, a
 * transformer of unknown size without `config`, or tokenizers not found: KILN_INVALID_ARGUMENT, with the message
 * naming the file and what to do (kiln_last_error). */
KILN_API kiln_status kiln_model_open_files(kiln_context* ctx, const kiln_model_files* files, kiln_model** out);
KILN_API void kiln_model_destroy(kiln_model* model); /* NULL is fine */
KILN_API kiln_status kiln_model_get_info(const kiln_model* model, kiln_model_info* info);
/* Component i (0 .. component_count-1): "transformer", "vae", "scheduler", "text_encoder", ...; *name and *cls
 * (diffusers class, may be NULL) are owned by the model. */
KILN_API kiln_status kiln_model_component(const kiln_model* model, int i, const char** name, const char** cls);
/* Class label i (0 .. class_count-1): its id (what kiln_generate_params.class_labels takes) and name ("" when
 * the model names none), owned by the model. */
KILN_API kiln_status kiln_model_class_label(const kiln_model* model, int i, int* id, const char** name);

/* The summary `kiln info` prints of a Kiln model file (components, classes, config, parameter counts, dtypes,
 * sizes, tokenizer files), UTF-8 text; no context needed. With buf NULL, sets *length only; else writes the text
 * and a NUL if capacity > *length (else KILN_BUFFER_TOO_SMALL, nothing written). Missing file: KILN_NOT_FOUND;
 * not a valid Kiln file: KILN_IO. */
KILN_API kiln_status kiln_describe_model_file(const char* path, char* buf, size_t capacity, size_t* length);

/* ---- Tensors (kiln_forward's inputs and outputs, kiln_generate's prompt_embeds) ------------------------------ */

typedef enum kiln_dtype {
    KILN_F32 = 0,
    KILN_F16 = 1,
    KILN_BF16 = 2,
    KILN_I32 = 3,
    KILN_I64 = 4,
    KILN_U8 = 5
} kiln_dtype;

/* A tensor view: contiguous, outermost dimension first (as PyTorch). This struct's layout is fixed. */
typedef struct kiln_tensor {
    const char* name;
    kiln_dtype dtype;
    int ndim; /* 0 .. 8 */
    const int64_t* shape;
    const void* data;
} kiln_tensor;

/* ---- Generate -------------------------------------------------------------------------------------------------- */

typedef enum kiln_jit_mode {
    KILN_JIT_DEFAULT = 0, /* regional */
    KILN_JIT_EAGER = 1,   /* one submit per op (debugging) */
    KILN_JIT_FULL = 2,    /* the whole graph recorded once and replayed */
    KILN_JIT_REGIONAL = 3 /* one repeated layer recorded once, replayed per layer */
} kiln_jit_mode;

/* Called after each denoising step (step 1 .. total), and once with step 0 before the first. Return non-zero to
 * cancel: the call stops at the next step boundary with KILN_CANCELLED; the context stays usable. */
typedef int (*kiln_progress_fn)(int step, int total, void* user);

typedef struct kiln_result kiln_result; /* named tensors; see kiln_forward */

/* What a generate call resolved and measured (params->stats). The size query fills the resolved fields. */
typedef struct kiln_generate_stats {
    size_t struct_size;
    int steps;       /* resolved: the pipeline's default when params->steps is 0 */
    double guidance; /* resolved */
    int width, height;
    double plan_ms;    /* transformer and VAE planned, pipelines created, weights uploaded */
    double denoise_ms; /* the denoising loop */
    double decode_ms;  /* the VAE decode */
    uint64_t transformer_weight_bytes, transformer_activation_bytes; /* what the transformer needs */
    uint64_t transformer_device_bytes;                               /* what it allocated (whole blocks) */
    int device_loop;        /* 1: the denoising loop ran on the device (guidance and scheduler steps recorded) */
    double denoise_host_ms; /* of denoise_ms, the time the host was busy (not waiting for the device) */
    double loop_plan_ms;    /* of denoise_host_ms, planning and recording the device loop */
    /* Appended: text models that encoded prompts (zero otherwise). */
    double tokenize_ms, encode_ms;      /* tokenizers; text encoders (plan, upload, run) */
    uint64_t text_encoder_bytes;        /* the largest encoder's weights + activations */
    uint64_t text_encoder_device_bytes; /* what it allocated */
    int text_encoders_reused;           /* 1: keep_encoders found them resident from an earlier call */
    /* Appended: streaming under vram_budget_bytes (zero when every block is resident). */
    int blocks_streamed;              /* transformer block instances kept in host memory */
    uint64_t streamed_bytes_per_step; /* copied from host memory into device slots per step */
    int copy_batches_per_step;        /* ring copies in batches of their own (transfer_queue 1 or 2), else 0 */
    /* Appended in 0.2: 1 when keep_transformer found the transformer resident (nothing planned, recorded or
     * uploaded; plan_ms is the VAE's and the inputs'). */
    int transformer_reused;
} kiln_generate_stats;
#define KILN_GENERATE_STATS_INIT KILN_INIT_(kiln_generate_stats)

/* A LoRA for kiln_generate_params.loras: a safetensors file (diffusers/PEFT, kohya, ComfyUI/BFL or XLabs layout) and
 * its scale (diffusers' adapter weight x joint_attention_kwargs scale; 1 = as trained). */
typedef struct kiln_lora {
    const char* path;
    double scale;
} kiln_lora;

typedef enum kiln_lora_apply {
    KILN_LORA_APPLY_DEFAULT = 0, /* runtime */
    KILN_LORA_APPLY_MERGE = 1,   /* W + scale (alpha / rank) B A folded into f32/f16/bf16 weights at load */
    KILN_LORA_APPLY_RUNTIME = 2  /* y = W x + sum scale (alpha / rank) B (A x) in the block graph; W untouched */
} kiln_lora_apply;

typedef struct kiln_generate_params {
    size_t struct_size;
    /* Text models: one image per prompt (UTF-8). Class-label models: one image per label. Give one or the other. */
    const char* const* prompts;
    int prompt_count;
    const char* negative_prompt; /* NULL = the pipeline's default ("") */
    const int* class_labels;
    int class_label_count;
    int width, height; /* 0 = the model's (text models only; class-label models have one size) */
    int steps;         /* 0 = the pipeline's (DiT 25, PixArt 20, SD3/Flux 28) */
    /* Every double field (and each of sigmas, timesteps, loras[i].scale) must be finite and within its range
     * (the same for every family and the CLI's flags: docs/cli.md, Numbers), else KILN_INVALID_ARGUMENT naming
     * the field. */
    double guidance;       /* 0 = the pipeline's (DiT 4, PixArt 4.5, SD3 7, Flux 3.5, Z-Image 5, klein 4) unless
                            * guidance_exact; 1 = no guidance (Z-Image: 0 with guidance_exact); >= 0 */
    uint64_t seed;         /* the initial noise diffusers draws with generator=torch.manual_seed(seed) (f32) */
    const char* scheduler; /* NULL/"" = the model's; "ddim", "dpm", "euler", "euler_a", a diffusers class, or a
                            * preset: "dpm++2m-karras", "dpm++2m-sde", "dpm++2m-sde-karras", "euler-karras" */
    kiln_jit_mode jit_mode;
    /* Optional exact initial noise, float32 NCHW [images, latent channels, h, w] (Flux: unpacked; FLUX.2 [klein]: as
     * diffusers draws it, 2x2-patchified [images, 4 x latent channels, h/2, w/2]); NULL = seeded. */
    const float* latents;
    const int64_t* latents_shape;
    int latents_ndim;
    int max_sequence_length; /* text models: T5 tokens; 0 = the pipeline's */
    kiln_progress_fn progress;
    void* progress_user;
    /* Appended (an older caller's smaller struct ends before them; zero = off). */
    kiln_generate_stats* stats;  /* non-NULL (struct_size set): filled by the call */
    kiln_result** intermediates; /* non-NULL: receives every intermediate under diffusers' names (step{i}_latents,
                                    step{i}_noise_pred, decoded, image, ...); the caller destroys it */
    int vae_tiling;              /* 1: decode in overlapping tiles, as diffusers' vae.enable_tiling() */
    int vae_tile_size;           /* with vae_tiling: tile side in pixels; 0 = the VAE's sample_size */
    /* Appended (zero = off). */
    int no_resolution_binning; /* PixArt: 1 = no resolution binning (diffusers' use_resolution_binning=False) */
    /* Text models, instead of prompts: the text conditioning under diffusers' names (prompt_embeds [B, L, D],
     * negative_prompt_embeds, pooled_prompt_embeds [B, D], negative_pooled_prompt_embeds, prompt_attention_mask
     * [B, L], negative_prompt_attention_mask), as the pipeline's encode_prompt returns them; one image per row. */
    const kiln_tensor* prompt_embeds;
    int prompt_embeds_count;
    /* 1: the text encoders stay planned and uploaded in the model after this call, so the next call with the same
     * prompt count skips that (costs their device memory while the transformer runs); 0 frees any kept ones. */
    int keep_encoders;
    /* Appended (zero = one). diffusers' num_images_per_prompt: images per prompt (or per prompt_embeds row, or per
     * class label), each from its own initial noise. Prompts are encoded once; prompts a, b with 2 give images
     * a, a, b, b (latents then have that many rows). */
    int images_per_prompt;
    /* Appended (NULL/0 = not given): diffusers' negative_prompt as a list, and prompt_2, prompt_3,
     * negative_prompt_2, negative_prompt_3. Each list holds one text for every prompt, or one per prompt.
     * negative_prompts replaces negative_prompt (give one or the other). Not given: prompts_2 and prompts_3 are the
     * prompts, negative_prompts_2 and negative_prompts_3 the negative prompts; so is one empty text.
     * SD3: prompts_2 / negative_prompts_2 go to CLIP-G (text_encoder_2), prompts_3 / negative_prompts_3 to T5.
     * Flux: prompts_2 / negative_prompts_2 go to T5 (negatives with true_cfg_scale). PixArt: only prompts and
     * negative prompts apply. */
    const char* const* negative_prompts;
    int negative_prompt_count;
    const char* const* prompts_2;
    int prompt_2_count;
    const char* const* prompts_3;
    int prompt_3_count;
    const char* const* negative_prompts_2;
    int negative_prompt_2_count;
    const char* const* negative_prompts_3;
    int negative_prompt_3_count;
    /* Flux: diffusers' true_cfg_scale (0 = 1 = off). Above 1, with a negative prompt (negative_prompt(s); not
     * negative_prompts_2 alone, as diffusers' has_neg_prompt) or negative_prompt_embeds and
     * negative_pooled_prompt_embeds, classifier-free guidance on top of the embedded guidance: negative +
     * true_cfg_scale * (prompt - negative). Without a negative it does nothing, as in diffusers. Other pipelines:
     * KILN_INVALID_ARGUMENT (their scale is guidance). */
    double true_cfg_scale;
    /* diffusers' sigmas (NULL/0 = the pipeline's schedule); the step count follows from them (steps 0 or equal).
     * SD3, Flux: the flow-matching schedule before the scheduler's shift, one per step in [0, 1]. PixArt with
     * scheduler "euler": EulerDiscreteScheduler's whole schedule, its final sigma included (sigma_count - 1 steps);
     * PixArt's DPM-Solver and DDIM take none (KILN_INVALID_ARGUMENT). */
    const double* sigmas;
    int sigma_count;
    /* The dtype of the seeded noise: NULL/"" or "f32" (default), "f16", "bf16". diffusers draws torch.randn in the
     * pipeline's dtype (torch_dtype), so an f16 or bf16 pipeline draws other noise than an f32 one for the same seed;
     * this picks which one seed reproduces. Anything else: KILN_INVALID_ARGUMENT. */
    const char* noise_dtype;
    /* SD3: diffusers' clip_skip (0 = none): the prompts' CLIP-L and CLIP-G embeddings are hidden_states[-(clip_skip
     * + 2)] instead of [-2]; the negative prompts keep [-2], as diffusers encodes them. At most the CLIP layer count
     * - 1. Other pipelines, and with prompt_embeds: KILN_INVALID_ARGUMENT. */
    int clip_skip;
    /* SD3 (SD3.5): diffusers' skip-layer guidance. skip_guidance_layers: the blocks left out (NULL/0 = off). With
     * classifier-free guidance, the steps i with start * N < i < stop * N make one more transformer call on the
     * prompt rows without those blocks, and noise_pred += (noise_pred_text - noise_pred_skip) * scale. scale 0 =
     * 2.8; start and stop both 0 = 0.01 and 0.2 (diffusers' defaults). The loop then runs on the host. */
    const int* skip_guidance_layers;
    int skip_guidance_layer_count;
    double skip_layer_guidance_scale;
    double skip_layer_guidance_start;
    double skip_layer_guidance_stop;
    /* PixArt: diffusers' timesteps (NULL/0 = the scheduler's spacing): training timesteps, one per step, strictly
     * decreasing in [0, num_train_timesteps); the step count is timestep_count (steps 0 or equal). DPM-Solver
     * (integers) and Euler take them; DDIM, DiT, SD3 and Flux do not (KILN_INVALID_ARGUMENT; SD3 and Flux take
     * sigmas). Not with sigmas. */
    const double* timesteps;
    int timestep_count;
    /* PixArt with scheduler "ddim": diffusers' eta (0 = deterministic DDIM, 1 = DDPM's variance). Above 0 every step
     * adds noise drawn from seed's generator after the initial latents, as diffusers draws it. Other schedulers
     * ignore it (a warning on stderr), as diffusers does; DiT, SD3, Flux:
     * KILN_INVALID_ARGUMENT. */
    double eta;
    /* diffusers' Scheduler.from_config(scheduler.config, **kwargs): a JSON object whose fields replace the scheduler
     * config's, e.g. "{\"use_karras_sigmas\": true}" (NULL/"" = none). A field the scheduler does not read, or
     * invalid JSON: KILN_INVALID_ARGUMENT naming it. */
    const char* scheduler_config;
    /* Appended (zero = off). 1: the denoising loop on the host (the transformer's output read back every step,
     * guidance and the scheduler step on the CPU) instead of on the device; the same results, bitwise. By default the
     * loop runs on the device where it can (stats->device_loop says whether it did; KILN_DEVICE_LOOP=0 in the
     * environment also forces the host). */
    int host_loop;
    /* Appended in 0.2 (NULL/0 = none). SD3, Flux: LoRAs on the transformer, applied as trained (docs/lora.md); each
     * file's matched tensor count goes to stderr. Keys that match no module of the model, a LoRA of another family,
     * a rank or shape mismatch, NaN/Inf or a truncated file: KILN_INVALID_ARGUMENT naming the file, no image.
     * lora_allow_unmatched 1: unmatched keys are a warning and the rest applies (as diffusers). */
    const kiln_lora* loras;
    int lora_count;
    int lora_apply; /* a kiln_lora_apply */
    int lora_allow_unmatched;
    /* Appended in 0.2: images in (SD3, Flux; NULL/0 = text-to-image). image: the picture to start from, RGBA8
     * (alpha ignored; data, width, height read), resized to the call's width x height (Lanczos) and VAE-encoded:
     * diffusers' img2img pipeline. mask: with image, the same size, RGBA8 read as PIL's convert("L"), >= 128 after
     * the resize = repaint: the inpainting pipeline. strength: in (0, 1], 0 = the pipeline's (0.6); the loop runs
     * the last int(steps * strength) steps, from the image noised to that step's sigma. image_tensor /
     * mask_tensor: diffusers' preprocessed tensors (float32 [1, 3, H, W] in [-1, 1] / [1, 1, H, W]) instead of
     * pixels, for exact runs. noise: random draws by diffusers' call site ("noise", "image_vae_sample_noise",
     * "masked_image_vae_sample_noise"; Sana-Sprint's per-step "scm_noise_step{i}", with or without an image),
     * float32, replacing those the seed's generator would make. */
    const struct kiln_image* image; /* see kiln_image below */
    const struct kiln_image* mask;
    double strength;
    const kiln_tensor* image_tensor;
    const kiln_tensor* mask_tensor;
    const kiln_tensor* noise;
    int noise_count;
    /* Flux Kontext (a model_index.json naming FluxKontextPipeline): image is the reference. max_area: diffusers'
     * max_area, the output's area in pixels at the aspect of width / height (0 = 1024 * 1024). no_auto_resize: 1 =
     * the reference at its own size (floored to 16 px) instead of the preferred resolution nearest its aspect. */
    int64_t max_area;
    int no_auto_resize;
    /* Appended in 0.2 (zero = off). Text models: 1 keeps the transformer planned, recorded and uploaded in the model
     * after this call; the next call with the same shapes (prompt count, size, sequence lengths), jit_mode, skip
     * layers and LoRA files reuses it and writes only its inputs: with lora_apply runtime, other LoRA scales cost a
     * few floats (see kiln_model_set_lora_scales). Another call replaces it; 0 frees it. It holds its device memory
     * between calls. */
    int keep_transformer;
    /* Appended in 0.2 (NULL = the pipeline's default). Sana, Sana-Sprint: diffusers' complex_human_instruction, its
     * lines joined by "\n"; the positive prompts are encoded after it, to n_chi + max_sequence_length - 2 tokens
     * (n_chi: the instruction's with <bos>), then <bos> and the last max_sequence_length - 1 kept. "" = none
     * (diffusers' None or []): the prompts alone, to max_sequence_length tokens. Other pipelines, and with
     * prompt_embeds: KILN_INVALID_ARGUMENT. */
    const char* complex_human_instruction;
    /* Appended in 0.2 (NULL/0 = the pipeline's). FLUX.2 [klein]: diffusers' text_encoder_out_layers, the Qwen3
     * hidden_states entries the prompt embeddings stack on features, in order (transformers' numbering: 0 = the
     * embeddings, i = after layer i; negative from the end, -1 = the last); the default is 9, 18, 27. Each must be
     * an entry of the model's Qwen3. Other pipelines, and with prompt_embeds: KILN_INVALID_ARGUMENT. */
    const int* text_encoder_layers;
    int text_encoder_layer_count;
    /* Appended in 0.2 (zero = the pipeline's). Z-Image: diffusers' cfg_truncation: classifier-free guidance is left
     * out of the steps whose (1000 - t) / 1000 exceeds it; 1 or more: never (0 = 1, the default). diffusers' 0.0,
     * guidance only where (1000 - t) / 1000 is 0, is any value in (0, 1e-45]: that fraction is an f32.
     * cfg_normalization: > 0 caps each sample's guided prediction at cfg_normalization times the norm of its
     * prompt's prediction (1 = diffusers' True); 0 = off (diffusers' False); negative: KILN_INVALID_ARGUMENT.
     * Other pipelines: KILN_INVALID_ARGUMENT unless both are zero. Not in KILN_GENERATE_PARAMS_INIT's defaults: an
     * appended field stays zero there, so that a library older than this header accepts the struct. */
    double cfg_truncation;
    double cfg_normalization;
    /* Appended in 0.2. Nonzero: `guidance` is used as given, 0 included (Z-Image guides whenever guidance > 0:
     * Z-Image-Turbo runs with 0, no classifier-free guidance; Flux's embedded guidance 0); zero: guidance 0 means
     * the pipeline's default, as before. */
    int guidance_exact;
} kiln_generate_params;
#define KILN_GENERATE_PARAMS_INIT KILN_INIT_(kiln_generate_params)

typedef enum kiln_pixel_format {
    KILN_PIXELS_RGBA8 = 0,  /* 4 bytes a pixel, alpha 255; round(v * 255) as diffusers' numpy_to_pil */
    KILN_PIXELS_RGB_F32 = 1 /* 3 floats a pixel in [0, 1] (diffusers' output_type="np") */
} kiln_pixel_format;

/* Images are written one after the other, each row-major from the top-left pixel, without padding. */
typedef struct kiln_image {
    size_t struct_size;
    kiln_pixel_format format; /* in */
    void* data;               /* in: caller's buffer, or NULL to query the size only */
    size_t capacity;          /* in: bytes at data */
    int width, height, count; /* out */
    size_t required_bytes;    /* out: width * height * count * bytes per pixel */
} kiln_image;
#define KILN_IMAGE_INIT KILN_INIT_(kiln_image)

/* Generates images. With out->data NULL, checks params and fills width/height/count/required_bytes without
 * generating (cheap); then call again with a buffer of at least required_bytes. */
KILN_API kiln_status kiln_generate(kiln_model* model, const kiln_generate_params* params, kiln_image* out);

/* Changes the scales of the LoRAs of the transformer kept resident by keep_transformer (lora_apply runtime): one
 * per kiln_lora of the call that built it, in order. Written to the device now; nothing is planned, recorded or
 * uploaded again. They replace the kiln_lora.scale values of later calls that reuse the resident transformer, until
 * a call replaces it. The transformer's only: a LoRA's text-encoder modules take each call's kiln_lora.scale (to
 * change a whole LoRA, pass the scales in the call). KILN_INVALID_ARGUMENT with one line when no transformer is
 * resident, it has no LoRAs, its LoRAs were merged (lora_apply merge: their scales are baked into the weights),
 * count differs from its LoRA count, or a scale is not finite. */
KILN_API kiln_status kiln_model_set_lora_scales(kiln_model* model, const double* scales, int count);

/* ---- Forward: one component on named inputs (`kiln forward`) -------------------------------------------------- */

typedef struct kiln_forward_params {
    size_t struct_size;
    const char* component;     /* NULL = the transformer, or the only model component */
    const kiln_tensor* inputs; /* named as diffusers' forward arguments: hidden_states, timestep, class_labels, ... */
    int input_count;
    kiln_jit_mode jit_mode;
    int cpu_reference; /* 1: run the CPU reference executor (slow; the oracle) instead of the device */
    /* Appended: the VAE (AutoencoderKL) with diffusers' memory options; other components refuse them. */
    int vae_tiled;     /* 1: overlapping tiles, blended (enable_tiling()) */
    int vae_tile_size; /* with vae_tiled: tile side in pixels; 0 = the config's sample_size */
    int vae_sliced;    /* 1: one batch element at a time (enable_slicing()) */
} kiln_forward_params;
#define KILN_FORWARD_PARAMS_INIT KILN_INIT_(kiln_forward_params)

/* Runs one component; *out receives the named outputs (sample; decoded; last_hidden_state; ...), sorted by name.
 * Unknown component -> KILN_NOT_FOUND; inputs that do not fit it -> KILN_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_forward(kiln_model* model, const kiln_forward_params* params, kiln_result** out);
KILN_API int kiln_result_count(const kiln_result* result); /* 0 for NULL */
/* Output i; the tensor's name, shape and data are owned by the result. */
KILN_API kiln_status kiln_result_get(const kiln_result* result, int i, kiln_tensor* tensor);
KILN_API kiln_status kiln_result_find(const kiln_result* result, const char* name, kiln_tensor* tensor);
KILN_API void kiln_result_destroy(kiln_result* result); /* NULL is fine */

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
