#pragma once
// Z-Image and FLUX.2 [klein] pipeline folders for the option tests (CLI flags, C API fields): the fixtures' Qwen3
// text encoders and tokenizer (tests/data/fixtures/qwen3_encoder_pipelines, tok_qwen3_pipelines) beside the
// transformer, VAE and scheduler configs of the tiny diffusers pipelines they come from
// (../shared/fixtures/{z_image,flux2_klein}_pipeline), without their weights. Enough for every check made before a
// transformer is loaded (flags, kiln_generate's size query, plan_t2i, check_prompts); not to generate.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_support.h"

namespace kiln::test {

// Writes the folder at `dir` (created); klein: Flux2KleinPipeline (Qwen3ForCausalLM, 28 layers), else
// ZImagePipeline (Qwen3Model, 3 layers). Returns dir.
inline std::string write_qwen3_pipeline(const std::string& dir, bool klein) {
    namespace fs = std::filesystem;
    using json = nlohmann::json;
    const fs::path d(dir);
    fs::create_directories(d);
    auto write = [&](const std::string& rel, const json& j) {
        fs::create_directories((d / rel).parent_path());
        std::ofstream(d / rel) << j.dump(2);
    };
    const json scheduler = {{"_class_name", "FlowMatchEulerDiscreteScheduler"},
                            {"base_image_seq_len", 256},
                            {"base_shift", 0.5},
                            {"max_image_seq_len", 4096},
                            {"max_shift", 1.15},
                            {"num_train_timesteps", 1000},
                            {"shift", 3.0},
                            {"use_dynamic_shifting", klein}};
    write("scheduler/scheduler_config.json", scheduler);
    // The VAE: Z-Image's FLUX.1-style AutoencoderKL, klein's AutoencoderKLFlux2 (planning reads the class, the block
    // count and the latent channels).
    json vae = {{"_class_name", klein ? "AutoencoderKLFlux2" : "AutoencoderKL"},
                {"block_out_channels", {8, 16}},
                {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
                {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}},
                {"in_channels", 3},
                {"out_channels", 3},
                {"latent_channels", klein ? 4 : 16},
                {"layers_per_block", 1},
                {"norm_num_groups", 4},
                {"sample_size", 32}};
    if (!klein) vae["scaling_factor"] = 0.3611, vae["shift_factor"] = 0.1159;
    if (klein) vae["batch_norm_eps"] = 1e-4, vae["patch_size"] = {2, 2};
    write("vae/config.json", vae);
    const json transformer = klein ? json{{"_class_name", "Flux2Transformer2DModel"},
                                          {"attention_head_dim", 16},
                                          {"axes_dims_rope", {4, 4, 4, 4}},
                                          {"guidance_embeds", false},
                                          {"in_channels", 16},
                                          {"joint_attention_dim", 48},
                                          {"num_attention_heads", 2},
                                          {"num_layers", 1},
                                          {"num_single_layers", 2},
                                          {"patch_size", 1}}
                                   : json{{"_class_name", "ZImageTransformer2DModel"},
                                          {"all_f_patch_size", {1}},
                                          {"all_patch_size", {2}},
                                          {"axes_dims", {4, 6, 6}},
                                          {"axes_lens", {1024, 512, 512}},
                                          {"cap_feat_dim", 32},
                                          {"dim", 32},
                                          {"in_channels", 16},
                                          {"n_heads", 2},
                                          {"n_kv_heads", 2},
                                          {"n_layers", 2},
                                          {"n_refiner_layers", 1}};
    write("transformer/config.json", transformer);
    const std::string enc = data_path(std::string("fixtures/qwen3_encoder_pipelines/") +
                                      (klein ? "klein_text_encoder" : "z_image_text_encoder"));
    fs::copy(enc, d / "text_encoder", fs::copy_options::recursive);
    fs::copy(data_path("fixtures/tok_qwen3_pipelines/tokenizer"), d / "tokenizer", fs::copy_options::recursive);
    json mi = {{"_class_name", klein ? "Flux2KleinPipeline" : "ZImagePipeline"},
               {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
               {"text_encoder", {"transformers", klein ? "Qwen3ForCausalLM" : "Qwen3Model"}},
               {"tokenizer", {"transformers", "Qwen2Tokenizer"}},
               {"transformer", {"diffusers", klein ? "Flux2Transformer2DModel" : "ZImageTransformer2DModel"}},
               {"vae", {"diffusers", klein ? "AutoencoderKLFlux2" : "AutoencoderKL"}}};
    if (klein) mi["is_distilled"] = false;
    write("model_index.json", mi);
    return dir;
}

}  // namespace kiln::test
