// The DC-AE encoder over configurations the two diffusers fixtures do not reach: stage widths that stay equal, double,
// quadruple or halve between stages, other attention head dims and multiscale kernels, several blocks per stage (the
// JIT replays them), batch 2, both downsample types, weights stored as f16. The reference is AutoencoderDC.encode
// written out plainly here from diffusers' autoencoder_dc.py (Encoder, ResBlock, EfficientViTBlock =
// SanaMultiscaleLinearAttention + GLUMBConv, DCDownBlock2d), in double, on the same weights; it is first held against
// diffusers' own outputs on the fixtures, then Kiln's CPU reference and Vulkan (every JIT mode, f32 and f16 storage)
// against it.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "converter/convert.h"
#include "models/core/forward.h"
#include "models/vae/dc_ae.h"
#include "models/vae/dc_ae_runner.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A [B, C, H, W] array in double.
struct Arr {
    int64_t B = 0, C = 0, H = 0, W = 0;
    std::vector<double> v;
    Arr() = default;
    Arr(int64_t b, int64_t c, int64_t h, int64_t w) : B(b), C(c), H(h), W(w), v((size_t)(b * c * h * w), 0.0) {}
    double& at(int64_t b, int64_t c, int64_t y, int64_t x) { return v[(size_t)(((b * C + c) * H + y) * W + x)]; }
    double at(int64_t b, int64_t c, int64_t y, int64_t x) const { return v[(size_t)(((b * C + c) * H + y) * W + x)]; }
};

using Weights = std::map<std::string, Tensor>;  // f32

const Tensor& weight(const Weights& w, const std::string& name) {
    auto it = w.find(name);
    if (it == w.end()) FAIL("the reference reads " << name << ", which the weights lack");
    return it->second;
}

// nn.Conv2d(C, O, k, stride, padding=k // 2, groups), weight [O, C / groups, k, k], optional bias.
Arr conv(const Arr& x, const Weights& ws, const std::string& name, int stride = 1, int groups = 1, bool bias = true) {
    const Tensor& w = weight(ws, name + ".weight");
    const int64_t O = w.shape[0], Cg = w.shape[1], k = w.shape[2], pad = k / 2;
    REQUIRE(Cg * groups == x.C);
    const int64_t HO = (x.H + 2 * pad - k) / stride + 1, WO = (x.W + 2 * pad - k) / stride + 1;
    Arr y(x.B, O, HO, WO);
    const float* wp = w.data<float>();
    const float* bp = bias ? weight(ws, name + ".bias").data<float>() : nullptr;
    for (int64_t b = 0; b < x.B; ++b)
        for (int64_t o = 0; o < O; ++o) {
            const int64_t c0 = o / (O / groups) * Cg;
            for (int64_t i = 0; i < HO; ++i)
                for (int64_t j = 0; j < WO; ++j) {
                    double acc = bp ? bp[o] : 0.0;
                    for (int64_t c = 0; c < Cg; ++c)
                        for (int64_t ky = 0; ky < k; ++ky)
                            for (int64_t kx = 0; kx < k; ++kx) {
                                const int64_t iy = i * stride - pad + ky, ix = j * stride - pad + kx;
                                if (iy < 0 || iy >= x.H || ix < 0 || ix >= x.W) continue;
                                acc += x.at(b, c0 + c, iy, ix) * wp[((o * Cg + c) * k + ky) * k + kx];
                            }
                    y.at(b, o, i, j) = acc;
                }
        }
    return y;
}

// nn.Linear without bias over the channels of every pixel (x.movedim(1, -1) @ W^T), weight [O, C].
Arr linear(const Arr& x, const Weights& ws, const std::string& name) {
    const Tensor& w = weight(ws, name + ".weight");
    const int64_t O = w.shape[0];
    REQUIRE(w.shape[1] == x.C);
    Arr y(x.B, O, x.H, x.W);
    for (int64_t b = 0; b < x.B; ++b)
        for (int64_t o = 0; o < O; ++o)
            for (int64_t i = 0; i < x.H; ++i)
                for (int64_t j = 0; j < x.W; ++j) {
                    double acc = 0;
                    for (int64_t c = 0; c < x.C; ++c) acc += x.at(b, c, i, j) * w.data<float>()[o * x.C + c];
                    y.at(b, o, i, j) = acc;
                }
    return y;
}

