#include "models/core/forward.h"

#include <algorithm>
#include <cstring>

#include "models/registry/registry.h"
#include "models/text/encoders/clip_text.h"
#include "models/text/encoders/gemma2.h"
#include "models/text/encoders/qwen3.h"
#include "models/text/encoders/t5_encoder.h"
#include "models/transformers/dit.h"
#include "models/transformers/flux.h"
#include "models/transformers/flux2.h"
#include "models/transformers/pixart.h"
#include "models/transformers/sana.h"
#include "models/transformers/sd3.h"
#include "models/transformers/z_image.h"
#include "models/vae/dc_ae.h"
#include "models/vae/vae.h"
#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"

namespace kiln::models {

namespace {
const Tensor& need(const std::map<std::string, Tensor>& in, const std::string& name, const std::string& cls) {
    auto it = in.find(name);
    KILN_CHECK(it != in.end(), cls, ": missing input '", name, "'");
    return it->second;
}

// Timesteps may come as a scalar or [B], integer or float: the models take f32 [B].
Tensor batch_vector(const Tensor& t, int64_t B, DType dt, const std::string& name) {
    KILN_CHECK(t.numel() == 1 || t.numel() == B, "input '", name, "' has ", t.numel(), " values for batch ", B);
    Tensor v = t.astype(dt);
    if (t.numel() == B) {
        v.shape = {B};
        return v;
    }
    Tensor out(dt, {B});
    for (int64_t i = 0; i < B; ++i) std::memcpy(out.bytes.data() + i * dtype_size(dt), v.bytes.data(), dtype_size(dt));
    return out;
}
}  // namespace

namespace {
using Inputs = std::map<std::string, Tensor>;

// The latents a DiT, PixArt or SD3 transformer takes: hidden_states [B, C, H, W] with the config's C.
const Tensor& need_latents(const Inputs& inputs, const std::string& cls, int in_channels) {
    const Tensor& x = need(inputs, "hidden_states", cls);
    KILN_CHECK(x.shape.size() == 4, cls, ": hidden_states must be [B, C, H, W], got ", shape_str(x.shape));
    KILN_CHECK(x.shape[1] == in_channels, cls, ": hidden_states has ", x.shape[1], " channels, config says ",
               in_channels);
    return x;
}

// encoder_attention_mask: a 0/1 mask [B, L] becomes the bias (1 - mask) * -10000 [B, 1, L], as diffusers' PixArt
// and Sana transformers make it; a [B, 1, L] bias is taken as is.
Tensor text_mask_bias(const Tensor& m, int64_t B, int64_t L, const std::string& cls) {
    Tensor mk = m.astype(DType::f32);
    KILN_CHECK(mk.numel() == B * L && (mk.shape.size() == 2 || mk.shape.size() == 3), cls,
               ": encoder_attention_mask must be [B, L] or [B, 1, L], got ", shape_str(mk.shape));
    if (mk.shape.size() == 2)
        for (int64_t i = 0; i < mk.numel(); ++i) mk.data<float>()[i] = (1.f - mk.data<float>()[i]) * -10000.f;
    mk.shape = {B, 1, L};
    return mk;
}

Inputs dit_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    auto c = DiTConfig::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const int64_t B = x.shape[0];
    build_dit(b, c, (int)B, (int)x.shape[2], (int)x.shape[3]);
    in["hidden_states"] = x.astype(DType::f32);
    in["timestep"] = batch_vector(need(inputs, "timestep", cls), B, DType::f32, "timestep");
    in["class_labels"] = batch_vector(need(inputs, "class_labels", cls), B, DType::i32, "class_labels");
    return in;
}

Inputs pixart_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    auto c = PixArtConfig::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const Tensor& ctx = need(inputs, "encoder_hidden_states", cls);
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == x.shape[0], cls,
               ": encoder_hidden_states must be [B, L, C], got ", shape_str(ctx.shape));
    const int64_t B = x.shape[0], L = ctx.shape[1];
    auto m = inputs.find("encoder_attention_mask");
    bool mask = m != inputs.end() && c.cross_attention_dim;
    if (mask) in["encoder_attention_mask"] = text_mask_bias(m->second, B, L, cls);
    build_pixart(b, c, (int)B, (int)x.shape[2], (int)x.shape[3], (int)L, mask);
    in["hidden_states"] = x.astype(DType::f32);
    if (c.cross_attention_dim) in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["timestep"] = batch_vector(need(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (c.use_additional_conditions) {
        Tensor r = need(inputs, "resolution", cls).astype(DType::f32),
               a = need(inputs, "aspect_ratio", cls).astype(DType::f32);
        KILN_CHECK(r.numel() == 2 * B && a.numel() == B, cls, ": resolution must be [B, 2] and aspect_ratio [B, 1]");
        r.shape = {B, 2};
        a.shape = {B, 1};
        in["resolution"] = r;
        in["aspect_ratio"] = a;
    }
    return in;
}

// hidden_states [B, C, H, W], encoder_hidden_states [B, L, caption_channels], timestep, optional
// encoder_attention_mask, and guidance exactly when the config has guidance_embeds (Sana-Sprint).
Inputs sana_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    auto c = SanaConfig::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const Tensor& ctx = need(inputs, "encoder_hidden_states", cls);
    const int64_t B = x.shape[0], L = ctx.shape.size() == 3 ? ctx.shape[1] : 0;
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == B && ctx.shape[2] == c.caption_channels, cls,
               ": encoder_hidden_states must be [", B, ", L, ", c.caption_channels, "], got ", shape_str(ctx.shape));
    auto m = inputs.find("encoder_attention_mask");
    if (m != inputs.end()) in["encoder_attention_mask"] = text_mask_bias(m->second, B, L, cls);
    KILN_CHECK(!c.guidance_embeds || inputs.count("guidance"), cls,
               ": missing input 'guidance' (the config has guidance_embeds)");
    KILN_CHECK(c.guidance_embeds || !inputs.count("guidance"), cls,
               ": input 'guidance' given but the config has no guidance_embeds");
    build_sana(b, c, (int)B, (int)x.shape[2], (int)x.shape[3], (int)L, m != inputs.end());
    in["hidden_states"] = x.astype(DType::f32);
    in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["timestep"] = batch_vector(need(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (c.guidance_embeds) in["guidance"] = batch_vector(inputs.at("guidance"), B, DType::f32, "guidance");
    return in;
}

Inputs sd3_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs,
                  const ComponentOptions& co) {
    Inputs in;
    auto c = SD3Config::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const Tensor& ctx = need(inputs, "encoder_hidden_states", cls);
    const Tensor& pooled = need(inputs, "pooled_projections", cls);
    const int64_t B = x.shape[0];
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == B, cls, ": encoder_hidden_states must be [B, L, C], got ",
               shape_str(ctx.shape));
    KILN_CHECK(pooled.numel() == B * c.pooled_projection_dim, cls, ": pooled_projections must be [B, ",
               c.pooled_projection_dim, "], got ", shape_str(pooled.shape));
    build_sd3(b, c, (int)B, (int)x.shape[2], (int)x.shape[3], (int)ctx.shape[1], co.skip_layers);
    in["hidden_states"] = x.astype(DType::f32);
    in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["pooled_projections"] = pooled.astype(DType::f32);
    in["pooled_projections"].shape = {B, c.pooled_projection_dim};
    in["timestep"] = batch_vector(need(inputs, "timestep", cls), B, DType::f32, "timestep");
    return in;
}

