// The autoencoders' tensor lists: diffusers' AutoencoderKL, AutoencoderKLFlux2 and AutoencoderDC, as save_pretrained
// names them.
#include <algorithm>

#include "converter/arch_detail.h"

namespace kiln::converter::arch_detail {

namespace {
// ResnetBlock2D without time embedding (VAE).
void resnet(const Names& n, int64_t in, int64_t out) {
    n.lin("norm1");
    n.lin("conv1");
    n.lin("norm2");
    n.lin("conv2");
    if (in != out) n.lin("conv_shortcut");
}

// UNetMidBlock2D as the VAE builds it: resnet, [attention, resnet].
void vae_mid_block(const Names& n, int64_t ch, bool attention) {
    resnet(n.sub("resnets.0"), ch, ch);
    if (attention) {
        n.lin("attentions.0.group_norm");
        n.self_attention("attentions.0", true);
    }
    resnet(n.sub("resnets.1"), ch, ch);
}

}  // namespace

ArchSpec autoencoder_kl(const Config& c, bool flux2) {
    ArchSpec s{"vae", {}, {}, {}};
    Names n{s.expected, ""};
    // The classes' defaults: AutoencoderKL one block of 64 channels, AutoencoderKLFlux2 four (128, 256, 512, 512).
    auto ch = c.ints("block_out_channels");
    if (ch.empty()) ch = flux2 ? std::vector<int64_t>{128, 256, 512, 512} : std::vector<int64_t>{64};
    auto down = c.strings("down_block_types"), up = c.strings("up_block_types");
    if (down.empty()) down.assign(flux2 ? 4 : 1, "DownEncoderBlock2D");
    if (up.empty()) up.assign(flux2 ? 4 : 1, "UpDecoderBlock2D");
    // AutoencoderKLFlux2: Decoder(block_out_channels=decoder_block_out_channels or block_out_channels).
    auto dch = flux2 ? c.ints("decoder_block_out_channels") : std::vector<int64_t>{};
    if (dch.empty()) dch = ch;
    KILN_CHECK(down.size() == ch.size() && up.size() == dch.size(), c.where,
               ": block_out_channels, down_block_types and up_block_types (decoder_block_out_channels) must have the "
               "same length");
    for (auto& t : down)
        KILN_CHECK(t == "DownEncoderBlock2D", c.where, ": down block type '", t,
                   "' is not supported (supported: DownEncoderBlock2D)");
    for (auto& t : up)
        KILN_CHECK(t == "UpDecoderBlock2D", c.where, ": up block type '", t,
                   "' is not supported (supported: UpDecoderBlock2D)");
    int64_t layers = c.positive("layers_per_block", flux2 ? 2 : 1, 64);
    bool attn = c.boolean("mid_block_add_attention", true);
    const size_t nb = ch.size();

    Names e = n.sub("encoder");  // Encoder (autoencoders/vae.py)
    e.lin("conv_in");
    for (size_t i = 0; i < nb; ++i) {
        Names d = e.sub("down_blocks." + std::to_string(i));
        int64_t in = i ? ch[i - 1] : ch[0], out = ch[i];
        for (int64_t j = 0; j < layers; ++j) resnet(d.sub("resnets." + std::to_string(j)), j ? out : in, out);
        if (i + 1 < nb) d.lin("downsamplers.0.conv");
    }
    vae_mid_block(e.sub("mid_block"), ch.back(), attn);
    e.lin("conv_norm_out");
    e.lin("conv_out");

    Names dec = n.sub("decoder");  // Decoder: channels reversed, layers_per_block + 1 resnets per block
    dec.lin("conv_in");
    vae_mid_block(dec.sub("mid_block"), dch.back(), attn);
    std::vector<int64_t> rev(dch.rbegin(), dch.rend());
    for (size_t i = 0; i < rev.size(); ++i) {
        Names u = dec.sub("up_blocks." + std::to_string(i));
        int64_t in = i ? rev[i - 1] : rev[0], out = rev[i];
        for (int64_t j = 0; j <= layers; ++j) resnet(u.sub("resnets." + std::to_string(j)), j ? out : in, out);
        if (i + 1 < rev.size()) u.lin("upsamplers.0.conv");
    }
    dec.lin("conv_norm_out");
    dec.lin("conv_out");
    if (c.boolean("use_quant_conv", true)) n.lin("quant_conv");
    if (c.boolean("use_post_quant_conv", true)) n.lin("post_quant_conv");
    if (flux2) {  // BatchNorm2d(affine=False, track_running_stats=True): buffers only; the pipelines read the stats
        n.raw("bn.running_mean");
        n.raw("bn.running_var");
        n.raw("bn.num_batches_tracked");
    }
    s.renames = {{".query.", ".to_q."}, {".key.", ".to_k."}, {".value.", ".to_v."}, {".proj_attn.", ".to_out.0."}};
    return s;
}

namespace {
// AutoencoderDC (autoencoder_dc.py). Each stage is a block kind "<side>.<down|up>_blocks.<i>": its ResBlocks or
// EfficientViTBlocks (variant 0) and its DCDownBlock2d after them / DCUpBlock2d before them (variant 1).
struct DcAeStage {
    int64_t channels = 0, layers = 0;
    bool vit = false, batch_norm = false;
    size_t scales = 0;
};

std::vector<DcAeStage> dc_ae_stages(const Config& c, const std::string& side, const std::vector<int64_t>& def_layers) {
    auto key = [&](const char* k) { return side + "_" + k; };
    auto ch = c.ints(key("block_out_channels").c_str());
    if (ch.empty()) ch = {128, 256, 512, 512, 1024, 1024};
    auto layers = c.ints(key("layers_per_block").c_str());
    if (layers.empty()) layers = def_layers;
    std::vector<std::string> types =
        c.has(key("block_types").c_str()) && c.j[key("block_types")].is_array()
            ? c.strings(key("block_types").c_str())
            : std::vector<std::string>(ch.size(), c.string(key("block_types").c_str(), "ResBlock"));
    std::vector<size_t> scales = {0, 0, 0, 1, 1, 1};
    if (c.has(key("qkv_multiscales").c_str())) {
        scales.clear();
        for (auto& m : c.j[key("qkv_multiscales")]) scales.push_back(m.is_array() ? m.size() : 0);
    }
    KILN_CHECK(layers.size() == ch.size() && types.size() == ch.size() && scales.size() == ch.size(), c.where, ": ",
               side, " block_out_channels, layers_per_block, block_types and qkv_multiscales differ in length");
    std::vector<DcAeStage> s(ch.size());
    for (size_t i = 0; i < ch.size(); ++i) {
        KILN_CHECK(types[i] == "ResBlock" || types[i] == "EfficientViTBlock", c.where, ": ", side, " block type '",
                   types[i], "' is not supported (ResBlock, EfficientViTBlock)");
        s[i] = {ch[i], layers[i], types[i] == "EfficientViTBlock", false, scales[i]};
    }
    return s;
}

void dc_ae_norm(const Names& n, const std::string& p, bool batch_norm) {
    n.lin(p);
    if (!batch_norm) return;
    n.raw(p + ".running_mean");
    n.raw(p + ".running_var");
    n.raw(p + ".num_batches_tracked");
}

void dc_ae_block(const Names& n, const DcAeStage& s) {
    if (!s.vit) {  // ResBlock
        n.lin("conv1");
        n.w("conv2");
        dc_ae_norm(n, "norm", s.batch_norm);
        return;
    }
    for (const char* p : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out"}) n.w(p);
    for (size_t k = 0; k < s.scales; ++k) {
        n.w("attn.to_qkv_multiscale." + std::to_string(k) + ".proj_in");
        n.w("attn.to_qkv_multiscale." + std::to_string(k) + ".proj_out");
    }
    dc_ae_norm(n, "attn.norm_out", s.batch_norm);
    n.lin("conv_out.conv_inverted");
    n.lin("conv_out.conv_depth");
    n.w("conv_out.conv_point");
    n.lin("conv_out.norm");
}

}  // namespace

ArchSpec autoencoder_dc(const Config& c) {
    ArchSpec s{"vae", {}, {}, {}};
    Names n{s.expected, ""};
    auto enc = dc_ae_stages(c, "encoder", {2, 2, 2, 3, 3, 3}), dec = dc_ae_stages(c, "decoder", {3, 3, 3, 3, 3, 3});
    KILN_CHECK(enc.size() == dec.size() && !enc.empty(), c.where, ": encoder and decoder stage counts differ");
    const bool norm_list = c.has("decoder_norm_types") && c.j["decoder_norm_types"].is_array();
    std::vector<std::string> norms =
        norm_list ? c.strings("decoder_norm_types")
                  : std::vector<std::string>(dec.size(), c.string("decoder_norm_types", "rms_norm"));
    KILN_CHECK(norms.size() == dec.size(), c.where, ": decoder_norm_types has ", norms.size(), " entries");
    for (size_t i = 0; i < dec.size(); ++i) dec[i].batch_norm = norms[i] == "batch_norm";
    const size_t nb = enc.size();
    auto stage = [&](const std::string& kind, const DcAeStage& st, bool sampler, bool sampler_first) {
        const int64_t count = st.layers + (sampler ? 1 : 0);
        BlockKind k{kind, count, {}};
        for (int64_t j = 0; j < count; ++j) {
            const bool is_sampler = sampler && (sampler_first ? j == 0 : j == count - 1);
            Names b = n.sub(kind + "." + std::to_string(j));
            if (is_sampler)
                b.lin("conv");
            else
                dc_ae_block(b, st);
            k.variant.push_back(is_sampler ? 1 : 0);
        }
        if (count > 0) s.blocks.push_back(std::move(k));
    };
    n.lin(enc[0].layers > 0 ? "encoder.conv_in" : "encoder.conv_in.conv");
    for (size_t i = 0; i < nb; ++i)
        stage("encoder.down_blocks." + std::to_string(i), enc[i], i + 1 < nb && enc[i].layers > 0, false);
    n.lin("encoder.conv_out");
    n.lin("decoder.conv_in");
    for (size_t i = 0; i < nb; ++i)
        stage("decoder.up_blocks." + std::to_string(i), dec[i], i + 1 < nb && dec[i].layers > 0, true);
    n.lin("decoder.norm_out");
    n.lin(dec[0].layers > 0 ? "decoder.conv_out" : "decoder.conv_out.conv");
    return s;
}

}  // namespace kiln::converter::arch_detail
