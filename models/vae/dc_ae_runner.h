#pragma once
// AutoencoderDC decode / encode with diffusers' memory options, as VaeRunner does for the KL VAE: enable_tiling()
// (AutoencoderDC.tiled_decode / tiled_encode) and enable_slicing(). The switches are VaeOptions' (--vae-tiling,
// --vae-tile): one executor is resident at a time, tiles run grouped by shape.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/core/source.h"
#include "models/vae/dc_ae.h"
#include "models/vae/vae_runner.h"
#include "runtime/exec/executor.h"

namespace kiln::models {

// AutoencoderDC's tile geometry (enable_tiling with square tiles): tile_sample_min 512 px, tile_sample_stride
// 448 px by default. Decode: latent tiles of min / r with stride stride / r (r = the compression), blended over
// min - stride px, each cropped to stride px. Encode: pixel tiles of min with stride `stride`, each zero-padded
// (bottom/right) to a multiple of r, blended over (min - stride) / r latents, cropped to stride / r latents; the
// result is cropped to H / r x W / r.
struct DcAeTiling {
    int sample = 512, stride = 448, ratio = 32;
    // tile_sample_size / tile_sample_stride as VaeOptions gives them (0: the defaults above; a size alone: stride
    // 7/8 of it, as 448 / 512, down to a multiple of r, at least r).
    static DcAeTiling from(const DcAeConfig& c, int tile_sample_size = 0, int tile_sample_stride = 0);
    int latent() const { return sample / ratio; }
    int latent_stride() const { return stride / ratio; }
    int decode_blend() const { return sample - stride; }             // px
    int encode_blend() const { return latent() - latent_stride(); }  // latents
};

class DcAeRunner {
public:
    // ctx == nullptr runs the CPU reference executor.
    DcAeRunner(vk::Context* ctx, const ModelSource& src, const std::string& component, VaeOptions opt = {});
    DcAeRunner(vk::Context* ctx, std::unique_ptr<WeightStore> weights, const nlohmann::json& config,
               VaeOptions opt = {});
    ~DcAeRunner();

    // latents [B, L, h, w] (the pipeline divides by scaling_factor first) -> decoded [B, in, r h, r w], unclamped.
    Tensor decode(const Tensor& latents);
    // image [B, in, H, W] in [-1, 1] -> latent [B, L, H / r, W / r] (deterministic; not scaled).
    Tensor encode(const Tensor& image);
    // Plans (without running) the executor decode(latents of this shape) starts with; for planning up front.
    void prepare_decode(const Shape& latents);
    // Plans every executor decode(latents of this shape) would use, runs nothing; returns peak_counters().
    exec::Counters plan_decode(const Shape& latents);

    const DcAeConfig& config() const { return cfg_; }
    const DcAeTiling& tiling() const { return tiling_; }
    const exec::Counters& peak_counters() const { return plans_.peak(); }
    int forwards() const { return forwards_; }  // decoder/encoder runs so far (tiles included)

private:
    Tensor forward(bool decode, const Tensor& x);
    std::map<std::string, Tensor> run_one(bool decode, const Tensor& x);  // tiling of one call

    std::unique_ptr<WeightStore> ws_;
    DcAeConfig cfg_;
    VaeOptions opt_;
    DcAeTiling tiling_;
    VaePlans plans_;
    int forwards_ = 0;
};

}  // namespace kiln::models