Inputs flux_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    const Tensor& x = need(inputs, "hidden_states", cls);
    const Tensor& ctx = need(inputs, "encoder_hidden_states", cls);
    const Tensor& pooled = need(inputs, "pooled_projections", cls);
    auto c = FluxConfig::from_json(config);
    KILN_CHECK(x.shape.size() == 3 && x.shape[2] == c.in_channels, cls, ": hidden_states must be [B, S, ",
               c.in_channels, "] (packed latents), got ", shape_str(x.shape));
    const int64_t B = x.shape[0], S_img = x.shape[1];
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == B && ctx.shape[2] == c.joint_attention_dim, cls,
               ": encoder_hidden_states must be [B, L, ", c.joint_attention_dim, "], got ", shape_str(ctx.shape));
    KILN_CHECK(pooled.numel() == B * c.pooled_projection_dim, cls, ": pooled_projections must be [B, ",
               c.pooled_projection_dim, "], got ", shape_str(pooled.shape));
    // FluxPosEmbed on the host from the ids (f64 angles, as diffusers): the cos/sin tables are graph inputs.
    auto [cos, sin] = flux_rope_tables(c, need(inputs, "txt_ids", cls), need(inputs, "img_ids", cls));
    KILN_CHECK(cos.shape[0] == ctx.shape[1] + S_img, cls, ": txt_ids/img_ids have ", cos.shape[0], " rows for ",
               ctx.shape[1], " text and ", S_img, " image tokens");
    build_flux(b, c, (int)B, (int)S_img, (int)ctx.shape[1]);
    in["hidden_states"] = x.astype(DType::f32);
    in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["pooled_projections"] = pooled.astype(DType::f32);
    in["pooled_projections"].shape = {B, c.pooled_projection_dim};
    in["timestep"] = batch_vector(need(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (c.guidance_embeds) in["guidance"] = batch_vector(need(inputs, "guidance", cls), B, DType::f32, "guidance");
    in["rope_cos"] = cos;
    in["rope_sin"] = sin;
    return in;
}

// Lists, as diffusers' ZImageTransformer2DModel takes them: x_0 .. x_{B-1} [C, 1, H_i, W_i], cap_feats_0 ..
// [L_i, cap_feat_dim] (each item's unpadded caption), t [B]; outputs sample_0 .. (build_z_image).
Inputs z_image_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    auto c = ZImageConfig::from_json(config);
    std::vector<ZImageItem> items;
    for (size_t i = 0; inputs.count("x_" + std::to_string(i)); ++i) {
        const std::string xn = "x_" + std::to_string(i), cn = "cap_feats_" + std::to_string(i);
        const Tensor &x = inputs.at(xn), &cap = need(inputs, cn, cls);
        KILN_CHECK(x.shape.size() == 4 && x.shape[0] == c.in_channels && x.shape[1] == 1, cls, ": ", xn, " must be [",
                   c.in_channels, ", 1, H, W], got ", shape_str(x.shape));
        KILN_CHECK(cap.shape.size() == 2 && cap.shape[1] == c.cap_feat_dim, cls, ": ", cn, " must be [L, ",
                   c.cap_feat_dim, "], got ", shape_str(cap.shape));
        items.push_back({(int)x.shape[2], (int)x.shape[3], (int)cap.shape[0]});
        in[xn] = x.astype(DType::f32);
        in[cn] = cap.astype(DType::f32);
    }
    KILN_CHECK(!items.empty(), cls, ": missing input 'x_0' (the latents are a list: x_0, x_1, ...)");
    KILN_CHECK(!inputs.count("cap_feats_" + std::to_string(items.size())), cls, ": more cap_feats_i than x_i (",
               items.size(), ")");
    const ZImageLayout lay = ZImageLayout::of(c, items);
    build_z_image(b, c, lay);
    for (auto& [name, t] : prepare_z_image(c, lay)) in[name] = t;
    in["t"] = batch_vector(need(inputs, "t", cls), (int64_t)items.size(), DType::f32, "t");
    return in;
}

