#include "converter/arch.h"

#include <algorithm>
#include <tuple>

#include "converter/arch_detail.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::converter {

namespace {
using json = nlohmann::json;
using arch_detail::autoencoder_dc;
using arch_detail::autoencoder_kl;
using arch_detail::Config;
using arch_detail::Names;

void check_activation(const Config& c, const char* key, const std::string& def) {
    std::string a = c.string(key, def);
    static const char* ok[] = {"gelu", "gelu-approximate", "geglu", "geglu-approximate", "swiglu", "silu"};
    KILN_CHECK(std::find(std::begin(ok), std::end(ok), a) != std::end(ok), c.where, ": activation_fn '", a,
               "' is not supported");
}

// BasicTransformerBlock (attention.py) as DiT and PixArt build it.
void basic_transformer_block(const Names& n, const Config& c, const std::string& norm_type, bool cross_attention,
                             bool affine) {
    bool bias = c.boolean("attention_bias", false);
    if (norm_type == "ada_norm_zero") {  // AdaLayerNormZero(dim, num_embeds_ada_norm)
        n.timestep_embedding("norm1.emb.timestep_embedder");
        n.w("norm1.emb.class_embedder.embedding_table");
        n.lin("norm1.linear");
    } else {  // ada_norm_single: plain LayerNorm
        n.layer_norm("norm1", affine);
    }
    n.self_attention("attn1", bias);
    if (cross_attention) {
        n.layer_norm("norm2", affine);
        n.self_attention("attn2", bias);
    } else if (norm_type == "ada_norm_single") {
        n.layer_norm("norm2", affine);
    }
    if (norm_type == "ada_norm_zero") n.layer_norm("norm3", affine);
    n.feed_forward("ff");
    if (norm_type == "ada_norm_single") n.raw("scale_shift_table");
}

ArchSpec dit(const Config& c) {
    ArchSpec s{"transformer", {}, {}, {}};
    Names n{s.expected, ""};
    std::string norm_type = c.string("norm_type", "ada_norm_zero");
    KILN_CHECK(norm_type == "ada_norm_zero", c.where, ": DiT norm_type '", norm_type,
               "' is not supported (supported: ada_norm_zero)");
    KILN_CHECK(c.has("num_embeds_ada_norm"), c.where, ": DiT needs num_embeds_ada_norm (the number of classes)");
    check_activation(c, "activation_fn", "gelu-approximate");
    int64_t layers = c.positive("num_layers", 28);
    n.lin("pos_embed.proj");
    for (int64_t i = 0; i < layers; ++i)
        basic_transformer_block(n.sub("transformer_blocks." + std::to_string(i)), c, norm_type, false,
                                c.boolean("norm_elementwise_affine", false));
    n.lin("proj_out_1");
    n.lin("proj_out_2");
    s.blocks.push_back({"transformer_blocks", layers, std::vector<int>((size_t)layers, 0)});
    return s;
}

ArchSpec pixart(const Config& c) {
    ArchSpec s{"transformer", {}, {}, {}};
    Names n{s.expected, ""};
    std::string norm_type = c.string("norm_type", "ada_norm_single");
    KILN_CHECK(norm_type == "ada_norm_single", c.where, ": PixArt norm_type '", norm_type,
               "' is not supported (supported: ada_norm_single)");
    std::string att = c.string("attention_type", "default");
    KILN_CHECK(att == "default", c.where, ": PixArt attention_type '", att, "' is not supported (supported: default)");
    check_activation(c, "activation_fn", "gelu-approximate");
    int64_t layers = c.positive("num_layers", 28);
    bool extra = c.has("use_additional_conditions") ? c.boolean("use_additional_conditions", false)
                                                    : c.integer("sample_size", 128) == 128;
    bool cross = !c.j.contains("cross_attention_dim") || !c.j["cross_attention_dim"].is_null();  // default 1152
    n.lin("pos_embed.proj");
    for (int64_t i = 0; i < layers; ++i)
        basic_transformer_block(n.sub("transformer_blocks." + std::to_string(i)), c, norm_type, cross,
                                c.boolean("norm_elementwise_affine", false));
    n.raw("scale_shift_table");
    n.lin("proj_out");
    n.timestep_embedding("adaln_single.emb.timestep_embedder");
    if (extra) {
        n.timestep_embedding("adaln_single.emb.resolution_embedder");
        n.timestep_embedding("adaln_single.emb.aspect_ratio_embedder");
    }
    n.lin("adaln_single.linear");
    if (c.has("caption_channels")) {
        n.lin("caption_projection.linear_1");
        n.lin("caption_projection.linear_2");
    }
    s.blocks.push_back({"transformer_blocks", layers, std::vector<int>((size_t)layers, 0)});
    return s;
}

ArchSpec sd3(const Config& c) {
    ArchSpec s{"transformer", {}, {}, {}};
    Names n{s.expected, ""};
    int64_t layers = c.positive("num_layers", 18);
    std::string qk = c.string("qk_norm", "");
    auto dual = c.ints("dual_attention_layers");
    n.lin("pos_embed.proj");
    // PatchEmbed keeps pos_embed as a persistent buffer only when pos_embed_max_size is set (default 96).
    int64_t pos_max = !c.j.contains("pos_embed_max_size") ? 96 : c.integer("pos_embed_max_size", 0);
    if (pos_max > 0) n.raw("pos_embed.pos_embed");
    n.timestep_embedding("time_text_embed.timestep_embedder");
    n.timestep_embedding("time_text_embed.text_embedder");
    n.lin("context_embedder");
    BlockKind kind{"transformer_blocks", layers, {}};
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub("transformer_blocks." + std::to_string(i));
        bool pre_only = i == layers - 1;
        bool is_dual = std::find(dual.begin(), dual.end(), i) != dual.end();
        b.lin("norm1.linear");          // AdaLayerNormZero or SD35AdaLayerNormZeroX
        b.lin("norm1_context.linear");  // AdaLayerNormZero or AdaLayerNormContinuous (pre_only)
        b.self_attention("attn", true);
        b.lin("attn.add_q_proj");
        b.lin("attn.add_k_proj");
        b.lin("attn.add_v_proj");
        if (!pre_only) b.lin("attn.to_add_out");
        b.qk_norm("attn", qk, false, c.where);
        b.qk_norm("attn", qk, true, c.where);
        if (is_dual) {
            b.self_attention("attn2", true);
            b.qk_norm("attn2", qk, false, c.where);
        }
        b.feed_forward("ff");
        if (!pre_only) b.feed_forward("ff_context");
        kind.variant.push_back((pre_only ? 2 : 0) + (is_dual ? 1 : 0));
    }
    n.lin("norm_out.linear");
    n.lin("proj_out");
    s.blocks.push_back(std::move(kind));
    return s;
}

