#include "models/pipelines/t2i_images.h"

#include <cmath>

#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Flux's _pack_latents: [B, C, h, w] -> [B, (h/2)(w/2), 4 C], channel c * 4 + dy * 2 + dx.
std::vector<float> pack_latents_2x2(const float* x, int B, int C, int h, int w) {
    std::vector<float> out((size_t)B * C * h * w);
    size_t o = 0;
    for (int b = 0; b < B; ++b)
        for (int i = 0; i < h / 2; ++i)
            for (int j = 0; j < w / 2; ++j)
                for (int c = 0; c < C; ++c)
                    for (int dy = 0; dy < 2; ++dy)
                        for (int dx = 0; dx < 2; ++dx)
                            out[o++] = x[(((size_t)b * C + c) * h + 2 * i + dy) * w + 2 * j + dx];
    return out;
}

// A draw by name: the caller's tensor (checked against the shape), else gen's next normals in `dtype`.
std::vector<float> draw(const T2IOptions& opt, const std::string& name, const Shape& shape, TorchCpuGenerator& gen) {
    auto it = opt.inputs.noise.find(name);
    const Tensor* given = it != opt.inputs.noise.end() ? &it->second : nullptr;
    if (!given && name == "noise" && opt.latents_init) given = &*opt.latents_init;
    if (given) {
        KILN_CHECK(given->shape == shape, "noise: ", name, " has shape ", shape_str(given->shape), ", this call draws ",
                   shape_str(shape));
        Tensor f = given->astype(DType::f32);
        return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v((size_t)n);
    gen.randn(v.data(), n, opt.noise_dtype);
    return v;
}
}  // namespace

// The latents of a VAE sample of `image` ([1, 3, H, W]): (mean + std * eps - shift) * scale, eps the draw `name`;
// mean and std under `prefix`_latent_mean / _std in keep.
Tensor encode_sample(VaeRunner& vae, const Tensor& image, const T2IOptions& opt, const std::string& name,
                     const std::string& prefix, TorchCpuGenerator& gen,
                     std::vector<std::pair<std::string, Tensor>>* keep) {
    auto enc = vae.encode(image);
    const Tensor& mean = enc.at("latent_mean");
    const Tensor& logvar = enc.at("latent_logvar");
    // DiagonalGaussianDistribution: std = exp(0.5 * logvar) (logvar already clamped to [-30, 20]); sample = mean +
    // std * eps; then (z - shift_factor) * scaling_factor, all in float32.
    const std::vector<float> eps = draw(opt, name, mean.shape, gen);
    const float sf = (float)vae.config().scaling_factor, shift = (float)vae.config().shift_factor;
    Tensor stdev(DType::f32, mean.shape), lat(DType::f32, mean.shape);
    for (int64_t k = 0; k < mean.numel(); ++k) {
        const float s = std::exp(0.5f * logvar.data<float>()[k]);
        stdev.data<float>()[k] = s;
        const float z = mean.data<float>()[k] + s * eps[(size_t)k];
        lat.data<float>()[k] = (z - shift) * sf;
    }
    if (keep) {
        keep->push_back({prefix + "_latent_mean", mean});
        keep->push_back({prefix + "_latent_std", stdev});
    }
    return lat;
}

// Flux Fill's conditioning (pipeline_flux_fill.py prepare_mask_latents): masked_image = image * (1 - mask),
// VAE-sampled (draw masked_image_vae_sample_noise) and packed [S, 4 C]; the mask [H, W] as [f * f, h, w] (channel
// dy * f + dx = pixel (y f + dy, x f + dx)) packed [S, 4 f^2]; per token cat(latents, mask), repeated for B rows.
std::vector<float> fill_conditioning(VaeRunner& vae, const Tensor& image, const Tensor& mask, const T2IOptions& opt,
                                     const T2IPlan& p, TorchCpuGenerator& gen, int64_t B,
                                     std::vector<std::pair<std::string, Tensor>>* keep) {
    const int C = p.latent_channels, h = p.latent_h, w = p.latent_w, f = p.vae_scale_factor, W = p.width;
    const int64_t HW = (int64_t)p.height * W;
    Tensor masked(DType::f32, image.shape);
    for (int c = 0; c < 3; ++c)
        for (int64_t k = 0; k < HW; ++k)
            masked.data<float>()[c * HW + k] = image.data<float>()[c * HW + k] * (1.f - mask.data<float>()[k]);
    if (keep) keep->push_back({"masked_image", masked});
    const Tensor lat = encode_sample(vae, masked, opt, "masked_image_vae_sample_noise", "masked_image", gen, keep);
    const int S = (h / 2) * (w / 2), KL = 4 * C, KM = 4 * f * f, K = KL + KM;
    std::vector<float> lat_p(lat.data<float>(), lat.data<float>() + lat.numel());
    lat_p = pack_latents_2x2(lat_p.data(), 1, C, h, w);
    std::vector<float> mask_p((size_t)S * KM);
    for (int Y = 0; Y < h / 2; ++Y)
        for (int X = 0; X < w / 2; ++X)
            for (int dy = 0; dy < f; ++dy)
                for (int dx = 0; dx < f; ++dx)
                    for (int py = 0; py < 2; ++py)
                        for (int px = 0; px < 2; ++px)
                            mask_p[((size_t)Y * (w / 2) + X) * KM + (dy * f + dx) * 4 + py * 2 + px] =
                                mask.data<float>()[(int64_t)((2 * Y + py) * f + dy) * W + (2 * X + px) * f + dx];
    if (keep) {
        keep->push_back({"masked_image_latents", Tensor::from_f32({1, S, KL}, lat_p)});
        keep->push_back({"mask_latents", Tensor::from_f32({1, S, KM}, mask_p)});
    }
    KILN_CHECK(K == p.cond_channels, "internal: Fill conditioning has ", K, " channels, the transformer ",
               p.cond_channels);
    std::vector<float> cond((size_t)B * S * K);
    for (int64_t b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s) {
            float* o = &cond[((size_t)b * S + s) * K];
            std::copy(&lat_p[(size_t)s * KL], &lat_p[(size_t)s * KL] + KL, o);
            std::copy(&mask_p[(size_t)s * KM], &mask_p[(size_t)s * KM] + KM, o + KL);
        }
    return cond;
}