// hidden_states [B, S_img, in_channels] (packed latents), encoder_hidden_states [B, S_txt, joint_attention_dim],
// timestep (t/1000), img_ids / txt_ids [S, 4] or [B, S, 4] (first row), and guidance: used when given and the config
// has guidance_embeds (diffusers' `guidance is not None and guidance_embedder is not None`), refused without it.
Inputs flux2_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    const Tensor& x = need(inputs, "hidden_states", cls);
    const Tensor& ctx = need(inputs, "encoder_hidden_states", cls);
    auto c = Flux2Config::from_json(config);
    KILN_CHECK(x.shape.size() == 3 && x.shape[2] == c.in_channels, cls, ": hidden_states must be [B, S, ",
               c.in_channels, "] (packed latents), got ", shape_str(x.shape));
    const int64_t B = x.shape[0], S_img = x.shape[1];
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == B && ctx.shape[2] == c.joint_attention_dim, cls,
               ": encoder_hidden_states must be [B, L, ", c.joint_attention_dim, "], got ", shape_str(ctx.shape));
    const bool guidance = inputs.count("guidance") > 0;
    KILN_CHECK(!guidance || c.guidance_embeds, cls, ": input 'guidance' given but the config has no guidance_embeds");
    // Flux2PosEmbed on the host from the ids (f64 angles, as diffusers): the cos/sin tables are graph inputs.
    auto [cos, sin] = flux2_rope_tables(c, need(inputs, "txt_ids", cls), need(inputs, "img_ids", cls));
    KILN_CHECK(cos.shape[0] == ctx.shape[1] + S_img, cls, ": txt_ids/img_ids have ", cos.shape[0], " rows for ",
               ctx.shape[1], " text and ", S_img, " image tokens");
    build_flux2(b, c, (int)B, (int)S_img, (int)ctx.shape[1], guidance);
    in["hidden_states"] = x.astype(DType::f32);
    in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["timestep"] = batch_vector(need(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (guidance) in["guidance"] = batch_vector(inputs.at("guidance"), B, DType::f32, "guidance");
    in["rope_cos"] = cos;
    in["rope_sin"] = sin;
    return in;
}

// latents -> decoded; image -> latent_mean, latent_logvar; both when both are given (one graph).
Inputs vae_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    auto c = VaeConfig::from_json(config);
    KILN_CHECK(inputs.count("latents") || inputs.count("image"), cls,
               ": give 'latents' (to decode) and/or 'image' (to encode)");
    if (inputs.count("latents")) {
        const Tensor& z = inputs.at("latents");
        KILN_CHECK(z.shape.size() == 4, cls, ": latents must be [B, C, h, w], got ", shape_str(z.shape));
        build_vae_decoder(b, c, (int)z.shape[0], (int)z.shape[2], (int)z.shape[3]);
        in["latents"] = z.astype(DType::f32);
    }
    if (inputs.count("image")) {
        const Tensor& x = inputs.at("image");
        KILN_CHECK(x.shape.size() == 4, cls, ": image must be [B, C, H, W], got ", shape_str(x.shape));
        build_vae_encoder(b, c, (int)x.shape[0], (int)x.shape[2], (int)x.shape[3]);
        in["image"] = x.astype(DType::f32);
    }
    return in;
}

