#include "models/vae/vae_runner.h"

#include <algorithm>
#include <cstring>

#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"

namespace kiln::models {

VaeTiling VaeTiling::from(const VaeConfig& c, int tile_sample_size) {
    VaeTiling t;
    t.sample = tile_sample_size > 0 ? tile_sample_size : c.sample_size;
    t.latent = (int)(t.sample / (double)(1 << ((int)c.block_out.size() - 1)));
    KILN_CHECK(t.latent >= 2, "VAE tiling: a tile of ", t.sample, " px is ", t.latent,
               " latents; it needs at least 2 (tile stride int(latent * 0.75) must be positive)");
    return t;
}

Tensor crop_nchw(const Tensor& x, int64_t b0, int64_t nb, int64_t i, int64_t j, int64_t h, int64_t w) {
    const int64_t C = x.shape[1], H = x.shape[2], W = x.shape[3];
    Tensor t(DType::f32, {nb, C, h, w});
    for (int64_t bc = 0; bc < nb * C; ++bc)
        for (int64_t y = 0; y < h; ++y)
            std::memcpy(t.data<float>() + (bc * h + y) * w, x.data<float>() + ((b0 * C + bc) * H + i + y) * W + j,
                        (size_t)w * 4);
    return t;
}

namespace {
// blend_v: b[:, :, y, :] = a[:, :, -e + y, :] * (1 - y / e) + b[:, :, y, :] * (y / e), e = min(a_h, b_h, extent).
// The weights are Python floats (doubles) that torch applies to f32 tensors as f32.
void blend_v(const Tensor& a, Tensor& b, int64_t extent) {
    const int64_t BC = b.shape[0] * b.shape[1], ah = a.shape[2], bh = b.shape[2], w = b.shape[3];
    const int64_t e = std::min({ah, bh, extent});
    for (int64_t y = 0; y < e; ++y) {
        const float wb = (float)((double)y / (double)e), wa = (float)(1.0 - (double)y / (double)e);
        for (int64_t bc = 0; bc < BC; ++bc) {
            const float* pa = a.data<float>() + (bc * ah + ah - e + y) * w;
            float* pb = b.data<float>() + (bc * bh + y) * w;
            for (int64_t x = 0; x < w; ++x) pb[x] = pa[x] * wa + pb[x] * wb;
        }
    }
}

// blend_h: the same along the last axis, e = min(a_w, b_w, extent).
void blend_h(const Tensor& a, Tensor& b, int64_t extent) {
    const int64_t rows = b.shape[0] * b.shape[1] * b.shape[2], aw = a.shape[3], bw = b.shape[3];
    const int64_t e = std::min({aw, bw, extent});
    for (int64_t x = 0; x < e; ++x) {
        const float wb = (float)((double)x / (double)e), wa = (float)(1.0 - (double)x / (double)e);
        for (int64_t r = 0; r < rows; ++r) {
            float* pb = b.data<float>() + r * bw + x;
            *pb = a.data<float>()[r * aw + aw - e + x] * wa + *pb * wb;
        }
    }
}

std::vector<int64_t> starts(int64_t n, int stride) {
    std::vector<int64_t> s;
    for (int64_t i = 0; i < n; i += stride) s.push_back(i);
    return s;
}
}  // namespace

std::vector<std::pair<int64_t, int64_t>> tile_shapes(int64_t H, int64_t W, int tile, int stride) {
    std::vector<std::pair<int64_t, int64_t>> s;
    for (int64_t i : starts(H, stride))
        for (int64_t j : starts(W, stride))
            s.push_back({std::min<int64_t>(tile, H - i), std::min<int64_t>(tile, W - j)});
    std::sort(s.begin(), s.end(), std::greater<>());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
}

namespace {
Tensor concat_batch(const std::vector<Tensor>& parts) {
    Shape s = parts[0].shape;
    s[0] = 0;
    for (auto& p : parts) s[0] += p.shape[0];
    Tensor t(DType::f32, s);
    size_t off = 0;
    for (auto& p : parts) {
        std::memcpy(t.bytes.data() + off, p.bytes.data(), p.bytes.size());
        off += p.bytes.size();
    }
    return t;
}
}  // namespace

std::map<std::string, Tensor> run_tiles(const Tensor& x, int tile, int stride, int blend, int row_limit,
                                        const TileFn& fn) {
    KILN_CHECK(x.shape.size() == 4 && x.dtype == DType::f32, "run_tiles: x must be f32 [B, C, H, W]");
    KILN_CHECK(tile > 0 && stride > 0 && row_limit > 0, "run_tiles: tile ", tile, ", stride ", stride, ", row limit ",
               row_limit);
    const int64_t B = x.shape[0], H = x.shape[2], W = x.shape[3];
    const auto is = starts(H, stride), js = starts(W, stride);
    std::vector<std::vector<std::map<std::string, Tensor>>> rows(is.size(),
                                                                 std::vector<std::map<std::string, Tensor>>(js.size()));
    for (auto [th, tw] : tile_shapes(H, W, tile, stride))  // grouped by shape: one executor per group
        for (size_t r = 0; r < is.size(); ++r)
            for (size_t c = 0; c < js.size(); ++c)
                if (std::min<int64_t>(tile, H - is[r]) == th && std::min<int64_t>(tile, W - js[c]) == tw)
                    rows[r][c] = fn(crop_nchw(x, 0, B, is[r], js[c], th, tw));
    std::map<std::string, Tensor> out;
    for (auto& [name, t0] : rows[0][0]) {
        // In place and in order, as diffusers mutates rows[i][j]: the neighbours are already blended.
        for (size_t r = 0; r < is.size(); ++r)
            for (size_t c = 0; c < js.size(); ++c) {
                Tensor& t = rows[r][c].at(name);
                if (r > 0) blend_v(rows[r - 1][c].at(name), t, blend);
                if (c > 0) blend_h(rows[r][c - 1].at(name), t, blend);
            }
        // tile[:, :, :row_limit, :row_limit], concatenated along W within a row, rows along H.
        int64_t OH = 0, OW = 0;
        for (size_t r = 0; r < is.size(); ++r) OH += std::min<int64_t>(row_limit, rows[r][0].at(name).shape[2]);
        for (size_t c = 0; c < js.size(); ++c) OW += std::min<int64_t>(row_limit, rows[0][c].at(name).shape[3]);
        const int64_t BC = t0.shape[0] * t0.shape[1];
        Tensor o(DType::f32, {t0.shape[0], t0.shape[1], OH, OW});
        int64_t y0 = 0;
        for (size_t r = 0; r < is.size(); ++r) {
            int64_t x0 = 0, h = 0;
            for (size_t c = 0; c < js.size(); ++c) {
                const Tensor& t = rows[r][c].at(name);
                const int64_t th = t.shape[2], tw = t.shape[3];
                h = std::min<int64_t>(row_limit, th);
                const int64_t w = std::min<int64_t>(row_limit, tw);
                for (int64_t bc = 0; bc < BC; ++bc)
                    for (int64_t y = 0; y < h; ++y)
                        std::memcpy(o.data<float>() + (bc * OH + y0 + y) * OW + x0,
                                    t.data<float>() + (bc * th + y) * tw, (size_t)w * 4);
                x0 += w;
            }
            y0 += h;
        }
        out[name] = std::move(o);
    }
    return out;
}

struct VaePlans::Plan {
    bool decode = true;
    Shape in;
    ir::Graph g;
    std::unique_ptr<Builder> b;
    std::unique_ptr<exec::Executor> ex;  // null on the CPU
};

VaePlans::VaePlans(vk::Context* ctx, const WeightStore& ws, exec::Mode mode, BuildFn build)
    : ctx_(ctx), ws_(ws), mode_(mode), build_(std::move(build)) {}

VaePlans::~VaePlans() = default;

void VaePlans::plan(bool decode, const Shape& in) {
    if (plan_ && plan_->decode == decode && plan_->in == in) return;
    plan_.reset();  // free the previous executor's memory before planning the next
    auto p = std::make_unique<Plan>();
    p->decode = decode;
    p->in = in;
    p->b = std::make_unique<Builder>(p->g, ws_);
    build_(*p->b, decode, in);
    if (ctx_) {
        const exec::Mode mode = mode_ == exec::Mode::regional && p->g.regions().size() < 2 ? exec::Mode::full : mode_;
        p->ex = std::make_unique<exec::Executor>(*ctx_, p->g, p->b->weight_fn(), mode);
        const exec::Counters& c = p->ex->counters();
        peak_.activation_bytes_planned = std::max(peak_.activation_bytes_planned, c.activation_bytes_planned);
        peak_.activation_bytes_naive = std::max(peak_.activation_bytes_naive, c.activation_bytes_naive);
        peak_.weight_bytes = std::max(peak_.weight_bytes, c.weight_bytes);
        peak_.device_bytes = std::max(peak_.device_bytes, c.device_bytes);
    }
    plan_ = std::move(p);
}

std::map<std::string, Tensor> VaePlans::run(bool decode, const char* in, const Tensor& x,
                                            const std::vector<std::string>& outs) {
    plan(decode, x.shape);
    Plan& p = *plan_;
    if (!p.ex) return cpu::run(p.g, {{in, x}}, cpu_weights(ws_, p.b->constants()));
    p.ex->set_input(in, x);
    p.ex->run();
    std::map<std::string, Tensor> out;
    for (const std::string& name : outs) out[name] = p.ex->output(name);
    return out;
}

VaeRunner::VaeRunner(vk::Context* ctx, const ModelSource& src, const std::string& component, VaeOptions opt)
    : VaeRunner(ctx, src.weights(component), src.config(component), opt) {
    const ComponentClass* c = find_component_class(src.class_of(component));
    KILN_CHECK(c && (c->kind == ComponentKind::vae || c->kind == ComponentKind::vae_flux2), src.path(), ": component '",
               component, "' is ", src.class_of(component), ", not ", class_name(ComponentKind::vae), " or ",
               class_name(ComponentKind::vae_flux2));
}

VaeRunner::VaeRunner(vk::Context* ctx, std::unique_ptr<WeightStore> weights, const nlohmann::json& config,
                     VaeOptions opt)
    : ws_(std::move(weights)),
      cfg_(VaeConfig::from_json(config)),
      opt_(opt),
      plans_(ctx, *ws_, opt.mode, [this](Builder& b, bool decode, const Shape& in) {
          if (decode)
              build_vae_decoder(b, cfg_, (int)in[0], (int)in[2], (int)in[3]);
          else
              build_vae_encoder(b, cfg_, (int)in[0], (int)in[2], (int)in[3]);
      }) {
    if (opt_.tiled) tiling_ = VaeTiling::from(cfg_, opt_.tile_sample_size);
    if (cfg_.latent_bn) norm_ = Flux2LatentNorm::from(*ws_, cfg_);
}

const Flux2LatentNorm& VaeRunner::latent_norm() const {
    KILN_CHECK(norm_, class_name(ComponentKind::vae), ": no latent batch-norm statistics (those are ",
               class_name(ComponentKind::vae_flux2), "'s)");
    return *norm_;
}

VaeRunner::~VaeRunner() = default;

std::map<std::string, Tensor> VaeRunner::forward(bool decode, const Tensor& x) {
    ++forwards_;
    return plans_.run(
        decode, decode ? "latents" : "image", x,
        decode ? std::vector<std::string>{"decoded"} : std::vector<std::string>{"latent_mean", "latent_logvar_raw"});
}

std::map<std::string, Tensor> VaeRunner::run_one(bool decode, const Tensor& x) {
    const int64_t H = x.shape[2], W = x.shape[3];
    auto fn = [&](const Tensor& tile) { return forward(decode, tile); };
    if (decode && opt_.tiled && (W > tiling_.latent || H > tiling_.latent))
        return run_tiles(x, tiling_.latent, tiling_.decode_stride(), tiling_.decode_blend(),
                         tiling_.sample - tiling_.decode_blend(), fn);
    if (!decode && opt_.tiled && (W > tiling_.sample || H > tiling_.sample))
        return run_tiles(x, tiling_.sample, tiling_.encode_stride(), tiling_.encode_blend(),
                         tiling_.latent - tiling_.encode_blend(), fn);
    return forward(decode, x);
}

std::map<std::string, Tensor> run_sliced(const Tensor& x, bool slice,
                                         const std::function<std::map<std::string, Tensor>(const Tensor&)>& fn) {
    const int64_t B = x.shape[0];
    if (!slice || B == 1) return fn(x);
    std::map<std::string, std::vector<Tensor>> parts;
    for (int64_t b = 0; b < B; ++b)
        for (auto& [name, t] : fn(crop_nchw(x, b, 1, 0, 0, x.shape[2], x.shape[3])))
            parts[name].push_back(std::move(t));
    std::map<std::string, Tensor> out;
    for (auto& [name, p] : parts) out[name] = concat_batch(p);
    return out;
}

Tensor VaeRunner::decode(const Tensor& latents) {
    KILN_CHECK(latents.shape.size() == 4 && latents.shape[1] == cfg_.latent_channels,
               "VAE decode: latents must be [B, ", cfg_.latent_channels, ", h, w], got ", shape_str(latents.shape));
    Tensor z = latents.astype(DType::f32);
    return run_sliced(z, opt_.sliced, [&](const Tensor& s) { return run_one(true, s); }).at("decoded");
}

std::map<std::string, Tensor> VaeRunner::encode(const Tensor& image) {
    KILN_CHECK(image.shape.size() == 4 && image.shape[1] == cfg_.in_channels, "VAE encode: image must be [B, ",
               cfg_.in_channels, ", H, W], got ", shape_str(image.shape));
    Tensor x = image.astype(DType::f32);
    auto out = run_sliced(x, opt_.sliced, [&](const Tensor& s) { return run_one(false, s); });
    // DiagonalGaussianDistribution on the (blended) moments: logvar clamped to [-30, 20].
    Tensor lv = out.at("latent_logvar_raw");
    for (int64_t i = 0; i < lv.numel(); ++i) lv.data<float>()[i] = std::clamp(lv.data<float>()[i], -30.f, 20.f);
    out.erase("latent_logvar_raw");
    out["latent_logvar"] = lv;
    return out;
}

void VaeRunner::prepare_decode(const Shape& latents) {
    KILN_CHECK(latents.size() == 4, "VAE decode: latents must be [B, C, h, w], got ", shape_str(latents));
    Shape s = latents;
    if (opt_.sliced) s[0] = 1;
    if (opt_.tiled && (s[2] > tiling_.latent || s[3] > tiling_.latent))
        s[2] = std::min<int64_t>(s[2], tiling_.latent), s[3] = std::min<int64_t>(s[3], tiling_.latent);
    plans_.plan(true, s);
}

exec::Counters VaeRunner::plan_decode(const Shape& latents) {
    KILN_CHECK(latents.size() == 4, "VAE decode: latents must be [B, C, h, w], got ", shape_str(latents));
    Shape s = latents;
    if (opt_.sliced) s[0] = 1;
    if (opt_.tiled && (s[2] > tiling_.latent || s[3] > tiling_.latent)) {
        for (auto [h, w] : tile_shapes(s[2], s[3], tiling_.latent, tiling_.decode_stride()))
            plans_.plan(true, {s[0], s[1], h, w});
    } else {
        plans_.plan(true, s);
    }
    return plans_.peak();
}

}  // namespace kiln::models