ImageLatents prepare_image_latents(VaeRunner& vae, const T2IOptions& opt, const T2IPlan& p, TorchCpuGenerator& gen,
                                   int64_t B, float sigma, std::vector<std::pair<std::string, Tensor>>* keep) {
    const int C = p.latent_channels, h = p.latent_h, w = p.latent_w;
    const size_t row = (size_t)C * h * w;
    const Tensor image = preprocess_image(opt.inputs, p.width, p.height);  // [1, 3, H, W]
    if (keep) keep->push_back({"image_preprocessed", image});
    const Tensor lat = encode_sample(vae, image, opt, "image_vae_sample_noise", "image", gen, keep);
    KILN_CHECK(lat.shape == (Shape{1, C, h, w}), "the VAE encoded the image to ", shape_str(lat.shape), ", expected ",
               shape_str({1, C, h, w}));
    if (keep) keep->push_back({"image_latents", lat});
    ImageLatents r;
    r.image_latents.resize(row * (size_t)B);
    for (int64_t b = 0; b < B; ++b)
        std::copy(lat.data<float>(), lat.data<float>() + row, r.image_latents.begin() + (ptrdiff_t)(b * row));
    r.noise = draw(opt, "noise", {B, C, h, w}, gen);
    if (keep) keep->push_back({"noise", Tensor::from_f32({B, C, h, w}, r.noise)});
    // scale_noise: sigma * noise + (1 - sigma) * sample (float32; (1 - sigma) rounded first, as torch computes it)
    r.init.resize(r.noise.size());
    const float one_minus = 1.f - sigma;
    for (size_t k = 0; k < r.init.size(); ++k) r.init[k] = sigma * r.noise[k] + one_minus * r.image_latents[k];
    if (opt.inputs.has_mask()) {
        const Tensor mask = preprocess_mask(opt.inputs, p.width, p.height);
        if (keep) keep->push_back({"mask_preprocessed", mask});
        if (p.fill)
            r.cond = fill_conditioning(vae, image, mask, opt, p, gen, B, keep);
        else
            r.mask = mask_latents(mask, (int)B, C, h, w);
    }
    return r;
}

std::vector<float> kontext_reference(VaeRunner& vae, const T2IOptions& opt, const T2IPlan& p, int64_t B, Tensor& ids,
                                     std::vector<std::pair<std::string, Tensor>>* keep) {
    const int C = p.latent_channels, f = p.vae_scale_factor;
    const int h = p.ref_height / f, w = p.ref_width / f;
    const Tensor image = preprocess_image(opt.inputs, p.ref_width, p.ref_height);
    if (keep) keep->push_back({"image_preprocessed", image});
    auto enc = vae.encode(image);
    const Tensor& mean = enc.at("latent_mean");
    KILN_CHECK(mean.shape == (Shape{1, C, h, w}), "the VAE encoded the reference to ", shape_str(mean.shape),
               ", expected ", shape_str({1, C, h, w}));
    const float sf = (float)vae.config().scaling_factor, shift = (float)vae.config().shift_factor;
    Tensor lat(DType::f32, mean.shape);
    for (int64_t k = 0; k < lat.numel(); ++k) lat.data<float>()[k] = (mean.data<float>()[k] - shift) * sf;
    const std::vector<float> packed = pack_latents_2x2(lat.data<float>(), 1, C, h, w);
    const int S = (h / 2) * (w / 2);
    if (keep) {
        keep->push_back({"image_latents", lat});
        keep->push_back({"image_latents_packed", Tensor::from_f32({1, S, 4 * C}, packed)});
    }
    ids = Tensor(DType::f32, {S, 3});
    for (int i = 0; i < h / 2; ++i)
        for (int j = 0; j < w / 2; ++j) {
            float* id = ids.data<float>() + ((size_t)i * (w / 2) + j) * 3;
            id[0] = 1.f, id[1] = (float)i, id[2] = (float)j;  // first id 1: the reference, not the output
        }
    std::vector<float> out;
    for (int64_t b = 0; b < B; ++b) out.insert(out.end(), packed.begin(), packed.end());
    return out;
}

void blend_inpaint(std::vector<float>& latents, const std::vector<float>& image_latents,
                   const std::vector<float>& noise, const std::vector<float>& mask, float sigma,
                   std::vector<float>* init_proper) {
    const float one_minus = 1.f - sigma;
    if (init_proper) init_proper->resize(latents.size());
    for (size_t k = 0; k < latents.size(); ++k) {
        const float proper = sigma == 0.f ? image_latents[k] : sigma * noise[k] + one_minus * image_latents[k];
        if (init_proper) (*init_proper)[k] = proper;
        latents[k] = (1.f - mask[k]) * proper + mask[k] * latents[k];
    }
}

}  // namespace kiln::models
