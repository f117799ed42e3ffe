// The published SD3 / SD3.5 models' configs (stabilityai/stable-diffusion-3-medium-diffusers, -3.5-medium,
// -3.5-large), as JSON text laid out as in those repositories' files; published_configs.cpp says how these texts
// were sourced and how they are read.
#include "models/layouts/published_entries.h"

namespace kiln::layouts::detail {

namespace {

// model_index.json of SD3 medium; SD3.5's differ in _diffusers_version only (not found verbatim: any further
// optional entries SD3.5's may list, such as image_encoder, would be [null, null], which Kiln skips anyway).
const char* kSd3ModelIndex = R"({
  "_class_name": "StableDiffusion3Pipeline",
  "_diffusers_version": "0.29.0.dev0",
  "scheduler": [
    "diffusers",
    "FlowMatchEulerDiscreteScheduler"
  ],
  "text_encoder": [
    "transformers",
    "CLIPTextModelWithProjection"
  ],
  "text_encoder_2": [
    "transformers",
    "CLIPTextModelWithProjection"
  ],
  "text_encoder_3": [
    "transformers",
    "T5EncoderModel"
  ],
  "tokenizer": [
    "transformers",
    "CLIPTokenizer"
  ],
  "tokenizer_2": [
    "transformers",
    "CLIPTokenizer"
  ],
  "tokenizer_3": [
    "transformers",
    "T5TokenizerFast"
  ],
  "transformer": [
    "diffusers",
    "SD3Transformer2DModel"
  ],
  "vae": [
    "diffusers",
    "AutoencoderKL"
  ]
})";

const char* kSd35ModelIndex = R"({
  "_class_name": "StableDiffusion3Pipeline",
  "_diffusers_version": "0.31.0.dev0",
  "scheduler": [
    "diffusers",
    "FlowMatchEulerDiscreteScheduler"
  ],
  "text_encoder": [
    "transformers",
    "CLIPTextModelWithProjection"
  ],
  "text_encoder_2": [
    "transformers",
    "CLIPTextModelWithProjection"
  ],
  "text_encoder_3": [
    "transformers",
    "T5EncoderModel"
  ],
  "tokenizer": [
    "transformers",
    "CLIPTokenizer"
  ],
  "tokenizer_2": [
    "transformers",
    "CLIPTokenizer"
  ],
  "tokenizer_3": [
    "transformers",
    "T5TokenizerFast"
  ],
  "transformer": [
    "diffusers",
    "SD3Transformer2DModel"
  ],
  "vae": [
    "diffusers",
    "AutoencoderKL"
  ]
})";

// SD3 medium transformer/config.json: 24 joint blocks of 24 x 64 = 1536, a 192 x 192 position table, no qk norm.
const char* kSd3MediumTransformer = R"({
  "_class_name": "SD3Transformer2DModel",
  "_diffusers_version": "0.29.0.dev0",
  "attention_head_dim": 64,
  "caption_projection_dim": 1536,
  "in_channels": 16,
  "joint_attention_dim": 4096,
  "num_attention_heads": 24,
  "num_layers": 24,
  "out_channels": 16,
  "patch_size": 2,
  "pooled_projection_dim": 2048,
  "pos_embed_max_size": 192,
  "sample_size": 128
})";

// SD3.5 medium (MMDiT-X): qk RMS norm, a second image self-attention (attn2) in blocks 0..12, a 384 x 384 table.
const char* kSd35MediumTransformer = R"({
  "_class_name": "SD3Transformer2DModel",
  "_diffusers_version": "0.31.0.dev0",
  "attention_head_dim": 64,
  "caption_projection_dim": 1536,
  "dual_attention_layers": [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    12
  ],
  "in_channels": 16,
  "joint_attention_dim": 4096,
  "num_attention_heads": 24,
  "num_layers": 24,
  "out_channels": 16,
  "patch_size": 2,
  "pooled_projection_dim": 2048,
  "pos_embed_max_size": 384,
  "qk_norm": "rms_norm",
  "sample_size": 128
})";

