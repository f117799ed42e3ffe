// LDM-layout VAE (BFL's ae.safetensors, Stability's first_stage_model.*) -> diffusers' VAE (autoencoder_kl.py)
// (diffusers single_file_utils.py convert_ldm_vae_checkpoint), and FLUX.2's VAE (BFL's flux2-vae.safetensors) ->
// AutoencoderKLFlux2: the same LDM encoder and decoder, its quant convs inside them (encoder.quant_conv,
// decoder.post_quant_conv) and the latent BatchNorm's buffers bn.* (diffusers' scripts/convert_flux2_to_diffusers.py;
// single_file_utils.py has no FLUX.2 VAE converter).
#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

namespace {

const std::vector<Rename> kResnet = {
    {"nin_shortcut", "conv_shortcut"}, {"norm1", "norm1"}, {"conv1", "conv1"}, {"norm2", "norm2"}, {"conv2", "conv2"}};

const std::vector<Rename> kMid = {
    {"mid.block_1", "mid_block.resnets.0"},
    {"mid.block_2", "mid_block.resnets.1"},
    {"mid.attn_1.norm", "mid_block.attentions.0.group_norm"},
    {"mid.attn_1.q", "mid_block.attentions.0.to_q"},
    {"mid.attn_1.k", "mid_block.attentions.0.to_k"},
    {"mid.attn_1.v", "mid_block.attentions.0.to_v"},
    {"mid.attn_1.proj_out", "mid_block.attentions.0.to_out.0"},
    {"norm_out", "conv_norm_out"},
    {"conv_in", "conv_in"},
    {"conv_out", "conv_out"},
};

// "down.I.block.J.<r>" / "up.I.block.J.<r>" -> "<blocks>.I'.resnets.J.<r>", "down.I.downsample.conv" ->
// "down_blocks.I.downsamplers.0.conv", "up.I.upsample.conv" -> "up_blocks.I'.upsamplers.0.conv".
bool level_key(const std::string& rest, const std::string& kind, int levels, std::string& out) {
    int lvl, j;
    std::string r, r2;
    if (!block_key(rest, kind + ".", lvl, r)) return false;
    // The decoder's up levels run from the lowest resolution in diffusers, the highest in LDM.
    const int to = kind == "up" ? levels - 1 - lvl : lvl;
    const std::string base = kind + "_blocks." + std::to_string(to) + ".";
    if (block_key(r, "block.", j, r2) && rename(kResnet, r2, out)) {
        out = base + "resnets." + std::to_string(j) + "." + out;
        return true;
    }
    const std::string sampler = kind == "up" ? "upsample.conv." : "downsample.conv.";
    if (starts_with(r, sampler)) {
        out = base + (kind == "up" ? "upsamplers.0.conv." : "downsamplers.0.conv.") + r.substr(sampler.size());
        return true;
    }
    return false;
}

}  // namespace

void map_vae_flux2(const Group& g, MapOut& out) {
    Group ldm{g.det, {}};
    bool tracked = false;
    for (const auto& [k, i] : g.keys) {
        if (starts_with(k, "encoder.quant_conv."))
            out.copy(i, k.substr(8));  // quant_conv.*
        else if (starts_with(k, "decoder.post_quant_conv."))
            out.copy(i, k.substr(8));  // post_quant_conv.*
        else if (k == "bn.running_mean" || k == "bn.running_var" || k == "bn.num_batches_tracked")
            out.copy(i, k), tracked |= k == "bn.num_batches_tracked";
        else
            ldm.keys.emplace_back(k, i);
    }
    // torch's BatchNorm loads a state dict without num_batches_tracked as 0 (the diffusers conversion drops it).
    if (!tracked) out.zero("bn.num_batches_tracked", DType::i64, {});
    map_vae_ldm(ldm, out);
}

void map_vae_ldm(const Group& g, MapOut& out) {
    int up_levels = 0;
    for (const auto& [k, i] : g.keys) {
        int n;
        std::string rest;
        if (block_key(k, "decoder.up.", n, rest)) up_levels = std::max(up_levels, n + 1);
    }
    for (const auto& [k, i] : g.keys) {
        std::string name;
        if (k == "quant_conv.weight" || k == "quant_conv.bias" || k == "post_quant_conv.weight" ||
            k == "post_quant_conv.bias") {
            out.copy(i, k);
            continue;
        }
        const bool enc = starts_with(k, "encoder."), dec = starts_with(k, "decoder.");
        const std::string side = enc ? "encoder." : "decoder.";
        const std::string rest = enc || dec ? k.substr(8) : k;
        const bool ok = (enc || dec) && ((enc && level_key(rest, "down", 0, name)) ||
                                         (dec && level_key(rest, "up", up_levels, name)) || rename(kMid, rest, name));
        if (!ok) {
            out.unexplained.push_back(out.src(i).name);
            continue;
        }
        const Shape& s = out.src(i).shape;
        // Attention projections are 1x1 convs [C, C, 1, 1] in LDM, Linear [C, C] in diffusers (same bytes).
        if (starts_with(rest, "mid.attn_1.") && !starts_with(rest, "mid.attn_1.norm") && s.size() == 4)
            out.reshape(i, side + name, {s[0], s[1]});
        else
            out.copy(i, side + name);
    }
}

}  // namespace kiln::layouts::detail