ArchSpec flux(const Config& c) {
    ArchSpec s{"transformer", {}, {}, {}};
    Names n{s.expected, ""};
    int64_t layers = c.positive("num_layers", 19), single = c.positive("num_single_layers", 38);
    n.lin("x_embedder");
    n.timestep_embedding("time_text_embed.timestep_embedder");
    if (c.boolean("guidance_embeds", false)) n.timestep_embedding("time_text_embed.guidance_embedder");
    n.timestep_embedding("time_text_embed.text_embedder");
    n.lin("context_embedder");
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub("transformer_blocks." + std::to_string(i));
        b.lin("norm1.linear");
        b.lin("norm1_context.linear");
        b.self_attention("attn", true);
        b.lin("attn.add_q_proj");
        b.lin("attn.add_k_proj");
        b.lin("attn.add_v_proj");
        b.lin("attn.to_add_out");
        b.qk_norm("attn", "rms_norm", false, c.where);
        b.qk_norm("attn", "rms_norm", true, c.where);
        b.feed_forward("ff");
        b.feed_forward("ff_context");
    }
    for (int64_t i = 0; i < single; ++i) {
        Names b = n.sub("single_transformer_blocks." + std::to_string(i));
        b.lin("norm.linear");
        b.lin("proj_mlp");
        b.lin("proj_out");
        b.lin("attn.to_q");
        b.lin("attn.to_k");
        b.lin("attn.to_v");
        b.qk_norm("attn", "rms_norm", false, c.where);
    }
    n.lin("norm_out.linear");
    n.lin("proj_out");
    s.blocks.push_back({"transformer_blocks", layers, std::vector<int>((size_t)layers, 0)});
    s.blocks.push_back({"single_transformer_blocks", single, std::vector<int>((size_t)single, 0)});
    return s;
}

