// SD3 / SD3.5: Stability's MMDiT keys -> diffusers' SD3 transformer
// (diffusers single_file_utils.py convert_sd3_transformer_checkpoint_to_diffusers).
#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

namespace {

const std::vector<Rename> kSd3Top = {
    {"pos_embed", "pos_embed.pos_embed"},   // [1, max^2, D]
    {"x_embedder.proj", "pos_embed.proj"},  // patch conv [D, C, p, p]
    {"t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1"},
    {"t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2"},
    {"y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1"},
    {"y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2"},
    {"context_embedder", "context_embedder"},
    {"final_layer.linear", "proj_out"},
};

// joint_blocks.N.<rest> -> transformer_blocks.N.<to>; the qkv and the pre-only adaLN are handled apart.
const std::vector<Rename> kSd3Block = {
    {"x_block.attn.proj", "attn.to_out.0"},
    {"x_block.attn.ln_q", "attn.norm_q"},  // SD3.5 qk norm
    {"x_block.attn.ln_k", "attn.norm_k"},
    {"x_block.attn2.proj", "attn2.to_out.0"},  // SD3.5 dual attention
    {"x_block.attn2.ln_q", "attn2.norm_q"},
    {"x_block.attn2.ln_k", "attn2.norm_k"},
    {"x_block.adaLN_modulation.1", "norm1.linear"},  // 6 chunks (9 with attn2), same order
    {"x_block.mlp.fc1", "ff.net.0.proj"},
    {"x_block.mlp.fc2", "ff.net.2"},
    {"context_block.attn.proj", "attn.to_add_out"},
    {"context_block.attn.ln_q", "attn.norm_added_q"},
    {"context_block.attn.ln_k", "attn.norm_added_k"},
    {"context_block.mlp.fc1", "ff_context.net.0.proj"},
    {"context_block.mlp.fc2", "ff_context.net.2"},
};

void split_qkv(MapOut& out, size_t i, const std::string& base, const char* q, const char* k, const char* v,
               const std::string& leaf) {
    const Source& s = out.src(i);
    KILN_CHECK(!s.shape.empty() && s.shape[0] % 3 == 0, out.c.path, ": fused qkv '", s.name, "' of shape ",
               shape_str(s.shape), " has no three equal parts along dim 0");
    int64_t d = s.shape[0] / 3;
    out.rows(i, {base + q + "." + leaf, base + k + "." + leaf, base + v + "." + leaf}, {d, d, d});
}

}  // namespace

void map_sd3(const Group& g, MapOut& out) {
    // A block whose context_block has no attn.proj is context_pre_only (the last one): its 2-chunk adaLN is
    // [shift; scale] like final_layer's, diffusers' norm1_context [scale; shift].
    std::map<int, bool> has_context_proj;
    for (const auto& [k, i] : g.keys) {
        int n;
        std::string rest;
        if (block_key(k, "joint_blocks.", n, rest))
            has_context_proj[n] |= starts_with(rest, "context_block.attn.proj.");
    }
    for (const auto& [k, i] : g.keys) {
        std::string name, rest;
        int n;
        if (block_key(k, "joint_blocks.", n, rest)) {
            const std::string base = "transformer_blocks." + std::to_string(n) + ".";
            const std::string leaf = rest.substr(rest.rfind('.') + 1);
            if (starts_with(rest, "x_block.attn.qkv."))
                split_qkv(out, i, base, "attn.to_q", "attn.to_k", "attn.to_v", leaf);
            else if (starts_with(rest, "x_block.attn2.qkv."))
                split_qkv(out, i, base, "attn2.to_q", "attn2.to_k", "attn2.to_v", leaf);
            else if (starts_with(rest, "context_block.attn.qkv."))
                split_qkv(out, i, base, "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", leaf);
            else if (starts_with(rest, "context_block.adaLN_modulation.1.") && !has_context_proj[n])
                out.swap(i, base + "norm1_context.linear." + leaf);
            else if (starts_with(rest, "context_block.adaLN_modulation.1."))
                out.copy(i, base + "norm1_context.linear." + leaf);
            else if (rename(kSd3Block, rest, name))
                out.copy(i, base + name);
            else
                out.unexplained.push_back(out.src(i).name);
        } else if (starts_with(k, "final_layer.adaLN_modulation.1.")) {
            out.swap(i, "norm_out.linear." + k.substr(31));
        } else if (rename(kSd3Top, k, name)) {
            out.copy(i, name);
        } else {
            out.unexplained.push_back(out.src(i).name);
        }
    }
}

}  // namespace kiln::layouts::detail
