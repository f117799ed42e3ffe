// The configs the published models' diffusers repositories hold, as JSON text laid out as in those files (the
// files diffusers' from_single_file fetches for a single file of each model). Where a file is a copy of the
// published one this says so; where no copy was found it was written from the model's known architecture, and the
// entry says that too. Provenance-only fields (_name_or_path, torch_dtype, transformers_version) do not change what
// Kiln builds; every field Kiln reads is the published value.
// FLUX.1's files are here, SD3 / SD3.5's in published_configs_sd3.cpp, the Qwen3-encoded models' in
// published_configs_qwen3.cpp; this file turns each entry into a Published.
#include <nlohmann/json.hpp>

#include "models/layouts/published.h"
#include "models/layouts/published_entries.h"
#include "runtime/core/error.h"

namespace kiln::layouts {

namespace {

// ---- FLUX.1 (black-forest-labs/FLUX.1-dev, FLUX.1-schnell) ----

// model_index.json: the same file in both repositories.
const char* kFluxModelIndex = R"({
  "_class_name": "FluxPipeline",
  "_diffusers_version": "0.30.0.dev0",
  "scheduler": [
    "diffusers",
    "FlowMatchEulerDiscreteScheduler"
  ],
  "text_encoder": [
    "transformers",
    "CLIPTextModel"
  ],
  "text_encoder_2": [
    "transformers",
    "T5EncoderModel"
  ],
  "tokenizer": [
    "transformers",
    "CLIPTokenizer"
  ],
  "tokenizer_2": [
    "transformers",
    "T5TokenizerFast"
  ],
  "transformer": [
    "diffusers",
    "FluxTransformer2DModel"
  ],
  "vae": [
    "diffusers",
    "AutoencoderKL"
  ]
})";

// FLUX.1-dev transformer/config.json. The published file has no axes_dims_rope: diffusers' default [16, 56, 56].
const char* kFluxDevTransformer = R"({
  "_class_name": "FluxTransformer2DModel",
  "_diffusers_version": "0.30.0.dev0",
  "_name_or_path": "../checkpoints/flux-dev/transformer",
  "attention_head_dim": 128,
  "guidance_embeds": true,
  "in_channels": 64,
  "joint_attention_dim": 4096,
  "num_attention_heads": 24,
  "num_layers": 19,
  "num_single_layers": 38,
  "patch_size": 1,
  "pooled_projection_dim": 768
})";

// FLUX.1-schnell transformer/config.json: dev's without the guidance embedder. Its _name_or_path was not found
// verbatim and is left out.
const char* kFluxSchnellTransformer = R"({
  "_class_name": "FluxTransformer2DModel",
  "_diffusers_version": "0.30.0.dev0",
  "attention_head_dim": 128,
  "guidance_embeds": false,
  "in_channels": 64,
  "joint_attention_dim": 4096,
  "num_attention_heads": 24,
  "num_layers": 19,
  "num_single_layers": 38,
  "patch_size": 1,
  "pooled_projection_dim": 768
})";

// vae/config.json (BFL's ae.safetensors): the same in both repositories (and in Z-Image-Turbo's, which uses it).
const char* kFluxVae = R"({
  "_class_name": "AutoencoderKL",
  "_diffusers_version": "0.30.0.dev0",
  "_name_or_path": "../checkpoints/flux-dev",
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
  "mid_block_add_attention": true,
  "norm_num_groups": 32,
  "out_channels": 3,
  "sample_size": 1024,
  "scaling_factor": 0.3611,
  "shift_factor": 0.1159,
  "up_block_types": [
    "UpDecoderBlock2D",
    "UpDecoderBlock2D",
    "UpDecoderBlock2D",
    "UpDecoderBlock2D"
  ],
  "use_post_quant_conv": false,
  "use_quant_conv": false
})";