// diffusers RMSNorm(C, eps=1e-5, elementwise_affine, bias) over the channels of every pixel.
Arr rms_norm(Arr x, const Weights& ws, const std::string& name) {
    const float* w = weight(ws, name + ".weight").data<float>();
    const float* bias = weight(ws, name + ".bias").data<float>();
    for (int64_t b = 0; b < x.B; ++b)
        for (int64_t i = 0; i < x.H; ++i)
            for (int64_t j = 0; j < x.W; ++j) {
                double ms = 0;
                for (int64_t c = 0; c < x.C; ++c) ms += x.at(b, c, i, j) * x.at(b, c, i, j);
                const double r = 1.0 / std::sqrt(ms / (double)x.C + 1e-5);
                for (int64_t c = 0; c < x.C; ++c) x.at(b, c, i, j) = x.at(b, c, i, j) * r * w[c] + bias[c];
            }
    return x;
}

Arr silu(Arr x) {
    for (double& e : x.v) e = e / (1.0 + std::exp(-e));
    return x;
}

Arr add(Arr a, const Arr& b) {
    REQUIRE(a.v.size() == b.v.size());
    for (size_t i = 0; i < a.v.size(); ++i) a.v[i] += b.v[i];
    return a;
}

// Channels [c0, c0 + n) of x.
Arr channels(const Arr& x, int64_t c0, int64_t n) {
    Arr y(x.B, n, x.H, x.W);
    for (int64_t b = 0; b < x.B; ++b)
        for (int64_t c = 0; c < n; ++c)
            for (int64_t i = 0; i < x.H; ++i)
                for (int64_t j = 0; j < x.W; ++j) y.at(b, c, i, j) = x.at(b, c0 + c, i, j);
    return y;
}

Arr cat_channels(const std::vector<Arr>& xs) {
    int64_t C = 0;
    for (auto& x : xs) C += x.C;
    Arr y(xs[0].B, C, xs[0].H, xs[0].W);
    int64_t c0 = 0;
    for (auto& x : xs) {
        for (int64_t b = 0; b < x.B; ++b)
            for (int64_t c = 0; c < x.C; ++c)
                for (int64_t i = 0; i < x.H; ++i)
                    for (int64_t j = 0; j < x.W; ++j) y.at(b, c0 + c, i, j) = x.at(b, c, i, j);
        c0 += x.C;
    }
    return y;
}

// F.pixel_unshuffle(x, 2): out[b, c * 4 + 2 i + j, y, x] = in[b, c, 2 y + i, 2 x + j].
Arr pixel_unshuffle(const Arr& x) {
    Arr y(x.B, 4 * x.C, x.H / 2, x.W / 2);
    for (int64_t b = 0; b < x.B; ++b)
        for (int64_t c = 0; c < x.C; ++c)
            for (int64_t i = 0; i < 2; ++i)
                for (int64_t j = 0; j < 2; ++j)
                    for (int64_t yy = 0; yy < y.H; ++yy)
                        for (int64_t xx = 0; xx < y.W; ++xx)
                            y.at(b, c * 4 + 2 * i + j, yy, xx) = x.at(b, c, 2 * yy + i, 2 * xx + j);
    return y;
}

// x.unflatten(1, (-1, g)).mean(dim=2).
Arr group_mean(const Arr& x, int64_t g) {
    REQUIRE(g >= 1);
    REQUIRE(x.C % g == 0);
    Arr y(x.B, x.C / g, x.H, x.W);
    for (int64_t b = 0; b < x.B; ++b)
        for (int64_t o = 0; o < y.C; ++o)
            for (int64_t i = 0; i < x.H; ++i)
                for (int64_t j = 0; j < x.W; ++j) {
                    double s = 0;
                    for (int64_t k = 0; k < g; ++k) s += x.at(b, o * g + k, i, j);
                    y.at(b, o, i, j) = s / (double)g;
                }
    return y;
}

