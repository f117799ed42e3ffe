// The published Qwen3-encoded models: Tongyi-MAI/Z-Image-Turbo and black-forest-labs/FLUX.2-klein-4B / -9B, as their
// diffusers repositories lay them out. No copy of these repositories' files was at hand when this was written: each
// file below is written from the model's known architecture and says where its values come from. Every field Kiln
// reads is the published value as far as those sources agree; a --config DIR of the real repository overrides all of
// it. Provenance-only fields (_diffusers_version, torch_dtype, ...) are left out.
#include "models/layouts/published_entries.h"

namespace kiln::layouts::detail {

namespace {

// ---- Z-Image-Turbo (Tongyi-MAI/Z-Image-Turbo) ----

// model_index.json: the components diffusers' ZImagePipeline takes (pipeline_z_image.py).
const char* kZImageModelIndex = R"({
  "_class_name": "ZImagePipeline",
  "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
  "text_encoder": ["transformers", "Qwen3Model"],
  "tokenizer": ["transformers", "Qwen2Tokenizer"],
  "transformer": ["diffusers", "ZImageTransformer2DModel"],
  "vae": ["diffusers", "AutoencoderKL"]
})";

// transformer/config.json: 30 layers of dim 3840 (30 heads of 128), 2 refiner layers each for noise and caption,
// Qwen3-4B's 2560-wide hidden states in, patch 2, 3-axis RoPE (32, 48, 48) with theta 256. As Kiln's synthetic
// z-image-turbo-1024 architecture (models/core/synthetic_archs.cpp) quotes it.
const char* kZImageTurboTransformer = R"({
  "_class_name": "ZImageTransformer2DModel",
  "all_f_patch_size": [1],
  "all_patch_size": [2],
  "axes_dims": [32, 48, 48],
  "axes_lens": [1536, 512, 512],
  "cap_feat_dim": 2560,
  "dim": 3840,
  "in_channels": 16,
  "n_heads": 30,
  "n_kv_heads": 30,
  "n_layers": 30,
  "n_refiner_layers": 2,
  "norm_eps": 1e-05,
  "qk_norm": true,
  "rope_theta": 256.0,
  "t_scale": 1000.0
})";

// scheduler/scheduler_config.json: the static shift 3.0 Z-Image-Turbo samples with (no dynamic shifting).
const char* kZImageTurboScheduler = R"({
  "_class_name": "FlowMatchEulerDiscreteScheduler",
  "num_train_timesteps": 1000,
  "shift": 3.0,
  "use_dynamic_shifting": false
})";

// Qwen/Qwen3-4B's config.json (as Z-Image-Turbo's text_encoder, class Qwen3Model, and FLUX.2 [klein] 4B's,
// Qwen3ForCausalLM, carry it): 36 layers of 2560, 32 query and 8 key-value heads of 128, tied embeddings.
std::string qwen3_4b(const char* cls) {
    return std::string(R"({
  "architectures": [")") +
           cls + R"("],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2560,
  "initializer_range": 0.02,
  "intermediate_size": 9728,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";
}

// Qwen/Qwen3-8B's config.json (FLUX.2 [klein] 9B's text encoder): 36 layers of 4096, 32 / 8 heads of 128, untied.
const char* kQwen3_8bCausalLm = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// ---- FLUX.2 [klein] (black-forest-labs/FLUX.2-klein-4B, -9B) ----

// model_index.json: Flux2KleinPipeline's components (pipeline_flux2_klein.py). The released klein 4B / 9B are the
// step-distilled models (is_distilled: no CFG); the "base" releases have the same shapes and is_distilled false:
// a base single file needs --config DIR of its repository.
const char* kKleinModelIndex = R"({
  "_class_name": "Flux2KleinPipeline",
  "is_distilled": true,
  "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
  "text_encoder": ["transformers", "Qwen3ForCausalLM"],
  "tokenizer": ["transformers", "Qwen2TokenizerFast"],
  "transformer": ["diffusers", "Flux2Transformer2DModel"],
  "vae": ["diffusers", "AutoencoderKLFlux2"]
})";