// AutoencoderDC: latents -> decoded; image -> latent (deterministic); both when both are given (one graph).
Inputs dc_ae_inputs(Builder& b, const std::string& cls, const nlohmann::json& config, const Inputs& inputs) {
    Inputs in;
    auto c = DcAeConfig::from_json(config);
    KILN_CHECK(inputs.count("latents") || inputs.count("image"), cls,
               ": give 'latents' (to decode) and/or 'image' (to encode)");
    if (inputs.count("latents")) {
        const Tensor& z = inputs.at("latents");
        KILN_CHECK(z.shape.size() == 4 && z.shape[1] == c.latent_channels, cls, ": latents must be [B, ",
                   c.latent_channels, ", h, w], got ", shape_str(z.shape));
        build_dc_ae_decoder(b, c, (int)z.shape[0], (int)z.shape[2], (int)z.shape[3]);
        in["latents"] = z.astype(DType::f32);
    }
    if (inputs.count("image")) {
        const Tensor& x = inputs.at("image");
        KILN_CHECK(x.shape.size() == 4 && x.shape[1] == c.in_channels, cls, ": image must be [B, ", c.in_channels,
                   ", H, W], got ", shape_str(x.shape));
        build_dc_ae_encoder(b, c, (int)x.shape[0], (int)x.shape[2], (int)x.shape[3]);
        in["image"] = x.astype(DType::f32);
    }
    return in;
}

