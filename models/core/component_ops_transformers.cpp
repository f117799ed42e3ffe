// The transformers' descriptors (component_ops.h): DiT, PixArt, SD3, Flux, FLUX.2, Sana, Z-Image.
#include <cstring>
#include <string>
#include <vector>

#include "models/core/common.h"
#include "models/core/component_ops.h"
#include "models/transformers/dit.h"
#include "models/transformers/flux.h"
#include "models/transformers/flux2.h"
#include "models/transformers/pixart.h"
#include "models/transformers/sana.h"
#include "models/transformers/sd3.h"
#include "models/transformers/z_image.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
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

// The latents a DiT, PixArt or SD3 transformer takes: hidden_states [B, C, H, W] with the config's C.
const Tensor& need_latents(const Inputs& inputs, const std::string& cls, int in_channels) {
    const Tensor& x = need_input(inputs, "hidden_states", cls);
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

Inputs dit_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config, const Inputs& inputs,
                  const ComponentOptions&) {
    Inputs in;
    auto c = DiTConfig::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const int64_t B = x.shape[0];
    build_dit(b, c, (int)B, (int)x.shape[2], (int)x.shape[3]);
    in["hidden_states"] = x.astype(DType::f32);
    in["timestep"] = batch_vector(need_input(inputs, "timestep", cls), B, DType::f32, "timestep");
    in["class_labels"] = batch_vector(need_input(inputs, "class_labels", cls), B, DType::i32, "class_labels");
    return in;
}

Inputs dit_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    in["hidden_states"] = example_ramp({B, cfg.value("in_channels", 4), h, w});
    Tensor t(DType::f32, {B}), l(DType::i32, {B});
    for (int b = 0; b < B; ++b) t.data<float>()[b] = 500.f, l.data<int32_t>()[b] = b % 1000;
    in["timestep"] = t;
    in["class_labels"] = l;
    return in;
}

Inputs pixart_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                     const Inputs& inputs, const ComponentOptions&) {
    Inputs in;
    auto c = PixArtConfig::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const Tensor& ctx = need_input(inputs, "encoder_hidden_states", cls);
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == x.shape[0], cls,
               ": encoder_hidden_states must be [B, L, C], got ", shape_str(ctx.shape));
    const int64_t B = x.shape[0], L = ctx.shape[1];
    auto m = inputs.find("encoder_attention_mask");
    bool mask = m != inputs.end() && c.cross_attention_dim;
    if (mask) in["encoder_attention_mask"] = text_mask_bias(m->second, B, L, cls);
    build_pixart(b, c, (int)B, (int)x.shape[2], (int)x.shape[3], (int)L, mask);
    in["hidden_states"] = x.astype(DType::f32);
    if (c.cross_attention_dim) in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["timestep"] = batch_vector(need_input(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (c.use_additional_conditions) {
        Tensor r = need_input(inputs, "resolution", cls).astype(DType::f32),
               a = need_input(inputs, "aspect_ratio", cls).astype(DType::f32);
        KILN_CHECK(r.numel() == 2 * B && a.numel() == B, cls, ": resolution must be [B, 2] and aspect_ratio [B, 1]");
        r.shape = {B, 2};
        a.shape = {B, 1};
        in["resolution"] = r;
        in["aspect_ratio"] = a;
    }
    return in;
}

Inputs pixart_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    auto c = PixArtConfig::from_json(cfg);
    const int L = 300;  // PixArt-Sigma's max_sequence_length (T5 tokens)
    in["hidden_states"] = example_ramp({B, c.in_channels, h, w});
    in["encoder_hidden_states"] = example_ramp({B, L, c.caption_channels ? c.caption_channels : c.cross_attention_dim});
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

TransformerShape pixart_shape(const nlohmann::json& cfg) {
    const auto c = PixArtConfig::from_json(cfg);
    return {c.in_channels, c.patch, c.sample_size, c.layers};
}

Inputs sd3_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config, const Inputs& inputs,
                  const ComponentOptions& co) {
    Inputs in;
    auto c = SD3Config::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const Tensor& ctx = need_input(inputs, "encoder_hidden_states", cls);
    const Tensor& pooled = need_input(inputs, "pooled_projections", cls);
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
    in["timestep"] = batch_vector(need_input(inputs, "timestep", cls), B, DType::f32, "timestep");
    return in;
}

