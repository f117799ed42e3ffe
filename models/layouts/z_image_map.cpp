// Z-Image: the original keys (Tongyi-MAI's checkpoint, ComfyUI's z_image_turbo_*.safetensors, their GGUFs) ->
// diffusers' ZImageTransformer2DModel (diffusers single_file_utils.py
// convert_z_image_transformer_checkpoint_to_diffusers):
//   x_embedder / final_layer        -> all_x_embedder.2-1 / all_final_layer.2-1 (the patch 2, frame patch 1 entries)
//   <block>.attention.qkv           -> to_q | to_k | to_v, equal thirds of dim 0 (torch.chunk(qkv, 3))
//   <block>.attention.out           -> attention.to_out.0
//   <block>.attention.{q,k}_norm    -> attention.norm_{q,k}
//   norm_final.weight               -> dropped (the model has no such module)
// and every other key as it is. x_pad_token / cap_pad_token are [1, D] in diffusers; some files store them as [D]
// (ComfyUI-GGUF unsqueezes them on load): the same bytes.
#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

namespace {

// Inside layers.N / noise_refiner.N / context_refiner.N, besides the fused qkv.
const std::vector<Rename> kBlock = {
    {"attention.out", "attention.to_out.0"},
    {"attention.q_norm", "attention.norm_q"},
    {"attention.k_norm", "attention.norm_k"},
    {"attention_norm1", "attention_norm1"},
    {"attention_norm2", "attention_norm2"},
    {"ffn_norm1", "ffn_norm1"},
    {"ffn_norm2", "ffn_norm2"},
    {"feed_forward.w1", "feed_forward.w1"},
    {"feed_forward.w2", "feed_forward.w2"},
    {"feed_forward.w3", "feed_forward.w3"},
    {"adaLN_modulation.0", "adaLN_modulation.0"},  // layers and noise_refiner (modulated); context_refiner has none
};

const std::vector<Rename> kTop = {
    {"x_embedder", "all_x_embedder.2-1"},
    {"final_layer", "all_final_layer.2-1"},  // linear, adaLN_modulation.1: no [shift; scale] swap here
    {"cap_embedder", "cap_embedder"},
    {"t_embedder", "t_embedder"},
};

}  // namespace

void map_z_image(const Group& g, MapOut& out) {
    for (const auto& [k, i] : g.keys) {
        std::string name, rest;
        int n;
        std::string block;
        for (const char* b : {"layers.", "noise_refiner.", "context_refiner."})
            if (block_key(k, b, n, rest)) block = b;
        if (!block.empty()) {
            const std::string base = block + std::to_string(n) + ".attention.";
            if (starts_with(rest, "attention.qkv."))
                out.thirds(i, {base + "to_q." + rest.substr(14), base + "to_k." + rest.substr(14),
                               base + "to_v." + rest.substr(14)});
            else if (rename(kBlock, rest, name))
                out.copy(i, block + std::to_string(n) + "." + name);
            else
                out.unexplained.push_back(out.src(i).name);
        } else if (k == "x_pad_token" || k == "cap_pad_token") {
            const Shape& s = out.src(i).shape;
            if (s.size() == 1)
                out.reshape(i, k, {1, s[0]});
            else
                out.copy(i, k);
        } else if (k == "norm_final.weight") {
            // diffusers drops it: ZImageTransformer2DModel has no final norm outside all_final_layer.
        } else if (rename(kTop, k, name)) {
            out.copy(i, name);
        } else {
            out.unexplained.push_back(out.src(i).name);
        }
    }
}

}  // namespace kiln::layouts::detail
