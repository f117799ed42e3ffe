#include "models/t2i_images.h"

#include <cmath>

#include "runtime/core/error.h"

namespace kiln::models {

namespace {
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

ImageLatents prepare_image_latents(VaeRunner& vae, const T2IOptions& opt, const T2IPlan& p, TorchCpuGenerator& gen,
                                   int64_t B, float sigma, std::vector<std::pair<std::string, Tensor>>* keep) {
    const int C = p.latent_channels, h = p.latent_h, w = p.latent_w;
    const size_t row = (size_t)C * h * w;
    const Tensor image = preprocess_image(opt.inputs, p.width, p.height);  // [1, 3, H, W]
    if (keep) keep->push_back({"image_preprocessed", image});
    auto enc = vae.encode(image);
    const Tensor& mean = enc.at("latent_mean");
    const Tensor& logvar = enc.at("latent_logvar");
    KILN_CHECK(mean.shape == (Shape{1, C, h, w}), "the VAE encoded the image to ", shape_str(mean.shape), ", expected ",
               shape_str({1, C, h, w}));
    // DiagonalGaussianDistribution: std = exp(0.5 * logvar) (logvar already clamped to [-30, 20]); sample = mean +
    // std * eps; then (z - shift_factor) * scaling_factor, all in float32.
    const std::vector<float> eps = draw(opt, "image_vae_sample_noise", {1, C, h, w}, gen);
    const float sf = (float)vae.config().scaling_factor, shift = (float)vae.config().shift_factor;
    Tensor stdev(DType::f32, mean.shape), lat(DType::f32, mean.shape);
    for (size_t k = 0; k < row; ++k) {
        const float s = std::exp(0.5f * logvar.data<float>()[k]);
        stdev.data<float>()[k] = s;
        const float z = mean.data<float>()[k] + s * eps[k];
        lat.data<float>()[k] = (z - shift) * sf;
    }
    if (keep) {
        keep->push_back({"image_latent_mean", mean});
        keep->push_back({"image_latent_std", stdev});
        keep->push_back({"image_latents", lat});
    }
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
        r.mask = mask_latents(mask, (int)B, C, h, w);
    }
    return r;
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
