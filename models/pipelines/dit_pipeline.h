#pragma once
// diffusers' DiT pipeline (pipeline_dit.py) on Kiln: class-conditional generation with classifier-free guidance,
// the scheduler loop, VAE decode, step by step.
#include <string>
#include <vector>

#include "models/core/generate_options.h"
#include "models/core/source.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

// The DiT pipeline's call: class labels, and the steps and guidance of its own defaults.
struct GenerateOptions : CommonOptions {
    std::vector<int> labels{0};
    int images_per_label = 1;  // diffusers' num_images_per_prompt: each label n times in a row (1, 7 and 2: 1, 1, 7, 7)
    int steps = 25;
    double guidance = 4.0;
};

struct GenerateResult {
    Tensor image;  // [B, H, W, 3] in [0, 1] (NHWC, as diffusers' output_type="np")
    std::vector<std::pair<std::string, Tensor>> intermediates;
    double plan_ms = 0, denoise_ms = 0, decode_ms = 0;
    bool device_loop = false;    // the denoising loop ran on the device
    double denoise_host_ms = 0;  // of denoise_ms, the time the host was busy (not waiting for the device)
    double loop_plan_ms = 0;     // of denoise_host_ms, planning and recording the device loop
    exec::Counters transformer_counters;
    bool transformer_reused = false;  // a TransformerCache's resident transformer ran (nothing planned or recorded)
    // Per denoising step: wall time (transformer and scheduler) and the transformer run's figures.
    std::vector<double> step_ms;
    std::vector<exec::RunStats> transformer_runs;
};

// The initial noise of every pipeline: torch.randn(shape, dtype=dtype) after torch.manual_seed(seed), NCHW order, as
// diffusers' randn_tensor draws it from a CPU generator for a pipeline of that dtype (runtime/core/torch_rng.h).
// Returned as f32 (f16/bf16 values are exact in it).
Tensor seeded_normal(const Shape& shape, uint64_t seed, DType dtype = DType::f32);

// Before any work: throws kiln::Error, saying how much is needed, when the host memory a generation of `images`
// images needs (latents [C, h, w] and images [3, H, W] in f32, with the copies the pipelines keep) exceeds the
// host's physical memory. `what` names the pipeline in the message.
void check_host_memory(const std::string& what, int64_t images, int latent_channels, int latent_h, int latent_w,
                       int height, int width);

GenerateResult generate_dit(vk::Context& ctx, const ModelSource& src, const GenerateOptions& opt);

}  // namespace kiln::models
