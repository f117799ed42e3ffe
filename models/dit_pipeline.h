#pragma once
// diffusers DiTPipeline on Kiln: class-conditional generation with classifier-free guidance,
// the scheduler loop, VAE decode. Follows pipeline_dit.py step by step.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/source.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

struct GenerateOptions {
    std::vector<int> labels{0};
    int steps = 25;
    double guidance = 4.0;
    uint64_t seed = 0;
    std::string scheduler;  // "" = the model's; else a scheduler class name or alias (ddim, dpm, euler)
    exec::Mode mode = exec::Mode::regional;
    std::optional<Tensor> latents_init;  // [B, C, h, w]; replaces the seeded noise
    bool keep_intermediates = false;     // step{i}_noise_pred, step{i}_latents, decoded, image
    bool tiled_vae = false;              // diffusers vae.enable_tiling(): tiled decode beyond one tile
    int vae_tile_size = 0;               // tiled_vae: tile side in px (vae.tile_sample_min_size); 0 = sample_size
    std::function<void(int step, int total)> progress;
};

struct GenerateResult {
    Tensor image;  // [B, H, W, 3] in [0, 1] (NHWC, as diffusers' output_type="np")
    std::vector<std::pair<std::string, Tensor>> intermediates;
    double plan_ms = 0, denoise_ms = 0, decode_ms = 0;
    exec::Counters transformer_counters;
    // Per denoising step: wall time (transformer and scheduler) and the transformer run's figures.
    std::vector<double> step_ms;
    std::vector<exec::RunStats> transformer_runs;
};

// Kiln's initial-noise RNG: mt19937_64(seed), Box-Muller pairs -> N(0, 1), filled in NCHW order.
Tensor seeded_normal(const Shape& shape, uint64_t seed);

GenerateResult generate_dit(vk::Context& ctx, const ModelSource& src, const GenerateOptions& opt);

}  // namespace kiln::models
