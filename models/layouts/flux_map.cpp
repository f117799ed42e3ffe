// The map helpers, and Flux: Black Forest Labs' keys -> diffusers' Flux transformer
// (diffusers single_file_utils.py convert_flux_transformer_checkpoint_to_diffusers).
#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

bool rename(const std::vector<Rename>& rules, const std::string& key, std::string& out) {
    for (const Rename& r : rules) {
        const std::string from = r.from;
        if (key == from) {
            out = r.to;
            return true;
        }
        if (key.size() > from.size() && starts_with(key, from) && key[from.size()] == '.') {
            out = r.to + key.substr(from.size());
            return true;
        }
    }
    return false;
}

bool block_key(const std::string& key, const std::string& prefix, int& n, std::string& rest) {
    if (!starts_with(key, prefix)) return false;
    size_t p = prefix.size(), q = p;
    while (q < key.size() && key[q] >= '0' && key[q] <= '9') ++q;
    if (q == p || q - p > 6 || q >= key.size() || key[q] != '.') return false;
    n = std::stoi(key.substr(p, q - p));
    rest = key.substr(q + 1);
    return true;
}

void MapOut::copy(size_t i, const std::string& name) {
    entries.push_back({{name, src(i).dtype, src(i).shape}, Op::copy, i});
}

void MapOut::reshape(size_t i, const std::string& name, Shape shape) {
    KILN_CHECK(shape_numel(shape) == shape_numel(src(i).shape), c.path, ": tensor '", src(i).name, "' of shape ",
               shape_str(src(i).shape), " cannot be seen as ", shape_str(shape), " ('", name, "')");
    entries.push_back({{name, src(i).dtype, std::move(shape)}, Op::reshape, i});
}

void MapOut::swap(size_t i, const std::string& name) {
    const Source& s = src(i);
    KILN_CHECK(!s.shape.empty() && s.shape[0] % 2 == 0, c.path, ": tensor '", s.name, "' of shape ", shape_str(s.shape),
               " has no two halves along dim 0 to swap");
    entries.push_back({{name, s.dtype, s.shape}, Op::swap, i});
}

void MapOut::rows(size_t i, const std::vector<std::string>& names, std::vector<int64_t> sizes) {
    const Source& s = src(i);
    KILN_CHECK(!s.shape.empty(), c.path, ": fused tensor '", s.name, "' is a scalar");
    std::string parts;  // "32 + 32 + 32 + rest" for the message
    int64_t fixed = 0;
    for (int64_t n : sizes) {
        parts += (parts.empty() ? "" : " + ") + (n < 0 ? std::string("rest") : std::to_string(n));
        fixed += n > 0 ? n : 0;
    }
    const bool rest = sizes.back() < 0;
    if (rest) sizes.back() = s.shape[0] - fixed;
    KILN_CHECK(rest ? sizes.back() > 0 : fixed == s.shape[0], c.path, ": fused tensor '", s.name, "' of shape ",
               shape_str(s.shape), " does not split into rows ", parts, rest ? " (rest > 0)" : "");
    int64_t r = 0;
    for (size_t k = 0; k < names.size(); ++k) {
        Shape shape = s.shape;
        shape[0] = sizes[k];
        entries.push_back({{names[k], s.dtype, shape}, Op::rows, i, r, r + sizes[k]});
        r += sizes[k];
    }
}

void MapOut::thirds(size_t i, const std::vector<std::string>& names) {
    const Source& s = src(i);
    KILN_CHECK(names.size() == 3 && !s.shape.empty() && s.shape[0] % 3 == 0, c.path, ": fused qkv '", s.name,
               "' of shape ", shape_str(s.shape), " has no three equal parts along dim 0");
    const int64_t d = s.shape[0] / 3;
    rows(i, names, {d, d, d});
}

void MapOut::zero(const std::string& name, DType dtype, Shape shape) {
    entries.push_back({{name, dtype, std::move(shape)}, Op::zero, 0});
}

