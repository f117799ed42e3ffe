#include "models/vae/t2i_decoder.h"

#include "models/registry/registry.h"
#include "models/vae/vae.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
bool is_dc_ae(const ModelSource& src) {
    const ComponentClass* c = find_component_class(src.class_of("vae"));
    KILN_CHECK(c && c->role == Role::vae, src.path(), ": vae class '", src.class_of("vae"),
               "' is not one Kiln reads (supported: ", class_list({Role::vae}), ")");
    return c->kind == ComponentKind::dc_ae;
}
}  // namespace

LatentSpace latent_space(const ModelSource& src) {
    LatentSpace s;
    s.dc_ae = is_dc_ae(src);
    if (s.dc_ae) {
        const auto c = DcAeConfig::from_json(src.config("vae"));
        s.scale_factor = c.compression();
        s.channels = c.latent_channels;
        s.scaling_factor = c.scaling_factor;
    } else {
        const auto c = VaeConfig::from_json(src.config("vae"));
        s.scale_factor = 1 << ((int)c.block_out.size() - 1);
        s.channels = c.latent_channels;
        s.scaling_factor = c.scaling_factor, s.shift_factor = c.shift_factor;
    }
    return s;
}

LatentDecoder::LatentDecoder(vk::Context* ctx, const ModelSource& src, const VaeOptions& opt) {
    if (is_dc_ae(src))
        dc_ = std::make_unique<DcAeRunner>(ctx, src, "vae", opt);
    else
        kl_ = std::make_unique<VaeRunner>(ctx, src, "vae", opt);
}

VaeRunner& LatentDecoder::kl() {
    KILN_CHECK(kl_, class_name(ComponentKind::dc_ae), ": images in are not supported (diffusers has no Sana ",
               "image-to-image pipeline)");
    return *kl_;
}

void LatentDecoder::prepare_decode(const Shape& latents) {
    if (kl_)
        kl_->prepare_decode(latents);
    else
        dc_->plan_decode(latents);
}

Tensor LatentDecoder::decode(const Tensor& latents) { return kl_ ? kl_->decode(latents) : dc_->decode(latents); }

}  // namespace kiln::models