// Flux2Transformer2DModel (transformer_flux2.py): every Linear without bias; modulations shared by the blocks.
ArchSpec flux2(const Config& c) {
    ArchSpec s{"transformer", {}, {}, {}};
    Names n{s.expected, ""};
    int64_t layers = c.positive("num_layers", 8), single = c.positive("num_single_layers", 48);
    n.lin("x_embedder", false);
    n.lin("context_embedder", false);
    n.lin("time_guidance_embed.timestep_embedder.linear_1", false);
    n.lin("time_guidance_embed.timestep_embedder.linear_2", false);
    if (c.boolean("guidance_embeds", true)) {
        n.lin("time_guidance_embed.guidance_embedder.linear_1", false);
        n.lin("time_guidance_embed.guidance_embedder.linear_2", false);
    }
    for (const char* m : {"double_stream_modulation_img", "double_stream_modulation_txt", "single_stream_modulation"})
        n.lin(std::string(m) + ".linear", false);
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub("transformer_blocks." + std::to_string(i));
        b.self_attention("attn", false, false);
        for (const char* p : {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out",
                              "ff.linear_in", "ff.linear_out", "ff_context.linear_in", "ff_context.linear_out"})
            b.lin(p, false);
        b.qk_norm("attn", "rms_norm", false, c.where);
        b.qk_norm("attn", "rms_norm", true, c.where);
    }
    for (int64_t i = 0; i < single; ++i) {
        Names b = n.sub("single_transformer_blocks." + std::to_string(i));
        b.lin("attn.to_qkv_mlp_proj", false);
        b.lin("attn.to_out", false);
        b.qk_norm("attn", "rms_norm", false, c.where);
    }
    n.lin("norm_out.linear", false);
    n.lin("proj_out", false);
    s.blocks.push_back({"transformer_blocks", layers, std::vector<int>((size_t)layers, 0)});
    s.blocks.push_back({"single_transformer_blocks", single, std::vector<int>((size_t)single, 0)});
    return s;
}

// SanaTransformer2DModel (sana_transformer.py): the linears and GLUMBConv's 1x1 convolutions (read as linears, stored
// [O, C]) are quantizable; the depthwise conv_depth and the patch embedding stay 4-D conv weights (f16/f32).
ArchSpec sana(const Config& c) {
    ArchSpec s{"transformer", {}, {}, {}};
    Names n{s.expected, "", &s.matrices_1x1};
    KILN_CHECK(!c.has("interpolation_scale"), c.where,
               ": Sana interpolation_scale (sin-cos positions of the 2K/4K models) is not supported (null only)");
    for (const char* k : {"num_cross_attention_heads", "cross_attention_head_dim", "cross_attention_dim"})
        KILN_CHECK(!c.j.contains(k) || c.has(k), c.where, ": Sana ", k, " null (no cross-attention) is not supported");
    std::string qk = c.string("qk_norm", "");
    KILN_CHECK(qk.empty() || qk == "rms_norm_across_heads", c.where, ": Sana qk_norm '", qk,
               "' is not supported (supported: null, rms_norm_across_heads)");
    const bool bias = c.boolean("attention_bias", false), affine = c.boolean("norm_elementwise_affine", false);
    int64_t layers = c.positive("num_layers", 20);
    n.lin("patch_embed.proj");
    if (c.boolean("guidance_embeds", false)) {  // SanaCombinedTimestepGuidanceEmbeddings
        n.timestep_embedding("time_embed.timestep_embedder");
        n.timestep_embedding("time_embed.guidance_embedder");
    } else {  // AdaLayerNormSingle
        n.timestep_embedding("time_embed.emb.timestep_embedder");
    }
    n.lin("time_embed.linear");
    n.lin("caption_projection.linear_1");
    n.lin("caption_projection.linear_2");
    n.w("caption_norm");
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub("transformer_blocks." + std::to_string(i));
        b.self_attention("attn1", bias);
        b.self_attention("attn2", true);
        for (const char* a : {"attn1", "attn2"})
            if (!qk.empty()) {  // RMSNorm over all heads: weight only
                b.w(std::string(a) + ".norm_q");
                b.w(std::string(a) + ".norm_k");
            }
        b.layer_norm("norm2", affine);  // norm1 never has parameters
        b.conv_1x1_linear("ff.conv_inverted", true);
        b.lin("ff.conv_depth");
        b.conv_1x1_linear("ff.conv_point", false);
        b.raw("scale_shift_table");
    }
    n.raw("scale_shift_table");
    n.lin("proj_out");
    s.blocks.push_back({"transformer_blocks", layers, std::vector<int>((size_t)layers, 0)});
    return s;
}

