#pragma once
// Z-Image's transformer (diffusers models/transformers/transformer_z_image.py, ZImageTransformer2DModel, the basic
// mode: one image per item, no SigLIP): a single-stream DiT over per-item sequences cat(image tokens, caption tokens).
// The image tokens pass x_embedder and the modulated noise_refiner, the caption tokens cap_embedder (RMSNorm +
// Linear) and the unmodulated context_refiner; then the main layers and the final layer over the unified sequence.
//
// Items may differ in caption length (and image size). Each item's image and caption tokens are padded to a multiple
// of 32 with learned pad tokens, and these pads take part in attention; only the padding of the batch to its longest
// item is masked (a key mask), as diffusers pads and masks. Kiln lays the batch out as diffusers does, [B, S_max, dim]
// with one attention per block; the host prepares the layout once per shape (prepare_z_image): gather indices that
// place tokens and pad tokens, per-token RoPE tables, key masks.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/core/weights.h"

namespace kiln::models {

struct ZImageConfig {
    int in_channels = 16, dim = 3840, layers = 30, refiner_layers = 2, heads = 30, cap_feat_dim = 2560;
    int patch = 2;  // all_patch_size[0] (all_f_patch_size[0] is 1: images, one frame)
    float norm_eps = 1e-5f, t_scale = 1000.f;
    double rope_theta = 256.0;
    bool qk_norm = true;
    std::vector<int> axes_dims{32, 48, 48}, axes_lens{1024, 512, 512};
    int head_dim() const { return dim / heads; }
    int adaln_dim() const { return dim < 256 ? dim : 256; }     // min(dim, ADALN_EMBED_DIM)
    int ffn_dim() const { return (int)((double)dim / 3 * 8); }  // int(dim / 3 * 8), as Python computes it
    int token_dim() const { return patch * patch * in_channels; }
    static ZImageConfig from_json(const nlohmann::json& j);  // rejects configs Kiln does not implement
};

// One batch item: its latent's height and width (the x_i given as [C, 1, H, W]) and its caption length (the rows of
// cap_feats_i: the pipeline passes only the unpadded tokens).
struct ZImageItem {
    int height = 0, width = 0, cap_len = 0;
};

// The sequence layout of a batch: per item, image tokens n (real) and n_pad (a multiple of 32), caption tokens l and
// l_pad; the batch's padded lengths. Unified slot order per item: image tokens, then caption tokens.
struct ZImageLayout {
    std::vector<ZImageItem> items;
    std::vector<int> n, n_pad, l, l_pad, s;  // s = n_pad + l_pad: the unified length
    int n_max = 0, l_max = 0, s_max = 0;
    int batch() const { return (int)items.size(); }
    static ZImageLayout of(const ZImageConfig& c, const std::vector<ZImageItem>& items);
};

// The host-made graph inputs for a layout (the same for every step of a pipeline at these shapes):
//   x_gather i32 [B * n_max], cap_gather i32 [B * l_max], unified_gather i32 [B * s_max]: row indices (see
//     build_z_image);
//   x_rope_cos / x_rope_sin [B * n_max, head_dim/2], cap_rope_* [B * l_max, ..], rope_* [B * s_max, ..]: per-slot RoPE
//     (angles pos * theta^(-2i/d) in f64, cast to f32, then cos/sin of that f32 angle as torch.polar does);
//   x_mask [B, 1, n_max], cap_mask [B, 1, l_max], mask [B, 1, s_max]: 0 on an item's slots, lowest() on batch padding
//     (absent when every item of the batch has that length: diffusers passes no mask then).
std::map<std::string, Tensor> prepare_z_image(const ZImageConfig& c, const ZImageLayout& lay);

// Forward graph for a layout. Inputs: x_0 .. x_{B-1} [in_channels, 1, H_i, W_i], cap_feats_0 .. [L_i, cap_feat_dim],
// t [B] (in [0, 1]; times t_scale inside), and prepare_z_image's tensors. Outputs sample_0 .. [in_channels, 1, H_i,
// W_i]. Region kinds: "noise_refiner", "context_refiner", "layers".
void build_z_image(Builder& b, const ZImageConfig& c, const ZImageLayout& lay);

}  // namespace kiln::models