// transformer/config.json: diffusers' scripts/convert_flux2_to_diffusers.py get_flux2_transformer_config("klein-4b"):
// 5 double and 20 single blocks of 24 heads x 128, Qwen3-4B's hidden states 9, 18, 27 stacked (3 x 2560).
const char* kKlein4bTransformer = R"({
  "_class_name": "Flux2Transformer2DModel",
  "attention_head_dim": 128,
  "axes_dims_rope": [32, 32, 32, 32],
  "eps": 1e-06,
  "guidance_embeds": false,
  "in_channels": 128,
  "joint_attention_dim": 7680,
  "mlp_ratio": 3.0,
  "num_attention_heads": 24,
  "num_layers": 5,
  "num_single_layers": 20,
  "out_channels": null,
  "patch_size": 1,
  "rope_theta": 2000,
  "timestep_guidance_channels": 256
})";

// The same script's "klein-9b": 8 double and 24 single blocks of 32 heads x 128, Qwen3-8B's (3 x 4096).
const char* kKlein9bTransformer = R"({
  "_class_name": "Flux2Transformer2DModel",
  "attention_head_dim": 128,
  "axes_dims_rope": [32, 32, 32, 32],
  "eps": 1e-06,
  "guidance_embeds": false,
  "in_channels": 128,
  "joint_attention_dim": 12288,
  "mlp_ratio": 3.0,
  "num_attention_heads": 32,
  "num_layers": 8,
  "num_single_layers": 24,
  "out_channels": null,
  "patch_size": 1,
  "rope_theta": 2000,
  "timestep_guidance_channels": 256
})";

// vae/config.json: AutoencoderKLFlux2's defaults (autoencoder_kl_flux2.py), which the conversion script builds the
// FLUX.2 VAE with (AutoencoderKLFlux2() then load_state_dict strict): 4 levels 128..512, 32 latent channels, 2x2
// patchified latents normalised by a BatchNorm over 128 channels.
const char* kFlux2Vae = R"({
  "_class_name": "AutoencoderKLFlux2",
  "act_fn": "silu",
  "batch_norm_eps": 0.0001,
  "batch_norm_momentum": 0.1,
  "block_out_channels": [128, 256, 512, 512],
  "decoder_block_out_channels": null,
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
  "force_upcast": true,
  "in_channels": 3,
  "latent_channels": 32,
  "layers_per_block": 2,
  "mid_block_add_attention": true,
  "norm_num_groups": 32,
  "out_channels": 3,
  "patch_size": [2, 2],
  "sample_size": 1024,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"],
  "use_post_quant_conv": true,
  "use_quant_conv": true
})";

// scheduler/scheduler_config.json: dynamic shifting (the pipeline passes mu = compute_empirical_mu).
const char* kKleinScheduler = R"({
  "_class_name": "FlowMatchEulerDiscreteScheduler",
  "base_image_seq_len": 256,
  "base_shift": 0.5,
  "invert_sigmas": false,
  "max_image_seq_len": 4096,
  "max_shift": 1.15,
  "num_train_timesteps": 1000,
  "shift": 3.0,
  "shift_terminal": null,
  "stochastic_sampling": false,
  "time_shift_type": "exponential",
  "use_beta_sigmas": false,
  "use_dynamic_shifting": true,
  "use_exponential_sigmas": false,
  "use_karras_sigmas": false
})";

}  // namespace

std::vector<PublishedEntry> qwen3_published_entries() {
    const std::vector<std::string> tok = {"tokenizer"};
    return {
        {"z-image-turbo",
         "z_image",
         "Tongyi-MAI/Z-Image-Turbo",
         kZImageModelIndex,
         {{"transformer", kZImageTurboTransformer},
          {"vae", flux1_vae_config()},
          {"text_encoder", qwen3_4b("Qwen3Model")},
          {"scheduler", kZImageTurboScheduler}},
         tok},
        {"flux2-klein-4b",
         "flux2",
         "black-forest-labs/FLUX.2-klein-4B",
         kKleinModelIndex,
         {{"transformer", kKlein4bTransformer},
          {"vae", kFlux2Vae},
          {"text_encoder", qwen3_4b("Qwen3ForCausalLM")},
          {"scheduler", kKleinScheduler}},
         tok},
        {"flux2-klein-9b",
         "flux2",
         "black-forest-labs/FLUX.2-klein-9B",
         kKleinModelIndex,
         {{"transformer", kKlein9bTransformer},
          {"vae", kFlux2Vae},
          {"text_encoder", kQwen3_8bCausalLm},
          {"scheduler", kKleinScheduler}},
         tok},
    };
}

}  // namespace kiln::layouts::detail
