#pragma once
// The generation options every pipeline shares (DiT's and the text-to-image pipelines): the noise, the
// scheduler, how the loop runs and decodes, progress. GenerateOptions and T2IOptions add their own on top.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/core/tensor.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

struct CommonOptions {
    uint64_t seed = 0;
    DType noise_dtype = DType::f32;  // the dtype torch.randn draws the noise in (diffusers' torch_dtype): f32/f16/bf16
    std::string scheduler;           // "" = the model's; else a scheduler class name or alias (ddim, dpm, euler)
    // diffusers' from_config(scheduler.config, **kwargs): fields that replace the scheduler config's (e.g.
    // {"use_karras_sigmas": true}); one the scheduler does not read is an error.
    nlohmann::json scheduler_config = nlohmann::json::object();
    exec::Mode mode = exec::Mode::regional;
    std::optional<Tensor> latents_init;  // [B, C, h, w] NCHW (Flux packs it); replaces seeded_normal(seed)
    bool keep_intermediates = false;     // the fixture names: step{i}_noise_pred, step{i}_latents, decoded, image, ...
    bool tiled_vae = false;              // diffusers vae.enable_tiling(): tiled decode beyond one tile
    int vae_tile_size = 0;               // tiled_vae: tile side in px (vae.tile_sample_min_size); 0 = sample_size
    // The loop on the host: read the transformer output back every step, guidance and scheduler on the CPU. By
    // default the whole loop runs on the device (bitwise the same results) where the executor allows it (not
    // eager; with intermediates, steps run one at a time and are read back); KILN_DEVICE_LOOP=0 forces the host.
    bool host_loop = false;
    std::function<void(int step, int total)> progress;  // after each step (1 .. total)
};

}  // namespace kiln::models