// text_encoder/config.json: OpenAI's CLIP ViT-L/14 text tower.
const char* kFluxClipL = R"({
  "_name_or_path": "openai/clip-vit-large-patch14",
  "architectures": [
    "CLIPTextModel"
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
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.3",
  "vocab_size": 49408
})";

// text_encoder_2/config.json: the encoder of Google's T5 v1.1 XXL.
const char* kFluxT5 = R"({
  "_name_or_path": "google/t5-v1_1-xxl",
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
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.3",
  "use_cache": true,
  "vocab_size": 32128
})";

// scheduler/scheduler_config.json. dev shifts by the resolution (mu from the image's token count); schnell, a
// timestep-distilled model, keeps the plain schedule (shift 1).
const char* kFluxDevScheduler = R"({
  "_class_name": "FlowMatchEulerDiscreteScheduler",
  "_diffusers_version": "0.30.0.dev0",
  "base_image_seq_len": 256,
  "base_shift": 0.5,
  "max_image_seq_len": 4096,
  "max_shift": 1.15,
  "num_train_timesteps": 1000,
  "shift": 3.0,
  "use_dynamic_shifting": true
})";

const char* kFluxSchnellScheduler = R"({
  "_class_name": "FlowMatchEulerDiscreteScheduler",
  "_diffusers_version": "0.30.0.dev0",
  "base_image_seq_len": 256,
  "base_shift": 0.5,
  "max_image_seq_len": 4096,
  "max_shift": 1.15,
  "num_train_timesteps": 1000,
  "shift": 1.0,
  "use_dynamic_shifting": false
})";

nlohmann::json parse(const std::string& text, const std::string& what) {
    try {
        return nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        KILN_FAIL("internal: the published ", what, " is not JSON: ", e.what());
    }
}

using Entry = detail::PublishedEntry;

Published make(const Entry& e) {
    Published p;
    p.id = e.id;
    p.family = e.family;
    p.repo = e.repo;
    p.model_index = parse(e.model_index, e.repo + std::string("/model_index.json"));
    for (const auto& [component, text] : e.configs) {
        nlohmann::json j = parse(text, e.repo + std::string("/") + component + " config");
        // transformers' configs name their class in "architectures" (as ModelSource does for a folder).
        if (!j.contains("_class_name") && j.contains("architectures") && j["architectures"].is_array() &&
            !j["architectures"].empty())
            j["_class_name"] = j["architectures"][0];
        KILN_CHECK(j.contains("_class_name"), "internal: ", e.repo, "/", component, " config has no class");
        p.configs[component] = std::move(j);
    }
    p.tokenizers = e.tokenizers;
    return p;
}

}  // namespace

const char* detail::flux1_vae_config() { return kFluxVae; }

const std::vector<Published>& published_models() {
    static const std::vector<Published> models = [] {
        const std::vector<std::string> flux_tok = {"tokenizer", "tokenizer_2"};
        const std::vector<Entry> entries = {
            {"flux-dev",
             "flux",
             "black-forest-labs/FLUX.1-dev",
             kFluxModelIndex,
             {{"transformer", kFluxDevTransformer},
              {"vae", kFluxVae},
              {"text_encoder", kFluxClipL},
              {"text_encoder_2", kFluxT5},
              {"scheduler", kFluxDevScheduler}},
             flux_tok},
            {"flux-schnell",
             "flux",
             "black-forest-labs/FLUX.1-schnell",
             kFluxModelIndex,
             {{"transformer", kFluxSchnellTransformer},
              {"vae", kFluxVae},
              {"text_encoder", kFluxClipL},
              {"text_encoder_2", kFluxT5},
              {"scheduler", kFluxSchnellScheduler}},
             flux_tok},
        };
        std::vector<Published> v;
        for (const Entry& e : entries) v.push_back(make(e));
        for (const Entry& e : detail::sd3_published_entries()) v.push_back(make(e));
        for (const Entry& e : detail::qwen3_published_entries()) v.push_back(make(e));
        return v;
    }();
    return models;
}

}  // namespace kiln::layouts