// ZImageTransformer2DModel (transformer_z_image.py): an x embedder and final layer per (patch, f_patch) pair, the
// modulated noise_refiner and main layers, the unmodulated context_refiner; no biases in the blocks but adaLN's.
ArchSpec z_image(const Config& c) {
    ArchSpec s{"transformer", {}, {}, {}};
    Names n{s.expected, ""};
    KILN_CHECK(!c.has("siglip_feat_dim"), c.where, ": Z-Image siglip_feat_dim (Omni) is not supported (null only)");
    auto ps = c.ints("all_patch_size"), fs = c.ints("all_f_patch_size");
    if (!c.has("all_patch_size")) ps = {2};
    if (!c.has("all_f_patch_size")) fs = {1};
    KILN_CHECK(ps.size() == fs.size(), c.where, ": all_patch_size and all_f_patch_size differ in length");
    for (size_t i = 0; i < ps.size(); ++i) {
        const std::string key = std::to_string(ps[i]) + "-" + std::to_string(fs[i]);
        n.lin("all_x_embedder." + key);
        n.lin("all_final_layer." + key + ".linear");
        n.lin("all_final_layer." + key + ".adaLN_modulation.1");
    }
    n.lin("t_embedder.mlp.0");
    n.lin("t_embedder.mlp.2");
    n.w("cap_embedder.0");  // RMSNorm
    n.lin("cap_embedder.1");
    n.raw("x_pad_token");
    n.raw("cap_pad_token");
    const bool qk = c.boolean("qk_norm", true);
    const int64_t refiners = c.positive("n_refiner_layers", 2), layers = c.positive("n_layers", 30);
    for (auto [kind, count, modulation] :
         {std::tuple{"noise_refiner", refiners, true}, std::tuple{"context_refiner", refiners, false},
          std::tuple{"layers", layers, true}}) {
        for (int64_t i = 0; i < count; ++i) {
            Names b = n.sub(std::string(kind) + "." + std::to_string(i));
            b.self_attention("attention", false, false);
            b.qk_norm("attention", qk ? "rms_norm" : "", false, c.where);
            for (const char* p : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"}) b.w(p);
            for (const char* p : {"w1", "w2", "w3"}) b.w(std::string("feed_forward.") + p);
            if (modulation) b.lin("adaLN_modulation.0");
        }
        s.blocks.push_back({kind, count, std::vector<int>((size_t)count, 0)});
    }
    return s;
}

// transformers' CLIP text model, with or without the text projection (modeling_clip.py).
ArchSpec clip_text(const Config& c, bool projection) {
    ArchSpec s{"text_encoder", {}, {}, {}};
    Names n{s.expected, ""};
    std::string act = c.string("hidden_act", "quick_gelu");
    KILN_CHECK(act == "quick_gelu" || act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh", c.where,
               ": CLIP hidden_act '", act,
               "' is not supported (supported: quick_gelu, gelu, gelu_new, gelu_pytorch_tanh)");
    int64_t layers = c.positive("num_hidden_layers", 12);
    n.w("text_model.embeddings.token_embedding");
    n.w("text_model.embeddings.position_embedding");
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub("text_model.encoder.layers." + std::to_string(i));
        b.lin("layer_norm1");
        b.lin("self_attn.q_proj");
        b.lin("self_attn.k_proj");
        b.lin("self_attn.v_proj");
        b.lin("self_attn.out_proj");
        b.lin("layer_norm2");
        b.lin("mlp.fc1");
        b.lin("mlp.fc2");
    }
    n.lin("text_model.final_layer_norm");
    if (projection) n.w("text_projection");  // Linear(hidden, projection_dim, bias=False)
    s.blocks.push_back({"text_model.encoder.layers", layers, std::vector<int>((size_t)layers, 0)});
    s.ignored = {"text_model.embeddings.position_ids"};  // a buffer older transformers saved
    s.weights_base = "model";
    return s;
}