// ResBlock(C, C, "rms_norm", "silu"): norm(conv2(silu(conv1(x)))) + x.
Arr res_block(const Arr& x, const Weights& ws, const std::string& p) {
    Arr h = conv(silu(conv(x, ws, p + ".conv1")), ws, p + ".conv2", 1, 1, false);
    return add(rms_norm(h, ws, p + ".norm"), x);
}

// SanaMultiscaleLinearAttention(C, C, attention_head_dim=d, kernel_sizes, norm_type="rms_norm", residual) with
// SanaMultiscaleAttnProcessor2_0: heads = C // d; q|k|v = to_q/to_k/to_v on channels, cat on channels; per kernel
// size SanaMultiscaleAttentionProjection: depthwise kxk (3 inner groups) then 1x1 with 3 heads groups; all cat on
// channels, reshaped [B, G, 3 d, N]: group g is channels [3 d g, 3 d (g + 1)) = q (d), k (d), v (d); relu(q), relu(k);
// out_n = sum_m v_m (k_m . q_n) / (sum_m k_m . q_n + 1e-15); reshaped [B, G d, H, W]; to_out; norm_out; + x.
Arr attention(const Arr& x, const Weights& ws, const std::string& p, int64_t d, const std::vector<int>& scales) {
    Arr qkv = cat_channels({linear(x, ws, p + ".to_q"), linear(x, ws, p + ".to_k"), linear(x, ws, p + ".to_v")});
    const int64_t heads = x.C / d;
    std::vector<Arr> all = {qkv};
    for (size_t i = 0; i < scales.size(); ++i) {
        const std::string m = p + ".to_qkv_multiscale." + std::to_string(i);
        Arr h = conv(qkv, ws, m + ".proj_in", 1, (int)qkv.C, false);
        all.push_back(conv(h, ws, m + ".proj_out", 1, (int)(3 * heads), false));
    }
    const Arr t = cat_channels(all);
    const int64_t G = t.C / (3 * d), N = x.H * x.W;
    Arr o(x.B, G * d, x.H, x.W);
    auto px = [&](const Arr& a, int64_t b, int64_t c, int64_t n) { return a.at(b, c, n / x.W, n % x.W); };
    for (int64_t b = 0; b < x.B; ++b)
        for (int64_t g = 0; g < G; ++g) {
            const int64_t q0 = 3 * d * g, k0 = q0 + d, v0 = q0 + 2 * d;
            for (int64_t n = 0; n < N; ++n) {
                std::vector<double> num((size_t)d, 0.0);
                double den = 0;
                for (int64_t m = 0; m < N; ++m) {
                    double s = 0;
                    for (int64_t c = 0; c < d; ++c)
                        s += std::max(0.0, px(t, b, k0 + c, m)) * std::max(0.0, px(t, b, q0 + c, n));
                    den += s;
                    for (int64_t c = 0; c < d; ++c) num[(size_t)c] += px(t, b, v0 + c, m) * s;
                }
                for (int64_t c = 0; c < d; ++c) o.at(b, g * d + c, n / x.W, n % x.W) = num[(size_t)c] / (den + 1e-15);
            }
        }
    return add(rms_norm(linear(o, ws, p + ".to_out"), ws, p + ".norm_out"), x);
}

// GLUMBConv(C, C, expand_ratio 4, "rms_norm", residual): conv_inverted 1x1 -> silu -> conv_depth 3x3 depthwise ->
// chunk(2): value * silu(gate) -> conv_point 1x1 (no bias) -> norm -> + x.
Arr glumb_conv(const Arr& x, const Weights& ws, const std::string& p) {
    Arr h = silu(conv(x, ws, p + ".conv_inverted"));
    h = conv(h, ws, p + ".conv_depth", 1, (int)h.C);
    Arr v = channels(h, 0, h.C / 2), gate = silu(channels(h, h.C / 2, h.C / 2));
    for (size_t i = 0; i < v.v.size(); ++i) v.v[i] *= gate.v[i];
    return add(rms_norm(conv(v, ws, p + ".conv_point", 1, 1, false), ws, p + ".norm"), x);
}

// DCDownBlock2d(cin, cout, downsample = pixel_unshuffle, shortcut).
Arr down_block(const Arr& x, const Weights& ws, const std::string& p, int64_t cout, bool unshuffle, bool shortcut) {
    Arr h = unshuffle ? pixel_unshuffle(conv(x, ws, p + ".conv")) : conv(x, ws, p + ".conv", 2);
    REQUIRE(h.C == cout);
    if (!shortcut) return h;
    return add(h, group_mean(pixel_unshuffle(x), x.C * 4 / cout));
}

