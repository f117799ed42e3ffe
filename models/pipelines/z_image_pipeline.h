#pragma once
// diffusers' ZImagePipeline (pipelines/z_image/pipeline_z_image.py, v0.38) from the text conditioning on. Its loop
// differs from the other text-to-image pipelines' (t2i_pipeline.cpp) enough to be its own:
//   - the transformer takes lists: per image, its latents [C, 1, h, w] and its caption rows (only the prompt's
//     unmasked rows of Qwen3's hidden_states[-2]), and t = (1000 - scheduler t) / 1000;
//   - classifier-free guidance whenever guidance > 0, positives first: pred = pos + g (pos - neg); dropped at the
//     steps whose (1000 - t) / 1000 exceeds cfg_truncation; cfg_normalization caps ||pred|| at c ||pos|| per sample;
//     the scheduler steps on -pred;
//   - the schedule: the pipeline sets sigma_min = 0, so sigmas = shift(linspace(1, 0, N)) + [0]: the last step has
//     dt = 0 (its transformer call changes nothing, as in diffusers).
// The decode is the FLUX.1-style KL VAE's: latents / scaling_factor + shift_factor.
#include "models/pipelines/t2i_pipeline.h"

namespace kiln::models {

// generate_t2i for a Z-Image model (it calls this): `p` is plan_t2i's, `plan_ms` the time spent planning so far.
// opt.text: prompt_embeds [B, L, D] with prompt_attention_mask [B, L] (1 = a row of the caption; absent: every row),
// and with guidance the negative_* likewise. Not yet taken: opt.keep_transformer (the transformer is planned per call)
// and LoRAs (refused).
GenerateResult generate_z_image(vk::Context& ctx, const ModelSource& src, const T2IOptions& opt, const T2IPlan& p,
                                double plan_ms);

// Each row's caption: the rows of embeds [B, L, D] where mask [B, L] is 1 (mask empty: all L rows), f32.
std::vector<Tensor> caption_rows(const Tensor& embeds, const Tensor& mask, const std::string& name);

}  // namespace kiln::models
