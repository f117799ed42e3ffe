// The synthetic architectures of `kiln bench --synthetic` and `kiln_model_open("synthetic:NAME")`: real models'
// configs (random weights are made elsewhere, synthetic_store), one table.
#include <string>
#include <vector>

#include "models/core/forward.h"
#include "models/registry/registry.h"

namespace kiln::models {

namespace {
// An architecture of class `kind` from the fields of its config.json (_class_name added).
SyntheticArch synthetic(ComponentKind kind, nlohmann::json config, int latent = 32) {
    config["_class_name"] = class_name(kind);
    return SyntheticArch{class_name(kind), std::move(config), latent, kind};
}

SyntheticArch gemma2_2b_arch() {
    // google/gemma-2-2b-it as Sana's text_encoder/config.json (Gemma2Model).
    return synthetic(ComponentKind::gemma2, {{"vocab_size", 256000},
                                             {"hidden_size", 2304},
                                             {"intermediate_size", 9216},
                                             {"num_hidden_layers", 26},
                                             {"num_attention_heads", 8},
                                             {"num_key_value_heads", 4},
                                             {"head_dim", 256},
                                             {"query_pre_attn_scalar", 256},
                                             {"sliding_window", 4096},
                                             {"attn_logit_softcapping", 50.0},
                                             {"final_logit_softcapping", 30.0},
                                             {"rms_norm_eps", 1e-6},
                                             {"rope_theta", 10000.0},
                                             {"hidden_activation", "gelu_pytorch_tanh"}});
}

SyntheticArch qwen3_4b_arch() {
    // Qwen/Qwen3-4B's config.json, as Z-Image-Turbo's text_encoder (Qwen3Model) and FLUX.2 [klein] 4B's
    // (Qwen3ForCausalLM) carry it.
    return synthetic(ComponentKind::qwen3, {{"vocab_size", 151936},
                                            {"hidden_size", 2560},
                                            {"intermediate_size", 9728},
                                            {"num_hidden_layers", 36},
                                            {"num_attention_heads", 32},
                                            {"num_key_value_heads", 8},
                                            {"head_dim", 128},
                                            {"max_position_embeddings", 40960},
                                            {"rms_norm_eps", 1e-6},
                                            {"rope_theta", 1000000.0},
                                            {"hidden_act", "silu"},
                                            {"attention_bias", false},
                                            {"tie_word_embeddings", true}});
}

// Tongyi-MAI/Z-Image-Turbo transformer/config.json; latent 128 (1024 px) -> 4096 image tokens.
SyntheticArch z_image_turbo_1024_arch() {
    return synthetic(ComponentKind::z_image,
                     {{"all_patch_size", {2}},
                      {"all_f_patch_size", {1}},
                      {"in_channels", 16},
                      {"dim", 3840},
                      {"n_layers", 30},
                      {"n_refiner_layers", 2},
                      {"n_heads", 30},
                      {"n_kv_heads", 30},
                      {"norm_eps", 1e-5},
                      {"qk_norm", true},
                      {"cap_feat_dim", 2560},
                      {"rope_theta", 256.0},
                      {"t_scale", 1000.0},
                      {"axes_dims", {32, 48, 48}},
                      {"axes_lens", {1536, 512, 512}}},
                     128);
}

// black-forest-labs/FLUX.2-klein-4B transformer/config.json (not in the corpus Kiln was built from; the values as
// InvokeAI's Flux2VariantType.Klein4B preset and other ports quote it): 24 heads x 128, 5 double + 20 single
// blocks, Qwen3-4B hidden states 9, 18, 27 concatenated (3 x 2560), no guidance embedding; latent 128 (1024 px,
// 32 channels) -> 4096 patchified tokens of 128 channels.
SyntheticArch flux2_klein_4b_1024_arch() {
    return synthetic(ComponentKind::flux2,
                     {{"num_attention_heads", 24},
                      {"attention_head_dim", 128},
                      {"num_layers", 5},
                      {"num_single_layers", 20},
                      {"in_channels", 128},
                      {"out_channels", nullptr},
                      {"patch_size", 1},
                      {"joint_attention_dim", 7680},
                      {"timestep_guidance_channels", 256},
                      {"mlp_ratio", 3.0},
                      {"axes_dims_rope", {32, 32, 32, 32}},
                      {"rope_theta", 2000},
                      {"eps", 1e-6},
                      {"guidance_embeds", false}},
                     128);
}

SyntheticArch dc_ae_sana_arch() {
    // mit-han-lab/dc-ae-f32c32-sana-1.1-diffusers (as diffusers' convert_dcae_to_diffusers.py writes
    // dc-ae-f32c32-sana-1.0; 1.1 has the same architecture): decoding 32 x 32 latents = 1024 px.
    const std::vector<std::string> dc_ae_types = {"ResBlock",          "ResBlock",          "ResBlock",
                                                  "EfficientViTBlock", "EfficientViTBlock", "EfficientViTBlock"};
    using J = nlohmann::json;
    const J scales = J::array({J::array(), J::array(), J::array(), J::array({5}), J::array({5}), J::array({5})});
    return synthetic(ComponentKind::dc_ae,
                     {{"in_channels", 3},
                      {"latent_channels", 32},
                      {"attention_head_dim", 32},
                      {"encoder_block_types", dc_ae_types},
                      {"decoder_block_types", dc_ae_types},
                      {"encoder_block_out_channels", {128, 256, 512, 512, 1024, 1024}},
                      {"decoder_block_out_channels", {128, 256, 512, 512, 1024, 1024}},
                      {"encoder_layers_per_block", {2, 2, 2, 3, 3, 3}},
                      {"decoder_layers_per_block", {3, 3, 3, 3, 3, 3}},
                      {"encoder_qkv_multiscales", scales},
                      {"decoder_qkv_multiscales", scales},
                      {"downsample_block_type", "conv"},
                      {"upsample_block_type", "interpolate"},
                      {"decoder_norm_types", "rms_norm"},
                      {"decoder_act_fns", "silu"},
                      {"scaling_factor", 0.41407}},
                     32);
}
}  // namespace

const std::map<std::string, SyntheticArch>& synthetic_archs() {
    auto dit = [](int heads, int hd, int layers, int sample) {
        return synthetic(ComponentKind::dit,
                         {{"num_attention_heads", heads},
                          {"attention_head_dim", hd},
                          {"num_layers", layers},
                          {"in_channels", 4},
                          {"out_channels", 8},
                          {"patch_size", 2},
                          {"sample_size", sample},
                          {"num_embeds_ada_norm", 1000}},
                         sample);
    };
    // PixArt-alpha/PixArt-Sigma-XL-2-1024-MS transformer/config.json (no micro-conditions, interpolation 2).
    const SyntheticArch pixart_sigma_1024 = synthetic(ComponentKind::pixart,
                                                      {{"num_attention_heads", 16},
                                                       {"attention_head_dim", 72},
                                                       {"num_layers", 28},
                                                       {"in_channels", 4},
                                                       {"out_channels", 8},
                                                       {"patch_size", 2},
                                                       {"sample_size", 128},
                                                       {"caption_channels", 4096},
                                                       {"cross_attention_dim", 1152},
                                                       {"attention_bias", true},
                                                       {"activation_fn", "gelu-approximate"},
                                                       {"norm_type", "ada_norm_single"},
                                                       {"norm_eps", 1e-6},
                                                       {"norm_elementwise_affine", false},
                                                       {"num_embeds_ada_norm", 1000},
                                                       {"interpolation_scale", 2},
                                                       {"use_additional_conditions", false}},
                                                      128);
    // stabilityai/stable-diffusion-3-medium-diffusers transformer/config.json.
    const SyntheticArch sd3_medium_1024 = synthetic(ComponentKind::sd3,
                                                    {{"num_attention_heads", 24},
                                                     {"attention_head_dim", 64},
                                                     {"num_layers", 24},
                                                     {"in_channels", 16},
                                                     {"out_channels", 16},
                                                     {"patch_size", 2},
                                                     {"sample_size", 128},
                                                     {"joint_attention_dim", 4096},
                                                     {"caption_projection_dim", 1536},
                                                     {"pooled_projection_dim", 2048},
                                                     {"pos_embed_max_size", 192}},
                                                    128);
    // black-forest-labs/FLUX.1-dev transformer/config.json; latent 128 (1024 px) -> 4096 packed image tokens.
    const SyntheticArch flux_dev_1024 = synthetic(ComponentKind::flux,
                                                  {{"num_attention_heads", 24},
                                                   {"attention_head_dim", 128},
                                                   {"num_layers", 19},
                                                   {"num_single_layers", 38},
                                                   {"in_channels", 64},
                                                   {"out_channels", nullptr},
                                                   {"patch_size", 1},
                                                   {"joint_attention_dim", 4096},
                                                   {"pooled_projection_dim", 768},
                                                   {"guidance_embeds", true},
                                                   {"axes_dims_rope", {16, 56, 56}}},
                                                  128);
    // Efficient-Large-Model/Sana_600M_1024px_diffusers, Sana_1600M_1024px_diffusers and
    // SANA_Sprint_0.6B_1024px_diffusers transformer configs, as diffusers' scripts/convert_sana_to_diffusers.py writes
    // them (SanaMS_600M_P1_D28, SanaMS_1600M_P1_D20, SanaSprint_600M_P1_D28 at 1024 px): latent 32 (DC-AE f32) -> 1024
    // tokens.
    auto sana = [](int heads, int layers, int cross_heads, int cross_hd, bool sprint) {
        nlohmann::json j = {{"in_channels", 32},
                            {"out_channels", 32},
                            {"num_attention_heads", heads},
                            {"attention_head_dim", 32},
                            {"num_layers", layers},
                            {"num_cross_attention_heads", cross_heads},
                            {"cross_attention_head_dim", cross_hd},
                            {"cross_attention_dim", heads * 32},
                            {"caption_channels", 2304},
                            {"mlp_ratio", 2.5},
                            {"attention_bias", false},
                            {"sample_size", 32},
                            {"patch_size", 1},
                            {"norm_elementwise_affine", false},
                            {"norm_eps", 1e-6},
                            {"interpolation_scale", nullptr}};
        if (sprint) j["qk_norm"] = "rms_norm_across_heads", j["guidance_embeds"] = true;
        return synthetic(ComponentKind::sana, j, 32);
    };
    // Text encoders: openai/clip-vit-large-patch14's text model (SD3 text_encoder, Flux's CLIP), the OpenCLIP
    // bigG text model as SD3's text_encoder_2, and google/t5-v1_1-xxl's encoder (SD3 / Flux T5).
    auto clip = [](int hidden, int ff, int heads, int layers, const char* act) {
        return synthetic(ComponentKind::clip_text_projection, {{"vocab_size", 49408},
                                                               {"hidden_size", hidden},
                                                               {"intermediate_size", ff},
                                                               {"num_attention_heads", heads},
                                                               {"num_hidden_layers", layers},
                                                               {"max_position_embeddings", 77},
                                                               {"hidden_act", act},
                                                               {"layer_norm_eps", 1e-5},
                                                               {"projection_dim", hidden},
                                                               {"eos_token_id", 2}});
    };
    const SyntheticArch t5_xxl = synthetic(ComponentKind::t5_encoder, {{"vocab_size", 32128},
                                                                       {"d_model", 4096},
                                                                       {"d_kv", 64},
                                                                       {"d_ff", 10240},
                                                                       {"num_heads", 64},
                                                                       {"num_layers", 24},
                                                                       {"relative_attention_num_buckets", 32},
                                                                       {"relative_attention_max_distance", 128},
                                                                       {"layer_norm_epsilon", 1e-6},
                                                                       {"feed_forward_proj", "gated-gelu"}});
    static const std::map<std::string, SyntheticArch> archs = {
        {"dit-xl-2-256", dit(16, 72, 28, 32)},
        {"dit-xl-2-512", dit(16, 72, 28, 64)},
        {"dit-tiny", dit(2, 32, 28, 8)},  // 28 blocks of width 64: the JIT's acceptance case
        {"pixart-sigma-1024", pixart_sigma_1024},
        {"sd3-medium-1024", sd3_medium_1024},
        {"flux-dev-1024", flux_dev_1024},
        {"z-image-turbo-1024", z_image_turbo_1024_arch()},
        {"flux2-klein-4b-1024", flux2_klein_4b_1024_arch()},
        {"sana-600m-1024", sana(36, 28, 16, 72, false)},
        {"sana-1600m-1024", sana(70, 20, 20, 112, false)},
        {"sana-sprint-0.6b-1024", sana(36, 28, 16, 72, true)},
        {"clip-l", clip(768, 3072, 12, 12, "quick_gelu")},
        {"clip-g", clip(1280, 5120, 20, 32, "gelu")},
        {"t5-xxl", t5_xxl},
        {"gemma2-2b", gemma2_2b_arch()},
        {"qwen3-4b", qwen3_4b_arch()},
        {"dc-ae-f32c32-sana-1.1", dc_ae_sana_arch()},
    };
    return archs;
}

}  // namespace kiln::models
