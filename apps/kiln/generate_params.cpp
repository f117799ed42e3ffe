#include "apps/kiln/generate_params.h"

#include <limits>

namespace kiln::app {

double cfg_truncation_param(double v) {
    // Z-Image compares cfg_truncation with (1000 - t) / 1000, an f32: diffusers' 0 leaves out the steps where that
    // is above 0, as does the smallest positive double (the smallest positive f32 is 1.4e-45).
    if (v == 1.0) return 0.0;
    return v == 0.0 ? std::numeric_limits<double>::denorm_min() : v;
}

void set_guidance(kiln_generate_params& p, const models::T2IOptions& t, const models::PromptOptions& x) {
    if (t.guidance) p.guidance = *t.guidance, p.guidance_exact = 1;  // --guidance 0 is 0 (Z-Image-Turbo's)
    if (t.true_cfg_scale) p.true_cfg_scale = *t.true_cfg_scale;
    p.cfg_truncation = cfg_truncation_param(t.cfg_truncation);
    p.cfg_normalization = t.cfg_normalization;
    p.text_encoder_layers = x.text_encoder_layers.empty() ? nullptr : x.text_encoder_layers.data();
    p.text_encoder_layer_count = (int)x.text_encoder_layers.size();
}

}  // namespace kiln::app
