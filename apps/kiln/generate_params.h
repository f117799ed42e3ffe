#pragma once
// Fields of kiln_generate_params from the pipelines' options, where the C API's encoding differs from the options'
// (its zero is the default): shared by kiln generate (generate_capi.cpp) and kiln serve (serve_worker.cpp).
#include "include/kiln.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/text_encode.h"

namespace kiln::app {

// Z-Image's cfg_truncation as kiln_generate_params takes it: 1 (the default) -> 0; diffusers' 0 -> the smallest
// positive double, which leaves out the same steps; else itself.
double cfg_truncation_param(double v);

// The guidance fields and the texts' text_encoder_layers (pointing into x): guidance (0 -> 1: the C API's 0 is the
// pipeline's default), true_cfg_scale, cfg_truncation, cfg_normalization, text_encoder_layers.
void set_guidance(kiln_generate_params& p, const models::T2IOptions& t, const models::PromptOptions& x);

}  // namespace kiln::app