// input_ids [B, S] (integer), optional attention_mask [B, S] (1 = keep); host-side ids, masks, EOS positions and
// T5 position buckets become graph inputs.
Inputs text_encoder_inputs(Builder& b, ComponentKind kind, const std::string& cls, const nlohmann::json& config,
                           const Inputs& inputs, const ComponentOptions& co) {
    const Tensor& ids = need(inputs, "input_ids", cls);
    KILN_CHECK(ids.shape.size() == 2, cls, ": input_ids must be [B, S], got ", shape_str(ids.shape));
    auto m = inputs.find("attention_mask");
    const Tensor* mask = m != inputs.end() ? &m->second : nullptr;
    const int B = (int)ids.shape[0], S = (int)ids.shape[1];
    // The token embeddings are gathered on the host: the vocabulary table never goes to the device.
    auto embed = [&](Inputs in, const std::string& table, int64_t V, int64_t D) {
        in["inputs_embeds"] = b.gather_rows(table, {V, D}, in.at("input_ids"));
        in.erase("input_ids");
        return in;
    };
    if (kind == ComponentKind::t5_encoder) {
        auto c = T5Config::from_json(config);
        build_t5_encoder(b, c, B, S);
        // embed_tokens is tied to `shared`; some checkpoints store only the encoder's copy.
        const std::string table = b.has("shared.weight") || !b.has("encoder.embed_tokens.weight")
                                      ? "shared.weight"
                                      : "encoder.embed_tokens.weight";
        return embed(t5_encoder_inputs(c, ids, mask), table, c.vocab_size, c.d_model);
    }
    if (kind == ComponentKind::gemma2) {
        auto c = Gemma2Config::from_json(config);
        build_gemma2_encoder(b, c, B, S);
        return embed(gemma2_encoder_inputs(c, ids, mask), "embed_tokens.weight", c.vocab_size, c.hidden_size);
    }
    if (kind == ComponentKind::qwen3) {
        DecoderLlmConfig c = qwen3_config(config, cls);
        // transformers loads either class from either layout (base_model_prefix "model"): follow the weights.
        const std::string other = c.prefix.empty() ? "model." : "";
        if (!b.has(c.prefix + "embed_tokens.weight") && b.has(other + "embed_tokens.weight")) c.prefix = other;
        // hidden_states_layers (optional, integer [k]): the hidden_states entries to output, transformers' numbering
        // (Z-Image: -2; FLUX.2 [klein]: 9, 18, 27); absent: every entry, as output_hidden_states=True.
        std::vector<int64_t> want;
        if (auto it = inputs.find("hidden_states_layers"); it != inputs.end()) {
            Tensor l = it->second.astype(DType::i64);
            KILN_CHECK(l.numel() > 0 && l.shape.size() <= 1, cls,
                       ": hidden_states_layers must be a list of indices, got ", shape_str(l.shape));
            want.assign(l.data<int64_t>(), l.data<int64_t>() + l.numel());
        } else {
            for (int64_t i = 0; i <= c.layers; ++i) want.push_back(i);
        }
        build_decoder_llm(b, c, B, S, mask != nullptr, resolve_hidden_states(c, want));
        return embed(decoder_llm_inputs(c, ids, mask), c.prefix + "embed_tokens.weight", c.vocab_size, c.hidden_size);
    }
    auto c = CLIPTextConfig::from_json(config, kind == ComponentKind::clip_text_projection);
    build_clip_text(b, c, B, S, mask != nullptr, co.clip_skip);
    return embed(clip_text_inputs(c, ids, mask), "text_model.embeddings.token_embedding.weight", c.vocab_size,
                 c.hidden_size);
}

// The kind of a class that has a forward graph; throws listing those classes.
ComponentKind forward_kind(const std::string& cls) {
    const ComponentClass* c = find_component_class(cls);
    KILN_CHECK(c && c->role != Role::tokenizer, "no forward for class '", cls,
               "' (supported: ", class_list({Role::transformer, Role::vae, Role::text_encoder}), ")");
    return c->kind;
}
}  // namespace

