#pragma once
// The generation options every pipeline shares (DiT's and the text-to-image pipelines): the noise, the
// scheduler, how the loop runs and decodes, progress. GenerateOptions and T2IOptions add their own on top.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

// The float options of a generation and the range each takes: one table for every family. Each is checked where it
// enters: the CLI's flags (apps/kiln/generate_flags.cpp), the C API's fields (lib/capi_generate.cpp) and the
// pipelines' option structs (generate_dit, plan_t2i), so that NaN, an infinity or a value out of range stops there
// with one line naming the option.
enum class FloatOption {
    guidance,                   // [0, inf): > 1 is classifier-free (Flux, Sana-Sprint: embedded) guidance
    true_cfg_scale,             // (0, inf): Flux's true CFG, > 1 is on
    strength,                   // (0, 1]: how far the image in is noised
    eta,                        // [0, inf): DDIM's eta
    skip_layer_guidance_scale,  // any finite
    skip_layer_guidance_start,  // [0, 1]: fractions of the steps
    skip_layer_guidance_stop,   // [0, 1]
    sigma,                      // [0, inf): one custom sigma (flow matching: [0, 1], plan_t2i)
    timestep,                   // [0, inf): one custom timestep (the scheduler: below num_train_timesteps)
    lora_scale,                 // any finite
    cfg_truncation,             // any finite: Z-Image's, guidance dropped where (1000 - t) / 1000 exceeds it
    cfg_normalization,          // [0, inf): Z-Image's, 0 = off, 1 = diffusers' True
};
struct FloatRange {
    FloatOption option;
    const char* name;     // the options' and the C API's field: "guidance"
    double lo, hi;        // +-infinity: unbounded on that side (the value must still be finite)
    bool lo_open;         // lo itself is out of range
    const char* meaning;  // for the message: "1 = off"
};
const std::vector<FloatRange>& float_ranges();
const FloatRange& float_range(FloatOption o);
// "" when v is finite and in o's range, else one line: "guidance is nan: not a finite number", "strength is 1.5:
// outside (0, 1] (how far the image is noised)". `what` names it (default: the option's name; the CLI: its flag).
std::string float_problem(FloatOption o, double v, const std::string& what = "");
// Throws kiln::Error with float_problem's line unless v is finite and in range.
void check_float(FloatOption o, double v, const std::string& what = "");

struct CommonOptions {
    uint64_t seed = 0;
    DType noise_dtype = DType::f32;  // the dtype torch.randn draws the noise in (diffusers' torch_dtype): f32/f16/bf16
    std::string scheduler;           // "" = the model's; else a scheduler class name or alias (ddim, dpm, euler)
    // diffusers' from_config(scheduler.config, **kwargs): fields that replace the scheduler config's (e.g.
    // {"use_karras_sigmas": true}); one the scheduler does not read is an error.
    nlohmann::json scheduler_config = nlohmann::json::object();
    exec::Mode mode = exec::Mode::regional;
    std::optional<Tensor> latents_init;  // t2i_noise_shape: [B, C, h, w] NCHW (Flux packs it; klein [B, 4C, h/2, w/2])
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