// transformers' T5 encoder (modeling_t5.py): block 0 alone holds relative_attention_bias, so the
// blocks form two runs (variant 1 for block 0, 0 for the rest).
ArchSpec t5_encoder(const Config& c) {
    ArchSpec s{"text_encoder", {}, {}, {}};
    Names n{s.expected, ""};
    std::string ff = c.string("feed_forward_proj", "relu");
    const bool gated = ff.compare(0, 6, "gated-") == 0;
    std::string act = gated ? ff.substr(6) : ff;
    KILN_CHECK(!act.empty() && act.find('-') == std::string::npos, c.where, ": T5 feed_forward_proj '", ff,
               "' is not of the form 'ACT' or 'gated-ACT'");
    int64_t layers = c.positive("num_layers", 6);
    n.w("shared");
    BlockKind kind{"encoder.block", layers, {}};
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub("encoder.block." + std::to_string(i));
        b.w("layer.0.layer_norm");  // T5LayerNorm: RMS, weight only
        for (const char* p : {"q", "k", "v", "o"}) b.w(std::string("layer.0.SelfAttention.") + p);
        if (i == 0) b.w("layer.0.SelfAttention.relative_attention_bias");
        b.w("layer.1.layer_norm");
        if (gated) {
            b.w("layer.1.DenseReluDense.wi_0");
            b.w("layer.1.DenseReluDense.wi_1");
        } else {
            b.w("layer.1.DenseReluDense.wi");
        }
        b.w("layer.1.DenseReluDense.wo");
        kind.variant.push_back(i == 0 ? 1 : 0);
    }
    n.w("encoder.final_layer_norm");
    s.blocks.push_back(std::move(kind));
    s.aliases = {{"encoder.embed_tokens.weight", "shared.weight"}};  // tied to shared
    s.ignored = {"decoder.", "lm_head."};                            // the encoder-only model ignores them
    s.weights_base = "model";
    return s;
}

// transformers' Gemma2Model (modeling_gemma2.py): every decoder layer has the same tensors. embed_tokens is a
// vocabulary table (kept f16 by quant_storage, gathered on the host at run time).
ArchSpec gemma2(const Config& c) {
    ArchSpec s{"text_encoder", {}, {}, {}};
    Names n{s.expected, ""};
    int64_t layers = c.positive("num_hidden_layers", 26);
    n.w("embed_tokens");
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub("layers." + std::to_string(i));
        for (const char* p :
             {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"})
            b.w(p);  // Gemma2RMSNorm: applied as (1 + weight)
        for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) b.w(std::string("self_attn.") + p);
        for (const char* p : {"gate_proj", "up_proj", "down_proj"}) b.w(std::string("mlp.") + p);
    }
    n.w("norm");
    s.blocks.push_back({"layers", layers, std::vector<int>((size_t)layers, 0)});
    s.weights_base = "model";
    return s;
}

