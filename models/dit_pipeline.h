#pragma once
// diffusers' DiT pipeline (pipeline_dit.py) on Kiln: class-conditional generation with classifier-free guidance,
// the scheduler loop, VAE decode, step by step.
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/source.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

struct GenerateOptions {
    std::vector<int> labels{0};
    int images_per_label = 1;  // diffusers' num_images_per_prompt: each label n times in a row (1, 7 and 2: 1, 1, 7, 7)
    int steps = 25;
    double guidance = 4.0;
    uint64_t seed = 0;
    DType noise_dtype = DType::f32;  // the dtype torch.randn draws the noise in (diffusers' torch_dtype): f32/f16/bf16
    std::string scheduler;           // "" = the model's; else a scheduler class name or alias (ddim, dpm, euler)
    // diffusers' from_config(scheduler.config, **kwargs): fields that replace the scheduler config's (e.g.
    // {"use_karras_sigmas": true}); one the scheduler does not read is an error.
    nlohmann::json scheduler_config = nlohmann::json::object();
    exec::Mode mode = exec::Mode::regional;
    std::optional<Tensor> latents_init;  // [B, C, h, w]; replaces the seeded noise
    bool keep_intermediates = false;     // step{i}_noise_pred, step{i}_latents, decoded, image
    bool tiled_vae = false;              // diffusers vae.enable_tiling(): tiled decode beyond one tile
    int vae_tile_size = 0;               // tiled_vae: tile side in px (vae.tile_sample_min_size); 0 = sample_size
    // The loop on the host: read the transformer output back every step, guidance and scheduler on the CPU. By
    // default the whole loop runs on the device (bitwise the same results) where the executor allows it (not
    // eager; with intermediates, steps run one at a time and are read back); KILN_DEVICE_LOOP=0 forces the host.
    bool host_loop = false;
    std::function<void(int step, int total)> progress;
};

struct GenerateResult {
    Tensor image;  // [B, H, W, 3] in [0, 1] (NHWC, as diffusers' output_type="np")
    std::vector<std::pair<std::string, Tensor>> intermediates;
    double plan_ms = 0, denoise_ms = 0, decode_ms = 0;
    bool device_loop = false;    // the denoising loop ran on the device
    double denoise_host_ms = 0;  // of denoise_ms, the time the host was busy (not waiting for the device)
    double loop_plan_ms = 0;     // of denoise_host_ms, planning and recording the device loop
    exec::Counters transformer_counters;
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