std::map<std::string, Tensor> build_component(Builder& b, const std::string& cls, const nlohmann::json& config,
                                              const std::map<std::string, Tensor>& inputs, const ComponentOptions& co) {
    const ComponentKind kind = forward_kind(cls);
    KILN_CHECK(co.clip_skip == 0 || kind == ComponentKind::clip_text || kind == ComponentKind::clip_text_projection,
               cls, ": clip_skip applies to CLIP text models");
    KILN_CHECK(co.skip_layers.empty() || kind == ComponentKind::sd3, cls, ": skip_layers applies to ",
               class_name(ComponentKind::sd3));
    std::map<std::string, Tensor> in;
    switch (kind) {
        case ComponentKind::dit:
            in = dit_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::pixart:
            in = pixart_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::sd3:
            in = sd3_inputs(b, cls, config, inputs, co);
            break;
        case ComponentKind::flux:
            in = flux_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::flux2:
            in = flux2_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::sana:
            in = sana_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::z_image:
            in = z_image_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::vae:
        case ComponentKind::vae_flux2:  // the same graphs; the pipeline applies the bn statistics (vae.h)
            in = vae_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::dc_ae:
            in = dc_ae_inputs(b, cls, config, inputs);
            break;
        case ComponentKind::clip_text:
        case ComponentKind::clip_text_projection:
        case ComponentKind::t5_encoder:
        case ComponentKind::gemma2:
        case ComponentKind::qwen3:
            in = text_encoder_inputs(b, kind, cls, config, inputs, co);
            break;
        case ComponentKind::clip_tokenizer:
        case ComponentKind::t5_tokenizer:
        case ComponentKind::gemma_tokenizer:
        case ComponentKind::qwen2_tokenizer:
            KILN_FAIL("internal: no forward for class '", cls, "'");  // refused by forward_kind
    }
    for (auto& [name, t] : b.lora_scale_values()) in[name] = t;  // the runtime LoRAs' scales (Builder::lora_side)
    return in;
}

