// FLUX.2: Black Forest Labs' keys (flux-2-klein-4b.safetensors, ComfyUI's copies, their GGUFs) -> diffusers'
// Flux2Transformer2DModel (diffusers single_file_utils.py convert_flux2_transformer_checkpoint_to_diffusers). Unlike
// FLUX.1 the modulations are shared by all blocks (double_stream_modulation_{img,txt}, single_stream_modulation), the
// single block's linear1 / linear2 stay fused in diffusers too (attn.to_qkv_mlp_proj / attn.to_out), and there are no
// biases; only the double blocks' qkv are split and final_layer's [shift; scale] swapped.
#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

namespace {

const std::vector<Rename> kTop = {
    {"img_in", "x_embedder"},
    {"txt_in", "context_embedder"},
    {"time_in.in_layer", "time_guidance_embed.timestep_embedder.linear_1"},
    {"time_in.out_layer", "time_guidance_embed.timestep_embedder.linear_2"},
    {"guidance_in.in_layer", "time_guidance_embed.guidance_embedder.linear_1"},  // FLUX.2 [dev]; klein has none
    {"guidance_in.out_layer", "time_guidance_embed.guidance_embedder.linear_2"},
    {"double_stream_modulation_img.lin", "double_stream_modulation_img.linear"},
    {"double_stream_modulation_txt.lin", "double_stream_modulation_txt.linear"},
    {"single_stream_modulation.lin", "single_stream_modulation.linear"},
    {"final_layer.linear", "proj_out"},
};

const std::vector<Rename> kDouble = {
    {"img_attn.norm.query_norm.scale", "attn.norm_q.weight"},
    {"img_attn.norm.key_norm.scale", "attn.norm_k.weight"},
    {"txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"},
    {"txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"},
    {"img_attn.proj", "attn.to_out.0"},
    {"txt_attn.proj", "attn.to_add_out"},
    {"img_mlp.0", "ff.linear_in"},  // [2 * mlp, D]: SwiGLU's gate and value
    {"img_mlp.2", "ff.linear_out"},
    {"txt_mlp.0", "ff_context.linear_in"},
    {"txt_mlp.2", "ff_context.linear_out"},
};

const std::vector<Rename> kSingle = {
    {"linear1", "attn.to_qkv_mlp_proj"},  // [3 D + 2 mlp, D], fused in diffusers as well
    {"linear2", "attn.to_out"},
    {"norm.query_norm.scale", "attn.norm_q.weight"},
    {"norm.key_norm.scale", "attn.norm_k.weight"},
};

}  // namespace

void map_flux2(const Group& g, MapOut& out) {
    for (const auto& [k, i] : g.keys) {
        std::string name, rest;
        int n;
        if (block_key(k, "double_blocks.", n, rest)) {
            const std::string base = "transformer_blocks." + std::to_string(n) + ".attn.";
            if (starts_with(rest, "img_attn.qkv.") || starts_with(rest, "txt_attn.qkv.")) {
                const std::string leaf = rest.substr(12);  // ".weight" / ".bias"
                if (rest[0] == 'i')
                    out.thirds(i, {base + "to_q" + leaf, base + "to_k" + leaf, base + "to_v" + leaf});
                else
                    out.thirds(i, {base + "add_q_proj" + leaf, base + "add_k_proj" + leaf, base + "add_v_proj" + leaf});
            } else if (rename(kDouble, rest, name)) {
                out.copy(i, "transformer_blocks." + std::to_string(n) + "." + name);
            } else {
                out.unexplained.push_back(out.src(i).name);
            }
        } else if (block_key(k, "single_blocks.", n, rest)) {
            if (rename(kSingle, rest, name))
                out.copy(i, "single_transformer_blocks." + std::to_string(n) + "." + name);
            else
                out.unexplained.push_back(out.src(i).name);
        } else if (starts_with(k, "final_layer.adaLN_modulation.1.")) {
            out.swap(i, "norm_out.linear." + k.substr(31));  // [shift; scale] -> [scale; shift]
        } else if (rename(kTop, k, name)) {
            out.copy(i, name);
        } else {
            out.unexplained.push_back(out.src(i).name);
        }
    }
}

}  // namespace kiln::layouts::detail