// Encoder.forward, as AutoencoderDC.encode(x).latent.
Arr encode(const Arr& image, const Weights& ws, const json& cfg) {
    const auto ch = cfg["encoder_block_out_channels"].get<std::vector<int64_t>>();
    const auto layers = cfg["encoder_layers_per_block"].get<std::vector<int>>();
    const auto ms = cfg["encoder_qkv_multiscales"].get<std::vector<std::vector<int>>>();
    const json& bt = cfg["encoder_block_types"];
    const int64_t d = cfg["attention_head_dim"].get<int64_t>(), L = cfg["latent_channels"].get<int64_t>();
    const bool unshuffle = cfg["downsample_block_type"] == "pixel_unshuffle";
    const size_t n = ch.size();
    Arr x = layers[0] > 0 ? conv(image, ws, "encoder.conv_in")
                          : down_block(image, ws, "encoder.conv_in", ch[1], unshuffle, false);
    for (size_t i = 0; i < n; ++i) {
        const std::string type = bt.is_string() ? bt.get<std::string>() : bt[i].get<std::string>();
        for (int j = 0; j < layers[i]; ++j) {
            const std::string p = "encoder.down_blocks." + std::to_string(i) + "." + std::to_string(j);
            x = type == "ResBlock" ? res_block(x, ws, p)
                                   : glumb_conv(attention(x, ws, p + ".attn", d, ms[i]), ws, p + ".conv_out");
        }
        if (i + 1 < n && layers[i] > 0)
            x = down_block(x, ws, "encoder.down_blocks." + std::to_string(i) + "." + std::to_string(layers[i]),
                           ch[i + 1], unshuffle, true);
    }
    Arr y = conv(x, ws, "encoder.conv_out");
    if (cfg.value("encoder_out_shortcut", true)) y = add(y, group_mean(x, ch.back() / L));
    return y;
}