// SD3.5 large: 38 blocks of 38 x 64 = 2432, qk RMS norm, no dual attention.
const char* kSd35LargeTransformer = R"({
  "_class_name": "SD3Transformer2DModel",
  "_diffusers_version": "0.31.0.dev0",
  "attention_head_dim": 64,
  "caption_projection_dim": 2432,
  "in_channels": 16,
  "joint_attention_dim": 4096,
  "num_attention_heads": 38,
  "num_layers": 38,
  "out_channels": 16,
  "patch_size": 2,
  "pooled_projection_dim": 2048,
  "pos_embed_max_size": 192,
  "qk_norm": "rms_norm",
  "sample_size": 128
})";

// vae/config.json of SD3 medium.
const char* kSd3Vae = R"({
  "_class_name": "AutoencoderKL",
  "_diffusers_version": "0.29.0.dev0",
  "act_fn": "silu",
  "block_out_channels": [
    128,
    256,
    512,
    512
  ],
  "down_block_types": [
    "DownEncoderBlock2D",
    "DownEncoderBlock2D",
    "DownEncoderBlock2D",
    "DownEncoderBlock2D"
  ],
  "force_upcast": true,
  "in_channels": 3,
  "latent_channels": 16,
  "latents_mean": null,
  "latents_std": null,
  "layers_per_block": 2,
  "norm_num_groups": 32,
  "out_channels": 3,
  "sample_size": 1024,
  "scaling_factor": 1.5305,
  "shift_factor": 0.0609,
  "up_block_types": [
    "UpDecoderBlock2D",
    "UpDecoderBlock2D",
    "UpDecoderBlock2D",
    "UpDecoderBlock2D"
  ],
  "use_post_quant_conv": false,
  "use_quant_conv": false
})";

// SD3.5 medium and large: the same autoencoder. Not found verbatim; SD3's with SD3.5's _diffusers_version.
const char* kSd35Vae = R"({
  "_class_name": "AutoencoderKL",
  "_diffusers_version": "0.31.0.dev0",
  "act_fn": "silu",
  "block_out_channels": [
    128,
    256,
    512,
    512
  ],
  "down_block_types": [
    "DownEncoderBlock2D",
    "DownEncoderBlock2D",
    "DownEncoderBlock2D",
    "DownEncoderBlock2D"
  ],
  "force_upcast": true,
  "in_channels": 3,
  "latent_channels": 16,
  "latents_mean": null,
  "latents_std": null,
  "layers_per_block": 2,
  "norm_num_groups": 32,
  "out_channels": 3,
  "sample_size": 1024,
  "scaling_factor": 1.5305,
  "shift_factor": 0.0609,
  "up_block_types": [
    "UpDecoderBlock2D",
    "UpDecoderBlock2D",
    "UpDecoderBlock2D",
    "UpDecoderBlock2D"
  ],
  "use_post_quant_conv": false,
  "use_quant_conv": false
})";

// text_encoder/config.json: CLIP ViT-L/14 with its text projection. Not found verbatim (the architecture fields
// are CLIP ViT-L/14's; _name_or_path left out); the same in the three repositories.
const char* kSd3ClipL = R"({
  "architectures": [
    "CLIPTextModelWithProjection"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "dropout": 0.0,
  "eos_token_id": 2,
  "hidden_act": "quick_gelu",
  "hidden_size": 768,
  "initializer_factor": 1.0,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-05,
  "max_position_embeddings": 77,
  "model_type": "clip_text_model",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 1,
  "projection_dim": 768,
  "torch_dtype": "float16",
  "transformers_version": "4.41.0.dev0",
  "vocab_size": 49408
})";