// transformers' Qwen3Model (modeling_qwen3.py): the decoder layers without Gemma-2's sandwich norms, plus per-head
// q_norm / k_norm. Qwen3ForCausalLM holds the same model under "model." and an LM head (tied to embed_tokens in the
// small models, then absent), which the text encoder does not use.
ArchSpec qwen3(const Config& c, const std::string& pre) {
    ArchSpec s{"text_encoder", {}, {}, {}};
    const bool causal_lm = !pre.empty();
    Names n{s.expected, ""};
    int64_t layers = c.positive("num_hidden_layers", 32);
    const bool bias = c.boolean("attention_bias", false);
    n.w(pre + "embed_tokens");
    for (int64_t i = 0; i < layers; ++i) {
        Names b = n.sub(pre + "layers." + std::to_string(i));
        for (const char* p : {"input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm"})
            b.w(p);
        for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) b.lin(std::string("self_attn.") + p, bias);
        for (const char* p : {"gate_proj", "up_proj", "down_proj"}) b.w(std::string("mlp.") + p);
    }
    n.w(pre + "norm");
    s.blocks.push_back({pre + "layers", layers, std::vector<int>((size_t)layers, 0)});
    if (causal_lm) s.ignored = {"lm_head."};
    s.weights_base = "model";
    return s;
}

}  // namespace

const std::vector<std::string>& supported_model_classes() {
    static const std::vector<std::string> v = [] {
        std::vector<std::string> out;
        for (const auto& c : models::component_classes())
            if (c.role != models::Role::tokenizer) out.push_back(c.name);
        return out;
    }();
    return v;
}

const std::vector<std::string>& supported_scheduler_classes() {
    static const std::vector<std::string> v = {"DDIMScheduler", "DPMSolverMultistepScheduler", "EulerDiscreteScheduler",
                                               "FlowMatchEulerDiscreteScheduler", "SCMScheduler"};
    return v;
}

bool is_supported_scheduler(const std::string& cls) {
    auto& v = supported_scheduler_classes();
    return std::find(v.begin(), v.end(), cls) != v.end();
}

ArchSpec arch_spec(const std::string& cls, const nlohmann::json& config, const std::string& where) {
    Config c{config, where};
    const models::ComponentClass* k = models::find_component_class(cls);
    switch (k ? k->kind : models::ComponentKind::clip_tokenizer) {
        case models::ComponentKind::dit:
            return dit(c);
        case models::ComponentKind::pixart:
            return pixart(c);
        case models::ComponentKind::sd3:
            return sd3(c);
        case models::ComponentKind::flux:
            return flux(c);
        case models::ComponentKind::flux2:
            return flux2(c);
        case models::ComponentKind::sana:
            return sana(c);
        case models::ComponentKind::z_image:
            return z_image(c);
        case models::ComponentKind::vae:
            return autoencoder_kl(c, false);
        case models::ComponentKind::vae_flux2:
            return autoencoder_kl(c, true);
        case models::ComponentKind::dc_ae:
            return autoencoder_dc(c);
        case models::ComponentKind::clip_text:
            return clip_text(c, false);
        case models::ComponentKind::clip_text_projection:
            return clip_text(c, true);
        case models::ComponentKind::t5_encoder:
            return t5_encoder(c);
        case models::ComponentKind::gemma2:
            return gemma2(c);
        case models::ComponentKind::qwen3:
            return qwen3(c, k->weights_prefix);
        case models::ComponentKind::clip_tokenizer:
        case models::ComponentKind::t5_tokenizer:
        case models::ComponentKind::gemma_tokenizer:
        case models::ComponentKind::qwen2_tokenizer:
            break;  // tokenizers have no weights; an unknown class lands here too
    }
    std::string list;
    for (auto& m : supported_model_classes()) list += (list.empty() ? "" : ", ") + m;
    for (auto& m : supported_scheduler_classes()) list += ", " + m;
    KILN_FAIL(where, ": unsupported _class_name '", cls, "' (supported: ", list, ")");
}

std::string canonical_name(const ArchSpec& spec, const std::string& name) {
    for (auto& [alias, canon] : spec.aliases)
        if (name == alias) return canon;
    for (auto& [from, to] : spec.renames) {
        // Only the attention layers of mid blocks use the old names, always as "<...>.<old>.<weight|bias>".
        for (const char* leaf : {"weight", "bias"}) {
            std::string suffix = from + leaf;
            if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                name.find(".attentions.") != std::string::npos)
                return name.substr(0, name.size() - suffix.size()) + to + leaf;
        }
    }
    return name;
}

}  // namespace kiln::converter