Inputs sd3_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    auto c = SD3Config::from_json(cfg);
    const int L = 333;  // 77 CLIP tokens + 256 T5 tokens, as SD3's pipeline concatenates them
    in["hidden_states"] = example_ramp({B, c.in_channels, h, w});
    in["encoder_hidden_states"] = example_ramp({B, L, c.joint_attention_dim});
    in["pooled_projections"] = example_ramp({B, c.pooled_projection_dim});
    Tensor t(DType::f32, {B});
    for (int b = 0; b < B; ++b) t.data<float>()[b] = 500.f;
    in["timestep"] = t;
    return in;
}

TransformerShape sd3_shape(const nlohmann::json& cfg) {
    const auto c = SD3Config::from_json(cfg);
    return {c.in_channels, c.patch, c.sample_size, c.layers};
}

Inputs flux_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                   const Inputs& inputs, const ComponentOptions&) {
    Inputs in;
    const Tensor& x = need_input(inputs, "hidden_states", cls);
    const Tensor& ctx = need_input(inputs, "encoder_hidden_states", cls);
    const Tensor& pooled = need_input(inputs, "pooled_projections", cls);
    auto c = FluxConfig::from_json(config);
    KILN_CHECK(x.shape.size() == 3 && x.shape[2] == c.in_channels, cls, ": hidden_states must be [B, S, ",
               c.in_channels, "] (packed latents), got ", shape_str(x.shape));
    const int64_t B = x.shape[0], S_img = x.shape[1];
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == B && ctx.shape[2] == c.joint_attention_dim, cls,
               ": encoder_hidden_states must be [B, L, ", c.joint_attention_dim, "], got ", shape_str(ctx.shape));
    KILN_CHECK(pooled.numel() == B * c.pooled_projection_dim, cls, ": pooled_projections must be [B, ",
               c.pooled_projection_dim, "], got ", shape_str(pooled.shape));
    // FluxPosEmbed on the host from the ids (f64 angles, as diffusers): the cos/sin tables are graph inputs.
    auto [cos, sin] = flux_rope_tables(c, need_input(inputs, "txt_ids", cls), need_input(inputs, "img_ids", cls));
    KILN_CHECK(cos.shape[0] == ctx.shape[1] + S_img, cls, ": txt_ids/img_ids have ", cos.shape[0], " rows for ",
               ctx.shape[1], " text and ", S_img, " image tokens");
    build_flux(b, c, (int)B, (int)S_img, (int)ctx.shape[1]);
    in["hidden_states"] = x.astype(DType::f32);
    in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["pooled_projections"] = pooled.astype(DType::f32);
    in["pooled_projections"].shape = {B, c.pooled_projection_dim};
    in["timestep"] = batch_vector(need_input(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (c.guidance_embeds)
        in["guidance"] = batch_vector(need_input(inputs, "guidance", cls), B, DType::f32, "guidance");
    in["rope_cos"] = cos;
    in["rope_sin"] = sin;
    return in;
}

// As Flux's pipeline: the h x w latent packed in 2x2 patches, img ids (0, row, col), 512 T5 tokens with
// zero ids, guidance 3.5.
Inputs flux_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    auto c = FluxConfig::from_json(cfg);
    const int L = 512, ph = h / 2, pw = w / 2;
    in["hidden_states"] = example_ramp({B, (int64_t)ph * pw, c.in_channels});
    in["encoder_hidden_states"] = example_ramp({B, L, c.joint_attention_dim});
    in["pooled_projections"] = example_ramp({B, c.pooled_projection_dim});
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

TransformerShape flux_shape(const nlohmann::json& cfg) {
    const auto c = FluxConfig::from_json(cfg);
    return {c.in_channels, c.patch, 0, c.layers, c.out_channels};
}

// hidden_states [B, S_img, in_channels] (packed latents), encoder_hidden_states [B, S_txt, joint_attention_dim],
// timestep (t/1000), img_ids / txt_ids [S, 4] or [B, S, 4] (first row), and guidance: used when given and the config
// has guidance_embeds (diffusers' `guidance is not None and guidance_embedder is not None`), refused without it.
Inputs flux2_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                    const Inputs& inputs, const ComponentOptions&) {
    Inputs in;
    const Tensor& x = need_input(inputs, "hidden_states", cls);
    const Tensor& ctx = need_input(inputs, "encoder_hidden_states", cls);
    auto c = Flux2Config::from_json(config);
    KILN_CHECK(x.shape.size() == 3 && x.shape[2] == c.in_channels, cls, ": hidden_states must be [B, S, ",
               c.in_channels, "] (packed latents), got ", shape_str(x.shape));
    const int64_t B = x.shape[0], S_img = x.shape[1];
    KILN_CHECK(ctx.shape.size() == 3 && ctx.shape[0] == B && ctx.shape[2] == c.joint_attention_dim, cls,
               ": encoder_hidden_states must be [B, L, ", c.joint_attention_dim, "], got ", shape_str(ctx.shape));
    const bool guidance = inputs.count("guidance") > 0;
    KILN_CHECK(!guidance || c.guidance_embeds, cls, ": input 'guidance' given but the config has no guidance_embeds");
    // Flux2PosEmbed on the host from the ids (f64 angles, as diffusers): the cos/sin tables are graph inputs.
    auto [cos, sin] = flux2_rope_tables(c, need_input(inputs, "txt_ids", cls), need_input(inputs, "img_ids", cls));
    KILN_CHECK(cos.shape[0] == ctx.shape[1] + S_img, cls, ": txt_ids/img_ids have ", cos.shape[0], " rows for ",
               ctx.shape[1], " text and ", S_img, " image tokens");
    build_flux2(b, c, (int)B, (int)S_img, (int)ctx.shape[1], guidance);
    in["hidden_states"] = x.astype(DType::f32);
    in["encoder_hidden_states"] = ctx.astype(DType::f32);
    in["timestep"] = batch_vector(need_input(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (guidance) in["guidance"] = batch_vector(inputs.at("guidance"), B, DType::f32, "guidance");
    in["rope_cos"] = cos;
    in["rope_sin"] = sin;
    return in;
}

// As Flux2KleinPipeline: the h x w latent patchified 2x2 (128 channels for FLUX.2's 32-channel VAE), img ids
// (0, row, col, 0), 512 Qwen3 tokens with ids (0, 0, 0, l), no guidance (klein passes None).
Inputs flux2_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    auto c = Flux2Config::from_json(cfg);
    const int L = 512, ph = h / 2, pw = w / 2;
    in["hidden_states"] = example_ramp({B, (int64_t)ph * pw, c.in_channels});
    in["encoder_hidden_states"] = example_ramp({B, L, c.joint_attention_dim});
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

// Flux2Transformer2DModel: tokens of 4C (the 2x2-patchified latents).
TransformerShape flux2_shape(const nlohmann::json& cfg) {
    const auto c = Flux2Config::from_json(cfg);
    return {c.in_channels, c.patch, 0, c.layers, c.out_channels};
}

// hidden_states [B, C, H, W], encoder_hidden_states [B, L, caption_channels], timestep, optional
// encoder_attention_mask, and guidance exactly when the config has guidance_embeds (Sana-Sprint).
Inputs sana_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                   const Inputs& inputs, const ComponentOptions&) {
    Inputs in;
    auto c = SanaConfig::from_json(config);
    const Tensor& x = need_latents(inputs, cls, c.in_channels);
    const Tensor& ctx = need_input(inputs, "encoder_hidden_states", cls);
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
    in["timestep"] = batch_vector(need_input(inputs, "timestep", cls), B, DType::f32, "timestep");
    if (c.guidance_embeds) in["guidance"] = batch_vector(inputs.at("guidance"), B, DType::f32, "guidance");
    return in;
}

// As SanaPipeline: 300 Gemma tokens (max_sequence_length) of which 120 are unmasked, timestep 500; Sana-Sprint
// also takes guidance = guidance_scale 4.5 x guidance_embeds_scale.
Inputs sana_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    auto c = SanaConfig::from_json(cfg);
    const int L = 300;
    in["hidden_states"] = example_ramp({B, c.in_channels, h, w});
    in["encoder_hidden_states"] = example_ramp({B, L, c.caption_channels});
    Tensor t(DType::f32, {B}), gs(DType::f32, {B}), mask(DType::f32, {B, L});
    for (int b = 0; b < B; ++b)
        t.data<float>()[b] = 500.f, gs.data<float>()[b] = (float)(4.5 * c.guidance_embeds_scale);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = i % L < 120 ? 1.f : 0.f;
    in["timestep"] = t;
    in["encoder_attention_mask"] = mask;
    if (c.guidance_embeds) in["guidance"] = gs;
    return in;
}