// text_encoder_2/config.json: OpenCLIP ViT-bigG/14's text tower (gelu, not quick_gelu). Not found verbatim, as
// above.
const char* kSd3ClipG = R"({
  "architectures": [
    "CLIPTextModelWithProjection"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "dropout": 0.0,
  "eos_token_id": 2,
  "hidden_act": "gelu",
  "hidden_size": 1280,
  "initializer_factor": 1.0,
  "initializer_range": 0.02,
  "intermediate_size": 5120,
  "layer_norm_eps": 1e-05,
  "max_position_embeddings": 77,
  "model_type": "clip_text_model",
  "num_attention_heads": 20,
  "num_hidden_layers": 32,
  "pad_token_id": 1,
  "projection_dim": 1280,
  "torch_dtype": "float16",
  "transformers_version": "4.41.0.dev0",
  "vocab_size": 49408
})";

// text_encoder_3/config.json: the T5 v1.1 XXL encoder, as Flux's (stored in float16). Not found verbatim.
const char* kSd3T5 = R"({
  "architectures": [
    "T5EncoderModel"
  ],
  "classifier_dropout": 0.0,
  "d_ff": 10240,
  "d_kv": 64,
  "d_model": 4096,
  "decoder_start_token_id": 0,
  "dense_act_fn": "gelu_new",
  "dropout_rate": 0.1,
  "eos_token_id": 1,
  "feed_forward_proj": "gated-gelu",
  "initializer_factor": 1.0,
  "is_encoder_decoder": true,
  "is_gated_act": true,
  "layer_norm_epsilon": 1e-06,
  "model_type": "t5",
  "num_decoder_layers": 24,
  "num_heads": 64,
  "num_layers": 24,
  "output_past": true,
  "pad_token_id": 0,
  "relative_attention_max_distance": 128,
  "relative_attention_num_buckets": 32,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.41.0.dev0",
  "use_cache": true,
  "vocab_size": 32128
})";

// scheduler/scheduler_config.json: a static shift of 3 over 1000 training steps in all three.
const char* kSd3Scheduler = R"({
  "_class_name": "FlowMatchEulerDiscreteScheduler",
  "_diffusers_version": "0.29.0.dev0",
  "num_train_timesteps": 1000,
  "shift": 3.0
})";

const char* kSd35Scheduler = R"({
  "_class_name": "FlowMatchEulerDiscreteScheduler",
  "_diffusers_version": "0.31.0.dev0",
  "num_train_timesteps": 1000,
  "shift": 3.0
})";

}  // namespace

std::vector<PublishedEntry> sd3_published_entries() {
    const std::vector<std::string> sd3_tok = {"tokenizer", "tokenizer_2", "tokenizer_3"};
    return {
        {"sd3-medium",
         "sd3",
         "stabilityai/stable-diffusion-3-medium-diffusers",
         kSd3ModelIndex,
         {{"transformer", kSd3MediumTransformer},
          {"vae", kSd3Vae},
          {"text_encoder", kSd3ClipL},
          {"text_encoder_2", kSd3ClipG},
          {"text_encoder_3", kSd3T5},
          {"scheduler", kSd3Scheduler}},
         sd3_tok},
        {"sd3.5-medium",
         "sd3",
         "stabilityai/stable-diffusion-3.5-medium",
         kSd35ModelIndex,
         {{"transformer", kSd35MediumTransformer},
          {"vae", kSd35Vae},
          {"text_encoder", kSd3ClipL},
          {"text_encoder_2", kSd3ClipG},
          {"text_encoder_3", kSd3T5},
          {"scheduler", kSd35Scheduler}},
         sd3_tok},
        {"sd3.5-large",
         "sd3",
         "stabilityai/stable-diffusion-3.5-large",
         kSd35ModelIndex,
         {{"transformer", kSd35LargeTransformer},
          {"vae", kSd35Vae},
          {"text_encoder", kSd3ClipL},
          {"text_encoder_2", kSd3ClipG},
          {"text_encoder_3", kSd3T5},
          {"scheduler", kSd35Scheduler}},
         sd3_tok},
    };
}

}  // namespace kiln::layouts::detail