namespace {

// qkv = [q; k; v] along dim 0, equal thirds; `names` are diffusers' modules ("attn.to_q"), `leaf` "weight"/"bias".
void split_qkv(MapOut& out, size_t i, const std::string& base, const char* const (&names)[3], const std::string& leaf) {
    out.thirds(i, {base + names[0] + "." + leaf, base + names[1] + "." + leaf, base + names[2] + "." + leaf});
}

const char* const kToQkv[3] = {"attn.to_q", "attn.to_k", "attn.to_v"};
const char* const kAddQkv[3] = {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"};

const std::vector<Rename> kFluxTop = {
    {"img_in", "x_embedder"},
    {"txt_in", "context_embedder"},
    {"time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"},
    {"time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"},
    {"vector_in.in_layer", "time_text_embed.text_embedder.linear_1"},
    {"vector_in.out_layer", "time_text_embed.text_embedder.linear_2"},
    {"guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"},
    {"guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"},
    {"final_layer.linear", "proj_out"},
};

const std::vector<Rename> kFluxDouble = {
    {"img_mod.lin", "norm1.linear"},  // 6 chunks, same order in both
    {"txt_mod.lin", "norm1_context.linear"},
    {"img_attn.norm.query_norm.scale", "attn.norm_q.weight"},
    {"img_attn.norm.key_norm.scale", "attn.norm_k.weight"},
    {"txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"},
    {"txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"},
    {"img_attn.proj", "attn.to_out.0"},
    {"txt_attn.proj", "attn.to_add_out"},
    {"img_mlp.0", "ff.net.0.proj"},
    {"img_mlp.2", "ff.net.2"},
    {"txt_mlp.0", "ff_context.net.0.proj"},
    {"txt_mlp.2", "ff_context.net.2"},
};

const std::vector<Rename> kFluxSingle = {
    {"linear2", "proj_out"},  // input cat(attn, gelu_tanh(mlp))
    {"modulation.lin", "norm.linear"},
    {"norm.query_norm.scale", "attn.norm_q.weight"},
    {"norm.key_norm.scale", "attn.norm_k.weight"},
};

// The hidden size D: img_in's out features, else a single block's linear2 out features.
int64_t flux_hidden(const Group& g, const MapOut& out) {
    int64_t d = 0;
    for (const auto& [k, i] : g.keys) {
        if (k == "img_in.weight") return out.src(i).shape[0];
        int n;
        std::string rest;
        if (block_key(k, "single_blocks.", n, rest) && rest == "linear2.weight") d = out.src(i).shape[0];
    }
    return d;
}

}  // namespace

void map_flux(const Group& g, MapOut& out) {
    const int64_t D = flux_hidden(g, out);
    for (const auto& [k, i] : g.keys) {
        std::string name, rest;
        int n;
        if (block_key(k, "double_blocks.", n, rest)) {
            const std::string base = "transformer_blocks." + std::to_string(n) + ".";
            if (starts_with(rest, "img_attn.qkv."))
                split_qkv(out, i, base, kToQkv, rest.substr(13));
            else if (starts_with(rest, "txt_attn.qkv."))
                split_qkv(out, i, base, kAddQkv, rest.substr(13));
            else if (rename(kFluxDouble, rest, name))
                out.copy(i, base + name);
            else
                out.unexplained.push_back(out.src(i).name);
        } else if (block_key(k, "single_blocks.", n, rest)) {
            const std::string base = "single_transformer_blocks." + std::to_string(n) + ".";
            if (starts_with(rest, "linear1.")) {
                // linear1 = [to_q; to_k; to_v; proj_mlp] = [D, D, D, mlp_ratio * D] rows.
                KILN_CHECK(D > 0, out.c.path, ": '", out.src(i).name,
                           "' cannot be split: neither img_in.weight nor linear2.weight gives the hidden size");
                const std::string leaf = rest.substr(8);
                out.rows(i,
                         {base + "attn.to_q." + leaf, base + "attn.to_k." + leaf, base + "attn.to_v." + leaf,
                          base + "proj_mlp." + leaf},
                         {D, D, D, -1});
            } else if (rename(kFluxSingle, rest, name)) {
                out.copy(i, base + name);
            } else {
                out.unexplained.push_back(out.src(i).name);
            }
        } else if (starts_with(k, "final_layer.adaLN_modulation.1.")) {
            out.swap(i, "norm_out.linear." + k.substr(31));  // [shift; scale] -> [scale; shift]
        } else if (rename(kFluxTop, k, name)) {
            out.copy(i, name);
        } else {
            out.unexplained.push_back(out.src(i).name);
        }
    }
}

// Diffusers or transformers names already: every tensor as it is, less the buffers transformers does not load.
void map_identity(const Group& g, MapOut& out) {
    for (const auto& [k, i] : g.keys) {
        if (k == "text_model.embeddings.position_ids" || k == "logit_scale") continue;
        out.copy(i, k);
    }
}

}  // namespace kiln::layouts::detail
