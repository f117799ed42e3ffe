// LoRA keys of each layout mapped to diffusers' modules (docs/lora.md). Flux's kohya / ComfyUI / BFL / XLabs names
// through the BFL -> diffusers module map of flux_map.cpp (for modules, not tensors); SD3's kohya / ComfyUI names
// (Stability's MMDiT names) through sd3_map.cpp's map itself; text-encoder keys to CLIP.
#include "models/layouts/lora_keys.h"

#include <cctype>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "models/layouts/layout_map.h"

namespace kiln::layouts::lora_keys {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

namespace {

// A BFL module and the diffusers modules its rows go to (one: a rename; several: a fused weight split by rows;
// swap: BFL [shift; scale] rows -> diffusers [scale; shift]).
struct BflTarget {
    std::vector<std::string> parts;
    bool swap = false;
};

// BFL module path within a double block / single block / the top level -> diffusers (models/layouts/flux_map.cpp).
const std::map<std::string, BflTarget> kDouble = {
    {"img_attn.qkv", {{"attn.to_q", "attn.to_k", "attn.to_v"}}},
    {"txt_attn.qkv", {{"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}}},
    {"img_attn.proj", {{"attn.to_out.0"}}},
    {"txt_attn.proj", {{"attn.to_add_out"}}},
    {"img_mlp.0", {{"ff.net.0.proj"}}},
    {"img_mlp.2", {{"ff.net.2"}}},
    {"txt_mlp.0", {{"ff_context.net.0.proj"}}},
    {"txt_mlp.2", {{"ff_context.net.2"}}},
    {"img_mod.lin", {{"norm1.linear"}}},
    {"txt_mod.lin", {{"norm1_context.linear"}}},
};
const std::map<std::string, BflTarget> kSingle = {
    {"linear1", {{"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"}}},
    {"linear2", {{"proj_out"}}},
    {"modulation.lin", {{"norm.linear"}}},
};
const std::map<std::string, BflTarget> kTop = {
    {"img_in", {{"x_embedder"}}},
    {"txt_in", {{"context_embedder"}}},
    {"time_in.in_layer", {{"time_text_embed.timestep_embedder.linear_1"}}},
    {"time_in.out_layer", {{"time_text_embed.timestep_embedder.linear_2"}}},
    {"vector_in.in_layer", {{"time_text_embed.text_embedder.linear_1"}}},
    {"vector_in.out_layer", {{"time_text_embed.text_embedder.linear_2"}}},
    {"guidance_in.in_layer", {{"time_text_embed.guidance_embedder.linear_1"}}},
    {"guidance_in.out_layer", {{"time_text_embed.guidance_embedder.linear_2"}}},
    {"final_layer.linear", {{"proj_out"}}},
    {"final_layer.adaLN_modulation.1", {{"norm_out.linear"}, true}},
};
// XLabs processor LoRAs (x-flux): double blocks' image (1) and text (2) streams, single blocks' qkv part of linear1
// and linear2.
const std::map<std::string, BflTarget> kXlabsDouble = {
    {"qkv_lora1", {{"attn.to_q", "attn.to_k", "attn.to_v"}}},
    {"qkv_lora2", {{"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}}},
    {"proj_lora1", {{"attn.to_out.0"}}},
    {"proj_lora2", {{"attn.to_add_out"}}},
};
const std::map<std::string, BflTarget> kXlabsSingle = {
    {"qkv_lora", {{"attn.to_q", "attn.to_k", "attn.to_v"}}},
    {"proj_lora", {{"proj_out"}}},
};

// "double_blocks.3.img_attn.qkv" -> ("transformer_blocks.3.", "img_attn.qkv"); kohya's underscores are turned back
// into BFL's dots by matching the table's names with '.' -> '_'.
bool bfl_module(std::string path, bool underscores, const std::map<std::string, BflTarget>& dbl,
                const std::map<std::string, BflTarget>& sgl, const std::map<std::string, BflTarget>* top,
                std::string& base, const BflTarget*& t) {
    const char sep = underscores ? '_' : '.';
    auto lookup = [&](const std::map<std::string, BflTarget>& m, const std::string& rest) -> const BflTarget* {
        for (const auto& [k, v] : m) {
            std::string kk = k;
            if (underscores)
                for (char& c : kk)
                    if (c == '.') c = '_';
            if (kk == rest) return &v;
        }
        return nullptr;
    };
    for (auto [prefix, to, table] : {std::tuple{"double_blocks", "transformer_blocks.", &dbl},
                                     std::tuple{"single_blocks", "single_transformer_blocks.", &sgl}}) {
        const std::string p = std::string(prefix) + sep;
        if (!starts_with(path, p)) continue;
        size_t q = p.size();
        while (q < path.size() && std::isdigit((unsigned char)path[q])) ++q;
        if (q == p.size() || q >= path.size() || path[q] != sep) return false;
        base = to + path.substr(p.size(), q - p.size()) + ".";
        t = lookup(*table, path.substr(q + 1));
        return t != nullptr;
    }
    if (!top) return false;
    base = "";
    t = lookup(*top, path);
    return t != nullptr;
}

}  // namespace

// Splits a key into its module path and role, strips the layout's prefix. False: not a LoRA key at all.
bool split_key(const std::string& key, std::string& module, Role& role) {
    static const std::pair<const char*, Role> kSuffixes[] = {
        {".lora_A.weight", Role::down}, {".lora_B.weight", Role::up},           {".lora_down.weight", Role::down},
        {".lora_up.weight", Role::up},  {".down.weight", Role::down},           {".up.weight", Role::up},
        {".alpha", Role::alpha},        {".lora_A.default.weight", Role::down}, {".lora_B.default.weight", Role::up},
    };
    for (auto [suf, r] : kSuffixes)
        if (ends_with(key, suf)) {
            module = key.substr(0, key.size() - std::string(suf).size());
            role = r;
            return true;
        }
    return false;
}

namespace {
// The family a module path in a model's original names is written for (BFL's Flux, Stability's SD3 MMDiT), after
// the layout's prefix (lora_unet_, diffusion_model.), dots or kohya's underscores alike; "" for names both have
// (final_layer) or neither.
std::string original_family(const std::string& p) {
    for (const char* n : {"joint_blocks", "x_embedder", "t_embedder", "y_embedder", "context_embedder", "pos_embed"})
        if (starts_with(p, n)) return "SD3";
    for (const char* n : {"double_blocks", "single_blocks", "img_in", "txt_in", "time_in", "vector_in", "guidance_in"})
        if (starts_with(p, n)) return "Flux";
    return "";
}

std::string strip_comfy_prefix(std::string p) {
    for (const char* pre : {"model.diffusion_model.", "diffusion_model."})
        if (starts_with(p, pre)) return p.substr(std::strlen(pre));
    return p;
}

// kohya's lora_unet_ suffix (sd-scripts lora_sd3.py: the MMDiT module path with '.' -> '_') -> the dotted path:
// "joint_blocks_0_x_block_attn_qkv" -> "joint_blocks.0.x_block.attn.qkv". The parts are joined by '.', but for
// the SD3 names that hold a '_' themselves.
std::string sd3_dotted(const std::string& u) {
    static const std::set<std::string> kNames = {"joint_blocks",     "x_block",          "context_block",
                                                 "adaLN_modulation", "x_embedder",       "t_embedder",
                                                 "y_embedder",       "context_embedder", "final_layer"};
    std::vector<std::string> parts(1);
    for (char c : u)
        if (c == '_')
            parts.emplace_back();
        else
            parts.back() += c;
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
        std::string p = parts[i];
        if (i + 1 < parts.size() && kNames.count(p + "_" + parts[i + 1])) p += "_" + parts[++i];
        out += (out.empty() ? "" : ".") + p;
    }
    return out;
}

// An SD3 module in Stability's names ("joint_blocks.0.x_block.attn.qkv") -> diffusers' modules, by the base model's
// own map (sd3_map.cpp, diffusers' convert_sd3_transformer_checkpoint_to_diffusers) run on a listing of the one
// weight `<path>.weight`: a fused qkv gives its three modules (rows), the [shift; scale] adaLN of the
// context_pre_only block and of the final layer a swap. map_sd3 tells the context_pre_only block by its context
// block lacking attn.proj, so the listing holds that weight where the model's block has attn.to_add_out.
bool sd3_module(const std::string& path, const LoraTargetFn& target, Group& g) {
    detail::Container c;
    c.path = path;
    // Rows that split in thirds and halves: the names are what is read here; add_modules splits B by the model's
    // own sizes of the modules.
    c.tensors.push_back({path + ".weight", DType::f32, {6, 1}});
    int n = 0;
    std::string rest;
    if (detail::block_key(path + ".weight", "joint_blocks.", n, rest) &&
        target("transformer_blocks." + std::to_string(n) + ".attn.to_add_out.weight"))
        c.tensors.push_back(
            {"joint_blocks." + std::to_string(n) + ".context_block.attn.proj.weight", DType::f32, {1, 1}});
    detail::Group dg;
    for (size_t i = 0; i < c.tensors.size(); ++i) dg.keys.push_back({c.tensors[i].name, i});
    detail::MapOut out{c, {}, {}};
    detail::map_sd3(dg, out);
    for (const detail::Entry& e : out.entries) {
        if (e.src != 0 || !ends_with(e.info.name, ".weight")) continue;
        g.modules.push_back(e.info.name.substr(0, e.info.name.size() - 7));
        g.swap = g.swap || e.op == detail::Op::swap;
    }
    return !g.modules.empty();
}
}  // namespace

Layout guess_layout(const std::vector<std::string>& keys) {
    bool kohya = false, comfy_down = false, comfy_a = false, xlabs = false, unet = false, flux = false, sd3 = false;
    bool kohya_te = false, peft = false;
    std::set<std::string> original;  // the families the original-name keys (kohya, ComfyUI) are written for
    for (const std::string& k : keys) {
        if (starts_with(k, "lora_te")) kohya_te = true;
        if (starts_with(k, "transformer.")) peft = true;
        if (starts_with(k, "lora_unet_")) {
            kohya = true;
            if (k.find("down_blocks") != std::string::npos || k.find("input_blocks") != std::string::npos ||
                k.find("mid_block") != std::string::npos || k.find("middle_block") != std::string::npos)
                unet = true;
            original.insert(original_family(k.substr(10)));
        }
        if (k.find(".processor.") != std::string::npos) xlabs = true;
        if (starts_with(k, "diffusion_model.") || starts_with(k, "model.diffusion_model.") ||
            k.find("double_blocks") != std::string::npos || k.find("single_blocks") != std::string::npos ||
            k.find("joint_blocks.") != std::string::npos) {
            if (k.find(".lora_down.") != std::string::npos || k.find(".lora_up.") != std::string::npos)
                comfy_down = true;
            if (k.find(".lora_A.") != std::string::npos || k.find(".lora_B.") != std::string::npos) comfy_a = true;
            if (!starts_with(k, "lora_unet_")) original.insert(original_family(strip_comfy_prefix(k)));
        }
        if (k.find("single_transformer_blocks.") != std::string::npos || k.find("x_embedder") != std::string::npos ||
            k.find("guidance_embedder") != std::string::npos)
            flux = true;
        if (k.find("pos_embed") != std::string::npos || k.find(".attn2.") != std::string::npos) sd3 = true;
    }
    // Names both families have (final_layer) say nothing; names of both: "" too (the other's keys then match no
    // module of the model and are named).
    original.erase("");
    const std::string of = original.size() == 1 ? *original.begin() : "";
    if (unet) return {"kohya", "SD/SDXL UNet"};
    if (kohya) return {"kohya", of};
    if (xlabs) return {"XLabs", "Flux"};
    if (comfy_down) return {"ComfyUI", of};
    // diffusers ignores Flux's BFL names with lora_A / lora_B (docs/lora.md); on SD3 they are ComfyUI's names.
    if (comfy_a) return {of == "SD3" ? "ComfyUI" : "BFL lora_A", of};
    if (kohya_te && !peft) return {"kohya", ""};  // kohya text-encoder keys only
    return {"diffusers/PEFT", flux ? "Flux" : sd3 ? "SD3" : ""};
}

// The diffusers modules of a module path in the file's layout; false when no module of the layout has that name.
// Original names (kohya, ComfyUI) are read as the model's family names them: Stability's SD3 names on SD3, BFL's
// elsewhere.
bool resolve_module(const Layout& l, const std::string& family, const std::string& path, const LoraTargetFn& target,
                    Group& g) {
    std::string base;
    const BflTarget* t = nullptr;
    if (l.name == "kohya") {
        if (!starts_with(path, "lora_unet_")) return false;
        if (family == "SD3") return sd3_module(sd3_dotted(path.substr(10)), target, g);
        if (!bfl_module(path.substr(10), true, kDouble, kSingle, &kTop, base, t)) return false;
    } else if (l.name == "ComfyUI" || l.name == "BFL lora_A") {
        const std::string p = strip_comfy_prefix(path);
        if (family == "SD3") return sd3_module(p, target, g);
        if (!bfl_module(p, false, kDouble, kSingle, &kTop, base, t)) return false;
    } else if (l.name == "XLabs") {
        std::string p = starts_with(path, "diffusion_model.") ? path.substr(16) : path;
        const size_t at = p.find(".processor.");
        if (at == std::string::npos) return false;
        p = p.substr(0, at) + "." + p.substr(at + 11);
        if (!bfl_module(p, false, kXlabsDouble, kXlabsSingle, nullptr, base, t)) return false;
    } else {
        // transformer.<module> as diffusers saves; bare module names and peft's base_model.model.<module> too.
        // text_encoder*.: not a transformer module.
        if (starts_with(path, "text_encoder") || starts_with(path, "unet.")) return false;
        std::string m = path;
        for (const char* pre : {"transformer.", "base_model.model."})
            if (starts_with(m, pre)) m = m.substr(std::string(pre).size());
        g.modules = {m};
        return true;
    }
    for (const std::string& part : t->parts) g.modules.push_back(base + part);
    g.swap = t->swap;
    return true;
}

// A text-encoder key's module path (split_key's, suffix removed) -> the encoder (1 CLIP-L, 2 CLIP-G / Flux's T5, 3 T5)
// and the rest of the path. kohya: lora_te_ / lora_te1_ / lora_te2_ / lora_te3_ (sd-scripts: te1 CLIP-L, te2
// CLIP-G, te3 T5); ComfyUI: text_encoders.clip_l|clip_g|t5xxl.transformer.; diffusers: text_encoder[_2|_3].
int text_encoder_index(const std::string& path, std::string& rest) {
    static const std::pair<const char*, int> kPrefixes[] = {
        {"lora_te_", 1},
        {"lora_te1_", 1},
        {"lora_te2_", 2},
        {"lora_te3_", 3},
        {"text_encoder.", 1},
        {"text_encoder_2.", 2},
        {"text_encoder_3.", 3},
        {"text_encoders.clip_l.transformer.", 1},
        {"text_encoders.clip_g.transformer.", 2},
        {"text_encoders.t5xxl.transformer.", 3},
    };
    for (auto [p, i] : kPrefixes)
        if (starts_with(path, p)) {
            rest = path.substr(std::strlen(p));
            return i;
        }
    return 0;
}

bool is_text_encoder_key(const std::string& k) {
    std::string rest;
    return text_encoder_index(k, rest) != 0;
}

// transformers' CLIP module of a text-encoder key's path: text_model.encoder.layers.N.self_attn.{q,k,v,out}_proj or
// .mlp.fc1|fc2, the linears diffusers' _load_lora_into_text_encoder ranks (kohya's underscores, diffusers' older
// to_q_lora / lora_linear_layer names as convert_state_dict_to_peft renames them). "" for anything else.
std::string clip_module(std::string p) {
    for (auto [from, to] :
         {std::pair{".to_q_lora", ".q_proj"}, std::pair{".to_k_lora", ".k_proj"}, std::pair{".to_v_lora", ".v_proj"},
          std::pair{".to_out_lora", ".out_proj"}, std::pair{".lora_linear_layer", ""}})
        if (ends_with(p, from)) p = p.substr(0, p.size() - std::strlen(from)) + to;
    for (char& c : p)
        if (c == '.') c = '_';
    static const std::regex re("text_model_encoder_layers_([0-9]+)_(self_attn_(q|k|v|out)_proj|mlp_fc[12])");
    std::smatch m;
    if (!std::regex_match(p, m, re)) return "";
    std::string tail = m[2].str();
    tail[tail.find('_', tail[0] == 's' ? 5 : 0)] = '.';  // self_attn_q_proj -> self_attn.q_proj, mlp_fc1 -> mlp.fc1
    return "text_model.encoder.layers." + m[1].str() + "." + tail;
}

}  // namespace kiln::layouts::lora_keys
