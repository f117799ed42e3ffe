#include "models/pipelines/t2i_tokens.h"

#include "models/vae/t2i_decoder.h"
#include "models/vae/vae.h"

namespace kiln::models {

namespace {
// The index pair of the 2x2 packing, read one way (pack) or the other.
std::vector<float> repack_2x2(const float* src, int B, int C, int h, int w, bool pack) {
    std::vector<float> out((size_t)B * C * h * w);
    const int ph = h / 2, pw = w / 2;
    for (int b = 0; b < B; ++b)
        for (int i = 0; i < ph; ++i)
            for (int j = 0; j < pw; ++j)
                for (int c = 0; c < C; ++c)
                    for (int dy = 0; dy < 2; ++dy)
                        for (int dx = 0; dx < 2; ++dx) {
                            const size_t packed =
                                (((size_t)b * ph * pw + (size_t)i * pw + j) * C + c) * 4 + dy * 2 + dx;
                            const size_t nchw = (((size_t)b * C + c) * h + 2 * i + dy) * w + 2 * j + dx;
                            if (pack)
                                out[packed] = src[nchw];
                            else
                                out[nchw] = src[packed];
                        }
    return out;
}
}  // namespace

std::vector<float> pack_2x2(const float* x, int B, int C, int h, int w) { return repack_2x2(x, B, C, h, w, true); }

std::vector<float> klein_decode_input(LatentDecoder& vx, const std::vector<float>& x, const Shape& tokens, int h,
                                      int w) {
    const Tensor z = flux2_unpack_denormalize(Tensor::from_f32(tokens, x), vx.kl().latent_norm(), h / 2, w / 2);
    return std::vector<float>(z.data<float>(), z.data<float>() + z.numel());
}

std::vector<float> channels_last(const std::vector<float>& x, int64_t B, int64_t C, int64_t S) {
    std::vector<float> out(x.size());
    for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t s = 0; s < S; ++s) out[(size_t)((b * S + s) * C + c)] = x[(size_t)((b * C + c) * S + s)];
    return out;
}
std::vector<float> unpack_2x2(const float* p, int B, int C, int h, int w) { return repack_2x2(p, B, C, h, w, false); }

void flux_inputs(std::map<std::string, Tensor>& in, const T2IPlan& p, int64_t L_txt, int BB) {
    const int ph = p.latent_h / 2, pw = p.latent_w / 2;
    const bool klein = p.family->patchified_noise;
    const int n = klein ? 4 : 3;
    Tensor img(DType::f32, {ph * pw, n});
    for (int i = 0; i < ph; ++i)
        for (int j = 0; j < pw; ++j) {
            float* id = img.data<float>() + ((size_t)i * pw + j) * n;
            id[1] = (float)i, id[2] = (float)j;  // axis 0 (and klein's axis 3) stay 0
        }
    in["img_ids"] = img;
    in["txt_ids"] = Tensor(DType::f32, {L_txt, n});
    if (klein) {
        for (int64_t l = 0; l < L_txt; ++l) in["txt_ids"].data<float>()[l * n + 3] = (float)l;
        return;
    }
    Tensor g(DType::f32, {BB});
    for (int b = 0; b < BB; ++b) g.data<float>()[b] = (float)p.guidance;
    in["guidance"] = g;
}

}  // namespace kiln::models