Arr of(const Tensor& t) {
    Arr a(t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
    const auto f = t.to_f32();
    a.v.assign(f.begin(), f.end());
    return a;
}

double rel_err(const Tensor& got, const Arr& ref) {
    const auto g = got.to_f32();
    REQUIRE(g.size() == ref.v.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) num += (g[i] - ref.v[i]) * (g[i] - ref.v[i]), den += ref.v[i] * ref.v[i];
    return std::sqrt(num / den);
}

// Every batch item on its own (a mistake in one item must not hide in the batch's norm).
double worst_item_err(const Tensor& got, const Arr& ref) {
    const auto g = got.to_f32();
    REQUIRE(g.size() == ref.v.size());
    const size_t per = g.size() / (size_t)ref.B;
    double worst = 0;
    for (int64_t b = 0; b < ref.B; ++b) {
        double num = 0, den = 0;
        for (size_t i = (size_t)b * per; i < (size_t)(b + 1) * per; ++i)
            num += (g[i] - ref.v[i]) * (g[i] - ref.v[i]), den += ref.v[i] * ref.v[i];
        worst = std::max(worst, std::sqrt(num / den));
    }
    return worst;
}

Weights read_all(const SafeTensors& st) {
    Weights w;
    for (auto& t : st.tensors()) w[t.name] = st.read(t.name).astype(DType::f32);
    return w;
}

// uniform(-1, 1), deterministic per seed.
struct Rng {
    uint64_t s;
    double next() {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        return (double)((s * 2685821657736338717ull) >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
    }
};

// A config varied from diffusers' defaults.
struct Case {
    const char* name;
    std::vector<int> widths, layers;
    std::vector<std::string> types;
    std::vector<std::vector<int>> scales;
    int head_dim, latent;
    bool unshuffle;
    int B, H, W;
};

json config_of(const Case& c) {
    json j = {{"_class_name", "AutoencoderDC"},
              {"in_channels", 3},
              {"latent_channels", c.latent},
              {"attention_head_dim", c.head_dim},
              {"encoder_block_types", c.types},
              {"decoder_block_types", c.types},
              {"encoder_block_out_channels", c.widths},
              {"decoder_block_out_channels", c.widths},
              {"encoder_layers_per_block", c.layers},
              {"decoder_layers_per_block", c.layers},
              {"encoder_qkv_multiscales", c.scales},
              {"decoder_qkv_multiscales", c.scales},
              {"upsample_block_type", c.unshuffle ? "pixel_shuffle" : "interpolate"},
              {"downsample_block_type", c.unshuffle ? "pixel_unshuffle" : "conv"},
              {"decoder_norm_types", "rms_norm"},
              {"decoder_act_fns", "silu"},
              {"encoder_out_shortcut", true},
              {"decoder_in_shortcut", true},
              {"decoder_conv_act_fn", "relu"},
              {"scaling_factor", 0.5}};
    return j;
}

// A diffusers AutoencoderDC folder for the config: every tensor the encoder and decoder read (names and shapes as
// the graphs ask for them), values as diffusers' tests re-initialise them (norm weights 1 + 0.1 u, biases 0.05 u,
// matrices u * sqrt(3 / fan_in)) and rounded to f16, so that f32 and f16 storage hold the same numbers. `dt`: the
// stored dtype.
void write_folder(const std::string& dir, const json& cfg, DType dt, uint64_t seed) {
    const auto c = models::DcAeConfig::from_json(cfg);
    auto shapes = models::synthetic_store(DType::f32);
    std::map<std::string, Shape> names;
    for (bool decode : {true, false}) {
        ir::Graph g;
        models::Builder b(g, *shapes);
        const int r = c.compression();
        if (decode)
            models::build_dc_ae_decoder(b, c, 1, 1, 1);
        else
            models::build_dc_ae_encoder(b, c, 1, r, r);
        for (int id : g.weights())
            if (const std::string& n = g.value(id).name; !b.constants().count(n)) names[n] = shapes->find(n)->shape;
    }
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& [n, s] : names) {
        Rng rng{(seed ^ std::hash<std::string>{}(n)) | 1};
        Tensor t(DType::f32, s);
        const double fan_in = s.size() >= 2 ? (double)shape_numel(s) / (double)s[0] : 1.0;
        const bool norm_w = s.size() == 1 && n.find("norm") != std::string::npos && n.ends_with(".weight");
        for (int64_t i = 0; i < t.numel(); ++i) {
            const double u = rng.next();
            t.data<float>()[i] = (float)(s.size() >= 2 ? u * std::sqrt(3.0 / fan_in)
                                         : norm_w      ? 1.0 + 0.1 * u
                                                       : 0.05 * u);
        }
        t = t.astype(DType::f16).astype(dt);
        tensors.push_back({n, t});
    }
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json") << cfg.dump(2);
    write_safetensors(dir + "/diffusion_pytorch_model.safetensors", tensors);
}

Tensor image(int B, int H, int W, uint64_t seed) {
    Rng rng{seed};
    Tensor t(DType::f32, {B, 3, H, W});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (float)rng.next();
    return t;
}

// Widths equal, doubling, quadrupling (group 1) and halving (group 8) between stages; head dims 4, 8, 16;
// multiscales (3, 5) and none; up to 3 blocks a stage; a first stage without blocks (conv_in is a DCDownBlock2d).
const std::vector<Case>& cases() {
    static const std::vector<Case> v = {
        {"conv_equal_double_h16",
         {16, 16, 32, 32},
         {2, 2, 3, 2},
         {"ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock"},
         {{}, {}, {3, 5}, {5}},
         16,
         8,
         false,
         2,
         32,
         24},
        {"unshuffle_first_empty_h4",
         {8, 16, 16, 64, 32},
         {0, 2, 1, 2, 2},
         {"ResBlock", "ResBlock", "EfficientViTBlock", "EfficientViTBlock", "EfficientViTBlock"},
         {{}, {}, {5}, {}, {3}},
         4,
         16,
         true,
         2,
         48,
         32},
        {"conv_all_equal_h8_vit_first",
         {24, 24, 24},
         {2, 3, 2},
         {"EfficientViTBlock", "ResBlock", "EfficientViTBlock"},
         {{3}, {}, {5}},
         8,
         4,
         false,
         2,
         16,
         20},
        // One latent pixel per image (the deepest stages at 2 x 2 and 1 x 1), batch 3.
        {"conv_one_latent_pixel_b3",
         {8, 16, 16, 32},
         {1, 1, 2, 2},
         {"ResBlock", "EfficientViTBlock", "ResBlock", "EfficientViTBlock"},
         {{}, {5}, {}, {3}},
         8,
         32,
         false,
         3,
         8,
         8},
    };
    return v;
}

std::string case_dir(const std::string& name, DType dt) {
    return (fs::temp_directory_path() / "kiln_test_dc_ae_encoder" / (name + "_" + dtype_name(dt))).string();
}
}  // namespace

