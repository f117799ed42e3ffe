#pragma once
// The VAE's decode / encode with diffusers' memory options: enable_tiling() (tiled_decode, _tiled_encode:
// overlapping tiles, blend_v / blend_h, row-limit crop) and enable_slicing() (one batch element at a time).
// One executor is resident at a time: tiles run grouped by shape, and a new shape (a smaller border tile)
// replaces the planned executor, so device memory is the weights once plus one tile's activations.
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/core/source.h"
#include "models/vae/vae.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

struct VaeOptions {
    bool tiled = false;        // diffusers enable_tiling()
    bool sliced = false;       // diffusers enable_slicing()
    int tile_sample_size = 0;  // tile_sample_min_size in pixels; 0 = the config's sample_size
    exec::Mode mode = exec::Mode::full;
    // AutoencoderDC only: tile_sample_stride in px; 0 = diffusers' 448 with the default 512 px tile, else 7/8 of
    // the tile (diffusers' 448 / 512) down to a multiple of the compression (dc_ae_runner.h).
    int tile_sample_stride = 0;
};

// diffusers' autoencoder_kl.py __init__: tile_sample_min_size = sample_size (Kiln takes the first entry of a list,
// where diffusers' arithmetic on the list would fail), tile_latent_min_size = int(sample / 2^(n_blocks - 1)),
// overlap factor 0.25.
struct VaeTiling {
    int sample = 0, latent = 0;
    double overlap = 0.25;
    static VaeTiling from(const VaeConfig& c, int tile_sample_size = 0);
    // tiled_decode: stride in latents, blend and row limit in pixels.
    int decode_stride() const { return (int)(latent * (1 - overlap)); }
    int decode_blend() const { return (int)(sample * overlap); }
    // _tiled_encode: stride in pixels, blend and row limit in latents.
    int encode_stride() const { return (int)(sample * (1 - overlap)); }
    int encode_blend() const { return (int)(latent * overlap); }
};

// The tile loop of tiled_decode / _tiled_encode on a host tensor x [B, C, H, W]: tiles x[:, :, i:i+tile, j:j+tile]
// for i, j in range(0, H or W, stride), each mapped by `fn` to named outputs [B, C', h', w'], then blended in place
// (blend_v with the tile above, blend_h with the tile left, both already blended) and cropped to
// [:row_limit, :row_limit] before concatenation. `fn` is called grouped by tile shape, largest first.
using TileFn = std::function<std::map<std::string, Tensor>(const Tensor& tile)>;
std::map<std::string, Tensor> run_tiles(const Tensor& x, int tile, int stride, int blend, int row_limit,
                                        const TileFn& fn);

// Shared with the DC-AE runner (dc_ae_runner.h). x[b0:b0+nb, :, i:i+h, j:j+w] of an f32 [B, C, H, W] tensor.
Tensor crop_nchw(const Tensor& x, int64_t b0, int64_t nb, int64_t i, int64_t j, int64_t h, int64_t w);
// Distinct tile shapes (h, w) of the tile loop over an H x W input, largest first.
std::vector<std::pair<int64_t, int64_t>> tile_shapes(int64_t H, int64_t W, int tile, int stride);
// Slices along the batch (use_slicing and B > 1), else one call; outputs concatenated along the batch.
std::map<std::string, Tensor> run_sliced(const Tensor& x, bool slice, const TileFn& fn);
// The one resident plan of a VAE runner (the KL VAE's or the DC-AE's): the graph `build` makes for decode or encode
// at one input shape and, on a device, its executor (full where there is nothing to replay). A call with another
// direction or shape replaces it, freeing the old one first; peak() folds in every plan's memory figures.
class VaePlans {
public:
    using BuildFn = std::function<void(Builder&, bool decode, const Shape& in)>;
    // ctx == nullptr runs the CPU reference executor. ws must outlive this.
    VaePlans(vk::Context* ctx, const WeightStore& ws, exec::Mode mode, BuildFn build);
    ~VaePlans();
    void plan(bool decode, const Shape& in);
    // x as the graph input `in` (planned as needed) -> the outputs `outs` (on the CPU: every output).
    std::map<std::string, Tensor> run(bool decode, const char* in, const Tensor& x,
                                      const std::vector<std::string>& outs);
    const exec::Counters& peak() const { return peak_; }

private:
    struct Plan;
    vk::Context* ctx_;
    const WeightStore& ws_;
    exec::Mode mode_;
    BuildFn build_;
    std::unique_ptr<Plan> plan_;
    exec::Counters peak_;
};

class VaeRunner {
public:
    // ctx == nullptr runs the CPU reference executor.
    VaeRunner(vk::Context* ctx, const ModelSource& src, const std::string& component, VaeOptions opt = {});
    VaeRunner(vk::Context* ctx, std::unique_ptr<WeightStore> weights, const nlohmann::json& config,
              VaeOptions opt = {});
    ~VaeRunner();

    // decode(): latents [B, L, h, w] (already / scaling_factor) -> decoded [B, out, 2^(n-1) h, 2^(n-1) w].
    Tensor decode(const Tensor& latents);
    // encode(): image [B, in, H, W] -> latent_mean and latent_logvar (clamped to [-30, 20] after blending).
    std::map<std::string, Tensor> encode(const Tensor& image);
    // Plans (without running) the executor decode(latents of this shape) starts with; for planning up front.
    void prepare_decode(const Shape& latents);
    // Plans every executor decode(latents of this shape) would use, runs nothing; returns peak_counters().
    exec::Counters plan_decode(const Shape& latents);

    const VaeConfig& config() const { return cfg_; }
    // AutoencoderKLFlux2: its bn statistics (read at construction), for flux2_unpack_denormalize before decode()
    // and flux2_patchify_normalize after encode() (vae.h). kiln::Error for a VAE without them.
    const Flux2LatentNorm& latent_norm() const;
    const VaeTiling& tiling() const { return tiling_; }
    // Per counter, the largest over the executors planned so far (one is resident at a time).
    const exec::Counters& peak_counters() const { return plans_.peak(); }
    int forwards() const { return forwards_; }  // decoder/encoder runs so far (tiles included)

private:
    std::map<std::string, Tensor> forward(bool decode, const Tensor& x);
    std::map<std::string, Tensor> run_one(bool decode, const Tensor& x);  // slicing and tiling of one call

    std::unique_ptr<WeightStore> ws_;
    VaeConfig cfg_;
    VaeOptions opt_;
    VaeTiling tiling_;
    std::optional<Flux2LatentNorm> norm_;
    VaePlans plans_;
    int forwards_ = 0;
};

}  // namespace kiln::models
