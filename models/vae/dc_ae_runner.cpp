#include "models/vae/dc_ae_runner.h"

#include <algorithm>
#include <cstring>

#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"

namespace kiln::models {

DcAeTiling DcAeTiling::from(const DcAeConfig& c, int tile_sample_size, int tile_sample_stride) {
    DcAeTiling t;
    t.ratio = c.compression();
    // A tile size alone keeps diffusers' stride / tile of 448 / 512, on multiples of r (at least one r).
    if (tile_sample_size > 0)
        t.sample = tile_sample_size, t.stride = std::max(t.ratio, tile_sample_size * 7 / 8 / t.ratio * t.ratio);
    if (tile_sample_stride > 0) t.stride = tile_sample_stride;
    // diffusers mixes pixel and latent units (stride // r beside stride px): off multiples of r its tiles would
    // overlap or leave gaps, so Kiln asks for multiples.
    KILN_CHECK(t.sample % t.ratio == 0 && t.stride % t.ratio == 0 && t.stride > 0 && t.stride <= t.sample,
               "DC-AE tiling: a tile of ", t.sample, " px with stride ", t.stride, " px; both must be multiples of ",
               t.ratio, " px with 0 < stride <= tile");
    return t;
}

DcAeRunner::DcAeRunner(vk::Context* ctx, const ModelSource& src, const std::string& component, VaeOptions opt)
    : DcAeRunner(ctx, src.weights(component), src.config(component), opt) {
    const ComponentClass* c = find_component_class(src.class_of(component));
    KILN_CHECK(c && c->kind == ComponentKind::dc_ae, src.path(), ": component '", component, "' is ",
               src.class_of(component), ", not ", class_name(ComponentKind::dc_ae));
}

DcAeRunner::DcAeRunner(vk::Context* ctx, std::unique_ptr<WeightStore> weights, const nlohmann::json& config,
                       VaeOptions opt)
    : ws_(std::move(weights)),
      cfg_(DcAeConfig::from_json(config)),
      opt_(opt),
      plans_(ctx, *ws_, opt.mode, [this](Builder& b, bool decode, const Shape& in) {
          if (decode)
              build_dc_ae_decoder(b, cfg_, (int)in[0], (int)in[2], (int)in[3]);
          else
              build_dc_ae_encoder(b, cfg_, (int)in[0], (int)in[2], (int)in[3]);
      }) {
    if (opt_.tiled) tiling_ = DcAeTiling::from(cfg_, opt_.tile_sample_size, opt_.tile_sample_stride);
}

DcAeRunner::~DcAeRunner() = default;

Tensor DcAeRunner::forward(bool decode, const Tensor& x) {
    ++forwards_;
    const char* out = decode ? "decoded" : "latent";
    return plans_.run(decode, decode ? "latents" : "image", x, {out}).at(out);
}

namespace {
// F.pad(tile, (0, pad_w, 0, pad_h)) up to multiples of r: zeros on the bottom and the right.
Tensor pad_to_multiple(const Tensor& t, int r) {
    const int64_t H = t.shape[2], W = t.shape[3], PH = (H + r - 1) / r * r, PW = (W + r - 1) / r * r;
    if (PH == H && PW == W) return t;
    Tensor p(DType::f32, {t.shape[0], t.shape[1], PH, PW});  // zero-filled
    for (int64_t bc = 0; bc < t.shape[0] * t.shape[1]; ++bc)
        for (int64_t y = 0; y < H; ++y)
            std::memcpy(p.data<float>() + (bc * PH + y) * PW, t.data<float>() + (bc * H + y) * W, (size_t)W * 4);
    return p;
}
}  // namespace

std::map<std::string, Tensor> DcAeRunner::run_one(bool decode, const Tensor& x) {
    const int64_t H = x.shape[2], W = x.shape[3];
    const DcAeTiling& t = tiling_;
    const char* name = decode ? "decoded" : "latent";
    if (decode && opt_.tiled && (W > t.latent() || H > t.latent()))
        return run_tiles(x, t.latent(), t.latent_stride(), t.decode_blend(), t.stride, [&](const Tensor& tile) {
            return std::map<std::string, Tensor>{{name, forward(true, tile)}};
        });
    if (!decode && opt_.tiled && (W > t.sample || H > t.sample)) {
        auto out = run_tiles(x, t.sample, t.stride, t.encode_blend(), t.latent_stride(), [&](const Tensor& tile) {
            return std::map<std::string, Tensor>{{name, forward(false, pad_to_multiple(tile, t.ratio))}};
        });
        // [:, :, :H // r, :W // r]
        const Tensor& z = out.at(name);
        out[name] = crop_nchw(z, 0, z.shape[0], 0, 0, std::min<int64_t>(z.shape[2], H / t.ratio),
                              std::min<int64_t>(z.shape[3], W / t.ratio));
        return out;
    }
    return {{name, forward(decode, x)}};
}

Tensor DcAeRunner::decode(const Tensor& latents) {
    KILN_CHECK(latents.shape.size() == 4 && latents.shape[1] == cfg_.latent_channels,
               "DC-AE decode: latents must be [B, ", cfg_.latent_channels, ", h, w], got ", shape_str(latents.shape));
    Tensor z = latents.astype(DType::f32);
    return run_sliced(z, opt_.sliced, [&](const Tensor& s) { return run_one(true, s); }).at("decoded");
}

Tensor DcAeRunner::encode(const Tensor& image) {
    KILN_CHECK(image.shape.size() == 4 && image.shape[1] == cfg_.in_channels, "DC-AE encode: image must be [B, ",
               cfg_.in_channels, ", H, W], got ", shape_str(image.shape));
    Tensor x = image.astype(DType::f32);
    return run_sliced(x, opt_.sliced, [&](const Tensor& s) { return run_one(false, s); }).at("latent");
}

void DcAeRunner::prepare_decode(const Shape& latents) {
    KILN_CHECK(latents.size() == 4, "DC-AE decode: latents must be [B, C, h, w], got ", shape_str(latents));
    Shape s = latents;
    if (opt_.sliced) s[0] = 1;
    if (opt_.tiled && (s[2] > tiling_.latent() || s[3] > tiling_.latent()))
        s[2] = std::min<int64_t>(s[2], tiling_.latent()), s[3] = std::min<int64_t>(s[3], tiling_.latent());
    plans_.plan(true, s);
}

exec::Counters DcAeRunner::plan_decode(const Shape& latents) {
    KILN_CHECK(latents.size() == 4, "DC-AE decode: latents must be [B, C, h, w], got ", shape_str(latents));
    Shape s = latents;
    if (opt_.sliced) s[0] = 1;
    if (opt_.tiled && (s[2] > tiling_.latent() || s[3] > tiling_.latent())) {
        for (auto [h, w] : tile_shapes(s[2], s[3], tiling_.latent(), tiling_.latent_stride()))
            plans_.plan(true, {s[0], s[1], h, w});
    } else {
        plans_.plan(true, s);
    }
    return plans_.peak();
}

}  // namespace kiln::models
