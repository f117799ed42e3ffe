// The autoencoders' descriptors (component_ops.h): the KL VAE (FLUX.2's too) and AutoencoderDC.
#include <string>
#include <vector>

#include "models/core/component_ops.h"
#include "models/vae/dc_ae.h"
#include "models/vae/vae.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// latents -> decoded; image -> latent_mean, latent_logvar; both when both are given (one graph).
Inputs vae_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config, const Inputs& inputs,
                  const ComponentOptions&) {
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
Inputs dc_ae_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                    const Inputs& inputs, const ComponentOptions&) {
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

// A decode of h x w latents, as a pipeline's last call.
Inputs dc_ae_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    in["latents"] = example_ramp({B, cfg.value("latent_channels", 32), h, w});
    return in;
}
}  // namespace

const std::vector<ComponentOps>& vae_component_ops() {
    using K = ComponentKind;
    static const std::vector<ComponentOps> v = {
        {K::vae, vae_inputs},
        {K::vae_flux2, vae_inputs},  // the same graphs; the pipeline applies the bn statistics (vae.h)
        {K::dc_ae, dc_ae_inputs, dc_ae_example},
    };
    return v;
}

}  // namespace kiln::models