std::map<std::string, Tensor> example_inputs(const std::string& cls, const nlohmann::json& cfg, int B, int h, int w) {
    auto ramp = [](Shape s) {  // deterministic values in [-1, 1]
        Tensor t(DType::f32, std::move(s));
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (float)((i * 7919) % 2001) / 1000.f - 1.f;
        return t;
    };
    std::map<std::string, Tensor> in;
    const ComponentClass* k = find_component_class(cls);
    const ComponentKind kind = k ? k->kind : ComponentKind::clip_tokenizer;  // a tokenizer has no inputs here
    if (kind == ComponentKind::dit) {
        in["hidden_states"] = ramp({B, cfg.value("in_channels", 4), h, w});
        Tensor t(DType::f32, {B}), l(DType::i32, {B});
        for (int b = 0; b < B; ++b) t.data<float>()[b] = 500.f, l.data<int32_t>()[b] = b % 1000;
        in["timestep"] = t;
        in["class_labels"] = l;
        return in;
    }
    if (kind == ComponentKind::pixart) {
        auto c = PixArtConfig::from_json(cfg);
        const int L = 300;  // PixArt-Sigma's max_sequence_length (T5 tokens)
        in["hidden_states"] = ramp({B, c.in_channels, h, w});
        in["encoder_hidden_states"] = ramp({B, L, c.caption_channels ? c.caption_channels : c.cross_attention_dim});
        Tensor t(DType::f32, {B}), mask(DType::f32, {B, L});
        for (int b = 0; b < B; ++b) t.data<float>()[b] = 500.f;
        for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = i % L < 120 ? 1.f : 0.f;  // 120 real tokens
        in["timestep"] = t;
        in["encoder_attention_mask"] = mask;
        if (c.use_additional_conditions) {
            Tensor r(DType::f32, {B, 2}), a(DType::f32, {B, 1});
            for (int b = 0; b < B; ++b) {
                r.data<float>()[2 * b] = 8.f * h, r.data<float>()[2 * b + 1] = 8.f * w;  // image height, width
                a.data<float>()[b] = (float)h / w;
            }
            in["resolution"] = r;
            in["aspect_ratio"] = a;
        }
        return in;
    }
    if (kind == ComponentKind::sd3) {
        auto c = SD3Config::from_json(cfg);
        const int L = 333;  // 77 CLIP tokens + 256 T5 tokens, as SD3's pipeline concatenates them
        in["hidden_states"] = ramp({B, c.in_channels, h, w});
        in["encoder_hidden_states"] = ramp({B, L, c.joint_attention_dim});
        in["pooled_projections"] = ramp({B, c.pooled_projection_dim});
        Tensor t(DType::f32, {B});
        for (int b = 0; b < B; ++b) t.data<float>()[b] = 500.f;
        in["timestep"] = t;
        return in;
    }
    if (kind == ComponentKind::flux) {
        // As Flux's pipeline: the h x w latent packed in 2x2 patches, img ids (0, row, col), 512 T5 tokens with
        // zero ids, guidance 3.5.
        auto c = FluxConfig::from_json(cfg);
        const int L = 512, ph = h / 2, pw = w / 2;
        in["hidden_states"] = ramp({B, (int64_t)ph * pw, c.in_channels});
        in["encoder_hidden_states"] = ramp({B, L, c.joint_attention_dim});
        in["pooled_projections"] = ramp({B, c.pooled_projection_dim});
        Tensor t(DType::f32, {B}), gs(DType::f32, {B}), img(DType::f32, {(int64_t)ph * pw, 3});
        Tensor txt(DType::f32, {L, 3});  // zeros
        for (int b = 0; b < B; ++b) t.data<float>()[b] = 0.5f, gs.data<float>()[b] = 3.5f;
        for (int i = 0; i < ph; ++i)
            for (int j = 0; j < pw; ++j) {
                float* id = img.data<float>() + ((int64_t)i * pw + j) * 3;
                id[0] = 0.f, id[1] = (float)i, id[2] = (float)j;
            }
        in["timestep"] = t;
        if (c.guidance_embeds) in["guidance"] = gs;
        in["img_ids"] = img;
        in["txt_ids"] = txt;
        return in;
    }
    if (kind == ComponentKind::flux2) {
        // As Flux2KleinPipeline: the h x w latent patchified 2x2 (128 channels for FLUX.2's 32-channel VAE), img ids
        // (0, row, col, 0), 512 Qwen3 tokens with ids (0, 0, 0, l), no guidance (klein passes None).
        auto c = Flux2Config::from_json(cfg);
        const int L = 512, ph = h / 2, pw = w / 2;
        in["hidden_states"] = ramp({B, (int64_t)ph * pw, c.in_channels});
        in["encoder_hidden_states"] = ramp({B, L, c.joint_attention_dim});
        Tensor t(DType::f32, {B}), img(DType::i64, {(int64_t)ph * pw, 4}), txt(DType::i64, {L, 4});
        for (int b = 0; b < B; ++b) t.data<float>()[b] = 0.5f;
        for (int64_t i = 0; i < img.numel(); ++i)
            img.data<int64_t>()[i] = i % 4 == 1 ? i / 4 / pw : i % 4 == 2 ? i / 4 % pw : 0;
        for (int64_t i = 0; i < txt.numel(); ++i) txt.data<int64_t>()[i] = i % 4 == 3 ? i / 4 : 0;
        in["timestep"] = t;
        in["img_ids"] = img;
        in["txt_ids"] = txt;
        return in;
    }
    if (kind == ComponentKind::sana) {
        // As SanaPipeline: 300 Gemma tokens (max_sequence_length) of which 120 are unmasked, timestep 500; Sana-Sprint
        // also takes guidance = guidance_scale 4.5 x guidance_embeds_scale.
        auto c = SanaConfig::from_json(cfg);
        const int L = 300;
        in["hidden_states"] = ramp({B, c.in_channels, h, w});
        in["encoder_hidden_states"] = ramp({B, L, c.caption_channels});
        Tensor t(DType::f32, {B}), gs(DType::f32, {B}), mask(DType::f32, {B, L});
        for (int b = 0; b < B; ++b)
            t.data<float>()[b] = 500.f, gs.data<float>()[b] = (float)(4.5 * c.guidance_embeds_scale);
        for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = i % L < 120 ? 1.f : 0.f;
        in["timestep"] = t;
        in["encoder_attention_mask"] = mask;
        if (c.guidance_embeds) in["guidance"] = gs;
        return in;
    }
    if (kind == ComponentKind::z_image) {
        // As ZImagePipeline with guidance: the batch is B items of h x w latents ([C, 1, h, w] each) and captions of
        // 160 rows (a long prompt's unmasked Qwen3 states with the chat template), t = 0.5.
        auto c = ZImageConfig::from_json(cfg);
        const int L = 160;
        for (int b = 0; b < B; ++b) {
            in["x_" + std::to_string(b)] = ramp({c.in_channels, 1, h, w});
            in["cap_feats_" + std::to_string(b)] = ramp({L, c.cap_feat_dim});
        }
        in["t"] = Tensor::from_f32({B}, std::vector<float>((size_t)B, 0.5f));
        return in;
    }
    if (kind == ComponentKind::gemma2) {
        // Sana's prompt part: max_sequence_length 300 tokens, <bos> (2), S/3 prompt tokens, then <pad> (0) with
        // attention_mask 0 (right padding, as SanaPipeline pads).
        const int S = 300, V = cfg.value("vocab_size", 256000);
        Tensor ids(DType::i64, {B, S}), mask(DType::i64, {B, S});
        for (int b = 0; b < B; ++b)
            for (int s = 0; s < S; ++s) {
                const bool valid = s <= S / 3;
                ids.data<int64_t>()[(int64_t)b * S + s] = s == 0 ? 2 : valid ? 3 + (s * 7919 + b * 13) % (V - 4) : 0;
                mask.data<int64_t>()[(int64_t)b * S + s] = valid;
            }
        in["input_ids"] = ids;
        in["attention_mask"] = mask;
        return in;
    }
    if (kind == ComponentKind::qwen3) {
        // As Z-Image's pipeline: max_sequence_length 512 tokens, right padding after S/3 prompt tokens (the pad
        // token, attention_mask 0), and the state it takes, hidden_states[-2].
        const int S = 512, V = cfg.value("vocab_size", 151936);
        Tensor ids(DType::i64, {B, S}), mask(DType::i64, {B, S}), layers(DType::i64, {1});
        for (int b = 0; b < B; ++b)
            for (int s = 0; s < S; ++s) {
                const bool valid = s < S / 3;
                ids.data<int64_t>()[(int64_t)b * S + s] = valid ? (s * 7919 + b * 13) % (V - 1) : V - 1;
                mask.data<int64_t>()[(int64_t)b * S + s] = valid;
            }
        layers.data<int64_t>()[0] = -2;
        in["input_ids"] = ids;
        in["attention_mask"] = mask;
        in["hidden_states_layers"] = layers;
        return in;
    }
    if (kind == ComponentKind::dc_ae) {  // a decode of h x w latents, as a pipeline's last call
        in["latents"] = ramp({B, cfg.value("latent_channels", 32), h, w});
        return in;
    }
    if (role_of(kind) == Role::text_encoder) {
        // A prompt of S/3 tokens then the end token (CLIP: EOS padding to 77 tokens; T5: </s> = 1, then pad 0 to
        // 512 tokens, as Flux's pipeline), no attention mask.
        const bool t5 = kind == ComponentKind::t5_encoder;
        const int V = cfg.value("vocab_size", t5 ? 32128 : 49408);
        const int S = t5 ? 512 : std::min(77, cfg.value("max_position_embeddings", 77));
        const int eos_cfg = cfg.value("eos_token_id", 2), eos = t5 ? 1 : eos_cfg == 2 ? V - 1 : eos_cfg;
        Tensor ids(DType::i64, {B, S});
        for (int b = 0; b < B; ++b)
            for (int s = 0; s < S; ++s) {
                int64_t v = s < S / 3 ? 3 + (s * 7919 + b * 13) % (V - 4) : (s == S / 3 || !t5) ? eos : 0;
                ids.data<int64_t>()[(int64_t)b * S + s] = v;
            }
        in["input_ids"] = ids;
        return in;
    }
    KILN_FAIL("no example inputs for class '", cls, "'");
}

std::map<std::string, Tensor> forward_component(vk::Context* ctx, const ModelSource& src, const std::string& component,
                                                const std::map<std::string, Tensor>& inputs, exec::Mode mode,
                                                const ComponentOptions& co) {
    auto ws = src.weights(component);
    ir::Graph g;
    Builder b(g, *ws);
    auto in = build_component(b, src.class_of(component), src.config(component), inputs, co);
    std::map<std::string, Tensor> out;
    if (ctx) {
        if (mode == exec::Mode::regional && g.regions().size() < 2) mode = exec::Mode::full;  // nothing to replay
        out = exec::run_graph(*ctx, g, b.weight_fn(), in, mode);
    } else {
        out = cpu::run(g, in, cpu_weights(*ws, b.constants()));
    }
    // DiagonalGaussianDistribution clamps logvar to [-30, 20].
    if (auto it = out.find("latent_logvar_raw"); it != out.end()) {
        Tensor t = it->second;
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::clamp(t.data<float>()[i], -30.f, 20.f);
        out.erase(it);
        out["latent_logvar"] = t;
    }
    return out;
}

}  // namespace kiln::models
