#include "models/pipelines/image_input.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"

namespace kiln::models {

namespace {
double sinc(double x) {
    if (x == 0) return 1;
    x *= M_PI;
    return std::sin(x) / x;
}
double lanczos3(double x) { return -3 < x && x < 3 ? sinc(x) * sinc(x / 3) : 0; }

// One pass along an axis of n_in -> n_out samples: for output i, the weights over [first, first + count) of the
// input, as PIL's precompute_coeffs: center (i + 0.5) * scale, support 3 * max(scale, 1), normalised.
struct Taps {
    std::vector<int> first, count;
    std::vector<double> w;  // count-many per output, at stride `support`
    int stride = 0;
};
Taps taps(int n_in, int n_out) {
    const double scale = (double)n_in / n_out, fs = std::max(scale, 1.0), support = 3 * fs;
    Taps t;
    t.stride = (int)std::ceil(support) * 2 + 1;
    t.w.assign((size_t)n_out * t.stride, 0);
    for (int i = 0; i < n_out; ++i) {
        const double center = (i + 0.5) * scale;
        const int lo = std::max((int)(center - support + 0.5), 0), hi = std::min((int)(center + support + 0.5), n_in);
        double sum = 0;
        for (int x = lo; x < hi; ++x) sum += t.w[(size_t)i * t.stride + (x - lo)] = lanczos3((x - center + 0.5) / fs);
        for (int x = lo; x < hi && sum != 0; ++x) t.w[(size_t)i * t.stride + (x - lo)] /= sum;
        t.first.push_back(lo);
        t.count.push_back(hi - lo);
    }
    return t;
}
uint8_t to_u8(double v) { return (uint8_t)std::clamp(std::lround(v), 0L, 255L); }

// PIL's convert("L") of RGB: L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16 (ITU-R 601-2 luma in 16-bit fixed
// point; equal R, G, B give that value back).
std::vector<uint8_t> luma(const Pixels& p) {
    std::vector<uint8_t> l((size_t)p.width * p.height);
    for (size_t i = 0; i < l.size(); ++i) {
        const uint8_t* px = &p.rgba[i * 4];
        l[i] = (uint8_t)((19595u * px[0] + 38470u * px[1] + 7471u * px[2] + 0x8000u) >> 16);
    }
    return l;
}

// F.interpolate(x, (H, W), mode="nearest") of [1, C, h, w]: src = floor(dst * in / out).
Tensor nearest(const Tensor& x, int W, int H) {
    const int C = (int)x.shape[1], h = (int)x.shape[2], w = (int)x.shape[3];
    Tensor f = x.astype(DType::f32), out(DType::f32, {1, C, H, W});
    for (int c = 0; c < C; ++c)
        for (int y = 0; y < H; ++y)
            for (int xx = 0; xx < W; ++xx)
                out.data<float>()[((size_t)c * H + y) * W + xx] =
                    f.data<float>()[((size_t)c * h + (int64_t)y * h / H) * w + (int64_t)xx * w / W];
    return out;
}

void check_tensor(const Tensor& t, int64_t C, const char* name) {
    KILN_CHECK(t.shape.size() == 4 && t.shape[0] == 1 && t.shape[1] == C && t.shape[2] > 0 && t.shape[3] > 0, name,
               ": expected [1, ", C, ", H, W], got ", shape_str(t.shape));
}
}  // namespace

std::vector<uint8_t> resize_lanczos(const std::vector<uint8_t>& src, int w, int h, int channels, int W, int H) {
    KILN_CHECK(w > 0 && h > 0 && W > 0 && H > 0, "resize: ", w, "x", h, " -> ", W, "x", H);
    if (w == W && h == H) return src;
    const Taps tx = taps(w, W), ty = taps(h, H);
    std::vector<uint8_t> mid((size_t)W * h * channels), out((size_t)W * H * channels);
    for (int y = 0; y < h; ++y)  // horizontal pass
        for (int x = 0; x < W; ++x)
            for (int c = 0; c < channels; ++c) {
                double v = 0;
                for (int k = 0; k < tx.count[x]; ++k)
                    v += tx.w[(size_t)x * tx.stride + k] * src[((size_t)y * w + tx.first[x] + k) * channels + c];
                mid[((size_t)y * W + x) * channels + c] = to_u8(v);
            }
    for (int y = 0; y < H; ++y)  // vertical pass
        for (int x = 0; x < W; ++x)
            for (int c = 0; c < channels; ++c) {
                double v = 0;
                for (int k = 0; k < ty.count[y]; ++k)
                    v += ty.w[(size_t)y * ty.stride + k] * mid[((size_t)(ty.first[y] + k) * W + x) * channels + c];
                out[((size_t)y * W + x) * channels + c] = to_u8(v);
            }
    return out;
}

Tensor preprocess_image(const ImageInputs& in, int W, int H) {
    if (!in.image_tensor.bytes.empty()) {
        check_tensor(in.image_tensor, 3, "image tensor");
        Tensor t = nearest(in.image_tensor, W, H);
        // diffusers normalises only a tensor with no value below 0 (do_normalize and images.min() >= 0)
        const float* p = t.data<float>();
        if (std::all_of(p, p + t.numel(), [](float v) { return v >= 0; }))
            for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 2.f * p[i] - 1.f;
        return t;
    }
    const Pixels& px = in.image;
    std::vector<uint8_t> rgb((size_t)px.width * px.height * 3);
    for (size_t i = 0; i < (size_t)px.width * px.height; ++i)
        for (int c = 0; c < 3; ++c) rgb[i * 3 + c] = px.rgba[i * 4 + c];
    rgb = resize_lanczos(rgb, px.width, px.height, 3, W, H);
    Tensor t(DType::f32, {1, 3, H, W});
    for (int c = 0; c < 3; ++c)
        for (size_t i = 0; i < (size_t)W * H; ++i)  // np.array(img) / 255, then 2x - 1, in float32
            t.data<float>()[(size_t)c * W * H + i] = 2.f * ((float)rgb[i * 3 + c] / 255.f) - 1.f;
    return t;
}

Tensor preprocess_mask(const ImageInputs& in, int W, int H) {
    Tensor t(DType::f32, {1, 1, H, W});
    if (!in.mask_tensor.bytes.empty()) {
        check_tensor(in.mask_tensor, 1, "mask tensor");
        t = nearest(in.mask_tensor, W, H);
    } else {
        const std::vector<uint8_t> l = resize_lanczos(luma(in.mask), in.mask.width, in.mask.height, 1, W, H);
        for (size_t i = 0; i < l.size(); ++i) t.data<float>()[i] = (float)l[i] / 255.f;
    }
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = t.data<float>()[i] < 0.5f ? 0.f : 1.f;
    return t;
}

int strength_t_start(int steps, double strength) {
    const double init_timestep = std::min(steps * strength, (double)steps);
    return (int)std::max(steps - init_timestep, 0.0);
}

std::vector<float> mask_latents(const Tensor& mask, int B, int C, int h, int w) {
    const int H = (int)mask.shape[2], W = (int)mask.shape[3];
    std::vector<float> m((size_t)B * C * h * w);
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < C; ++c)
            for (int i = 0; i < h; ++i)
                for (int j = 0; j < w; ++j)
                    m[(((size_t)b * C + c) * h + i) * w + j] =
                        mask.data<float>()[(size_t)((int64_t)i * H / h) * W + (int64_t)j * W / w];
    return m;
}

}  // namespace kiln::models