TEST_CASE("DC-AE encoder reference: the written-out diffusers encoder gives the fixtures' latents", "[dc_ae]") {
    // What anchors the reference below: diffusers' own encode(image).latent of both fixtures.
    for (const char* fx : {"dc_ae", "dc_ae_shuffle"}) {
        const std::string dir = test::data_path(std::string("fixtures/") + fx);
        json cfg = json::parse(std::ifstream(dir + "/config.json"));
        auto io = SafeTensors::open(dir + "/io.safetensors");
        const Weights ws = read_all(SafeTensors::open(dir + "/diffusion_pytorch_model.safetensors"));
        const Arr ref = encode(of(io.read("image")), ws, cfg);
        // diffusers ran in f32; this in double: only diffusers' rounding differs (~1e-6).
        const double err = rel_err(io.read("latent"), ref);
        INFO(fx << ": relative L2 " << err);
        CHECK(err <= 1e-5);
    }
}

TEST_CASE("DC-AE encoder over varied configs: CPU reference and Vulkan match diffusers' encoder written out",
          "[models][dc_ae][vulkan]") {
    for (const Case& c : cases()) {
        const json cfg = config_of(c);
        const int r = models::DcAeConfig::from_json(cfg).compression();
        REQUIRE((c.H % r == 0 && c.W % r == 0));
        for (DType stored : {DType::f32, DType::f16}) {
            const std::string dir = case_dir(c.name, stored);
            write_folder(dir, cfg, stored, 46);
            const Tensor x = image(c.B, c.H, c.W, 7);
            const Weights ws = read_all(SafeTensors::open(dir + "/diffusion_pytorch_model.safetensors"));
            const Arr ref = encode(of(x), ws, cfg);
            auto src = models::ModelSource::open(dir);
            // CPU reference: f32 activations, f64 accumulation, the same (f16-exact) weights: ~1e-6.
            auto cpu = models::forward_component(nullptr, src, "vae", {{"image", x}});
            const Tensor& lat = cpu.at("latent");
            REQUIRE(lat.shape == Shape{c.B, c.latent, c.H / r, c.W / r});
            double err = worst_item_err(lat, ref);
            INFO(c.name << " " << dtype_name(stored) << " storage, CPU reference: worst item relative L2 " << err);
            CHECK(err <= 1e-5);
            // Vulkan, the folder as it is and converted to a Kiln file (f16 matrices): f32 accumulation in another
            // order than the reference, as the fixture parity tests (1e-4).
            const std::string kiln = dir + ".kiln";
            converter::Options opt;
            opt.dtype = DType::f16;
            opt.quiet = true;
            converter::convert_folder(dir, kiln, opt);
            for (const std::string& path : {dir, kiln}) {
                auto s = models::ModelSource::open(path);
                for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
                    auto out = models::forward_component(&test::context(), s, "vae", {{"image", x}}, m);
                    err = worst_item_err(out.at("latent"), ref);
                    INFO(c.name << " " << path << " " << exec::mode_name(m) << ": worst item relative L2 " << err);
                    CHECK(err <= 1e-4);
                }
                models::VaeOptions vo;  // the pipelines' runner, replaying the blocks and sliced (one item at a time)
                vo.mode = exec::Mode::regional;
                vo.sliced = true;
                models::DcAeRunner runner(&test::context(), s, "vae", vo);
                err = worst_item_err(runner.encode(x), ref);
                INFO(c.name << " " << path << " DcAeRunner::encode: worst item relative L2 " << err);
                CHECK(err <= 1e-4);
            }
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}