TransformerShape sana_shape(const nlohmann::json& cfg) {
    const auto c = SanaConfig::from_json(cfg);
    return {c.in_channels, c.patch, c.sample_size, c.layers, c.out_channels};
}

// Lists, as diffusers' ZImageTransformer2DModel takes them: x_0 .. x_{B-1} [C, 1, H_i, W_i], cap_feats_0 ..
// [L_i, cap_feat_dim] (each item's unpadded caption), t [B]; outputs sample_0 .. (build_z_image).
Inputs z_image_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                      const Inputs& inputs, const ComponentOptions&) {
    Inputs in;
    auto c = ZImageConfig::from_json(config);
    std::vector<ZImageItem> items;
    for (size_t i = 0; inputs.count("x_" + std::to_string(i)); ++i) {
        const std::string xn = "x_" + std::to_string(i), cn = "cap_feats_" + std::to_string(i);
        const Tensor &x = inputs.at(xn), &cap = need_input(inputs, cn, cls);
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
    in["t"] = batch_vector(need_input(inputs, "t", cls), (int64_t)items.size(), DType::f32, "t");
    return in;
}

// As ZImagePipeline with guidance: the batch is B items of h x w latents ([C, 1, h, w] each) and captions of
// 160 rows (a long prompt's unmasked Qwen3 states with the chat template), t = 0.5.
Inputs z_image_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    auto c = ZImageConfig::from_json(cfg);
    const int L = 160;
    for (int b = 0; b < B; ++b) {
        in["x_" + std::to_string(b)] = example_ramp({c.in_channels, 1, h, w});
        in["cap_feats_" + std::to_string(b)] = example_ramp({L, c.cap_feat_dim});
    }
    in["t"] = Tensor::from_f32({B}, std::vector<float>((size_t)B, 0.5f));
    return in;
}

// ZImageTransformer2DModel: all_patch_size[0] (the pipeline's patch 2); out channels = in channels.
TransformerShape z_image_shape(const nlohmann::json& cfg) {
    const auto c = ZImageConfig::from_json(cfg);
    return {c.in_channels, c.patch, 0, c.layers, c.in_channels};
}
}  // namespace

const std::vector<ComponentOps>& transformer_component_ops() {
    using K = ComponentKind;
    static const std::vector<ComponentOps> v = {
        {K::dit, dit_inputs, dit_example},  // DiT has its own pipeline (dit_pipeline.h), not plan_t2i
        {K::pixart, pixart_inputs, pixart_example, pixart_shape},
        {K::sd3, sd3_inputs, sd3_example, sd3_shape},
        {K::flux, flux_inputs, flux_example, flux_shape},
        {K::flux2, flux2_inputs, flux2_example, flux2_shape},
        {K::sana, sana_inputs, sana_example, sana_shape},
        {K::z_image, z_image_inputs, z_image_example, z_image_shape},
    };
    return v;
}

}  // namespace kiln::models
