// Recognising a published model by its transformer's tensor shapes, and finding its tokenizers. The configs
// themselves are in published_configs.cpp.
//
// recognize() derives every shape it checks from the model's published transformer config, so that the numbers
// are written once: a model matches when its embedders, its block counts, the blocks' widths and the per-block
// options (qk norm, the SD3.5 dual-attention blocks, Flux's guidance embedder) all agree. A model of another size,
// depth or option set differs in at least one of them.
#include "models/layouts/published.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/core/settings.h"

namespace fs = std::filesystem;

namespace kiln::layouts {

namespace {

using nlohmann::json;

// An int field of a diffusers config; absent or null: the class's default.
int64_t field(const json& c, const char* key, int64_t def) {
    return c.contains(key) && c[key].is_number_integer() ? c[key].get<int64_t>() : def;
}

bool has(const TensorSet& ts, const std::string& name, const Shape& shape) {
    const TensorInfo* t = ts.find(name);
    return t && t->shape == shape;
}

// Blocks under `prefix` ("transformer_blocks."): one more than the largest index any tensor name carries; 0 if none.
int64_t count_blocks(const TensorSet& ts, const std::string& prefix) {
    int64_t n = 0;
    for (const TensorInfo& t : ts.tensors()) {
        if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
        const size_t dot = t.name.find('.', prefix.size());
        const std::string idx = t.name.substr(prefix.size(), dot - prefix.size());
        if (idx.empty() || !std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
        n = std::max(n, (int64_t)std::stoll(idx) + 1);
    }
    return n;
}

// Flux: x_embedder [H, in], context_embedder [H, joint], the pooled text embedder [H, pooled],
// the guidance embedder only when guidance_embeds, L joint and S single blocks of width H = heads * head_dim with an
// MLP of 4H, and proj_out [patch^2 * out, H].
bool matches_flux(const json& c, const TensorSet& ts) {
    const int64_t d = field(c, "attention_head_dim", 128), H = field(c, "num_attention_heads", 24) * d;
    const int64_t in = field(c, "in_channels", 64), out = field(c, "out_channels", in), p = field(c, "patch_size", 1);
    const int64_t L = field(c, "num_layers", 19), S = field(c, "num_single_layers", 38), mlp = 4 * H;
    const bool guidance = c.value("guidance_embeds", false);
    const std::string tb = "transformer_blocks.", sb = "single_transformer_blocks.";
    const std::string last = tb + std::to_string(L - 1) + ".", last_single = sb + std::to_string(S - 1) + ".";
    return has(ts, "x_embedder.weight", {H, in}) &&
           has(ts, "context_embedder.weight", {H, field(c, "joint_attention_dim", 4096)}) &&
           has(ts, "time_text_embed.timestep_embedder.linear_1.weight", {H, 256}) &&
           has(ts, "time_text_embed.text_embedder.linear_1.weight", {H, field(c, "pooled_projection_dim", 768)}) &&
           guidance == has(ts, "time_text_embed.guidance_embedder.linear_1.weight", {H, 256}) &&
           guidance == (ts.find("time_text_embed.guidance_embedder.linear_1.weight") != nullptr) &&
           count_blocks(ts, tb) == L && count_blocks(ts, sb) == S && has(ts, tb + "0.attn.to_q.weight", {H, H}) &&
           has(ts, tb + "0.attn.norm_q.weight", {d}) && has(ts, last + "ff.net.0.proj.weight", {mlp, H}) &&
           has(ts, last + "ff_context.net.2.weight", {H, mlp}) && has(ts, last_single + "proj_mlp.weight", {mlp, H}) &&
           has(ts, last_single + "proj_out.weight", {H, H + mlp}) && has(ts, "proj_out.weight", {p * p * out, H});
}

// SD3: the patch embedder [H, in, p, p] with a (M*M)-position table, context [H, joint] and
// pooled [H, pooled] embedders, L joint blocks (the last one context_pre_only: its context norm gives shift and
// scale only, [2H, H]), attn2 and a 9H-wide norm1 exactly in the dual_attention_layers, qk norms [head_dim] exactly
// when qk_norm is set, and proj_out [p^2 * out, H].
bool matches_sd3(const json& c, const TensorSet& ts) {
    const int64_t d = field(c, "attention_head_dim", 64), H = field(c, "num_attention_heads", 18) * d;
    const int64_t in = field(c, "in_channels", 16), out = field(c, "out_channels", in), p = field(c, "patch_size", 2);
    const int64_t L = field(c, "num_layers", 18), M = field(c, "pos_embed_max_size", 96);
    const bool qk = c.contains("qk_norm") && c["qk_norm"].is_string();
    std::set<int64_t> dual;
    if (c.contains("dual_attention_layers") && c["dual_attention_layers"].is_array())
        for (const json& i : c["dual_attention_layers"]) dual.insert(i.get<int64_t>());
    const std::string tb = "transformer_blocks.";
    if (!(has(ts, "pos_embed.proj.weight", {H, in, p, p}) && has(ts, "pos_embed.pos_embed", {1, M * M, H}) &&
          has(ts, "context_embedder.weight", {H, field(c, "joint_attention_dim", 4096)}) &&
          has(ts, "time_text_embed.timestep_embedder.linear_1.weight", {H, 256}) &&
          has(ts, "time_text_embed.text_embedder.linear_1.weight", {H, field(c, "pooled_projection_dim", 2048)}) &&
          count_blocks(ts, tb) == L &&
          has(ts, tb + std::to_string(L - 1) + ".norm1_context.linear.weight", {2 * H, H}) &&
          has(ts, "proj_out.weight", {p * p * out, H})))
        return false;
    for (int64_t i = 0; i < L; ++i) {
        const std::string b = tb + std::to_string(i) + ".";
        const bool is_dual = dual.count(i) > 0;
        if (!has(ts, b + "attn.to_q.weight", {H, H}) || !has(ts, b + "norm1.linear.weight", {(is_dual ? 9 : 6) * H, H}))
            return false;
        if (is_dual != has(ts, b + "attn2.to_q.weight", {H, H}) ||
            is_dual != (ts.find(b + "attn2.to_q.weight") != nullptr))
            return false;
        if (qk != (ts.find(b + "attn.norm_q.weight") != nullptr) || (qk && !has(ts, b + "attn.norm_q.weight", {d})))
            return false;
    }
    return true;
}

// Z-Image: the patch embedder [D, p^2 f in] and final linear [p^2 f out, D] of the (2, 1) patch entry, caption embedder
// RMSNorm [cap] then [D, cap], n_layers / n_refiner_layers blocks (noise and context refiners alike), attention
// [heads hd, D] and [kv_heads hd, D] with hd = D / heads, qk norms [hd] exactly when qk_norm, SwiGLU hidden
// int(D / 3 * 8), modulation [4D, min(D, 256)] in the modulated blocks, and the pad tokens [1, D].
bool matches_z_image(const json& c, const TensorSet& ts) {
    const int64_t D = field(c, "dim", 3840), heads = field(c, "n_heads", 30), kv = field(c, "n_kv_heads", heads);
    const int64_t in = field(c, "in_channels", 16), cap = field(c, "cap_feat_dim", 2560);
    const int64_t L = field(c, "n_layers", 30), R = field(c, "n_refiner_layers", 2);
    if (heads <= 0 || D % heads) return false;
    const int64_t hd = D / heads, ffn = D * 8 / 3, adaln = std::min<int64_t>(D, 256);
    const bool qk = c.value("qk_norm", true);
    auto patch = [&](const char* key) {  // all_patch_size[0], all_f_patch_size[0]; diffusers' "2-1" entry
        return c.contains(key) && c[key].is_array() && c[key].size() == 1 && c[key][0].is_number_integer()
                   ? c[key][0].get<int64_t>()
                   : -1;
    };
    const int64_t p = patch("all_patch_size"), f = patch("all_f_patch_size");
    if (p != 2 || f != 1) return false;  // the single file's x_embedder / final_layer are diffusers' "2-1"
    if (!(has(ts, "all_x_embedder.2-1.weight", {D, p * p * f * in}) &&
          has(ts, "all_final_layer.2-1.linear.weight", {p * p * f * in, D}) &&
          has(ts, "cap_embedder.0.weight", {cap}) && has(ts, "cap_embedder.1.weight", {D, cap}) &&
          has(ts, "x_pad_token", {1, D}) && has(ts, "cap_pad_token", {1, D}) && count_blocks(ts, "layers.") == L &&
          count_blocks(ts, "noise_refiner.") == R && count_blocks(ts, "context_refiner.") == R))
        return false;
    for (const std::string& b : {std::string("layers.0."), "layers." + std::to_string(L - 1) + ".",
                                 std::string("noise_refiner.0."), std::string("context_refiner.0.")}) {
        const bool modulated = b.rfind("context_refiner.", 0) != 0;
        if (!has(ts, b + "attention.to_q.weight", {heads * hd, D}) ||
            !has(ts, b + "attention.to_k.weight", {kv * hd, D}) || !has(ts, b + "feed_forward.w1.weight", {ffn, D}) ||
            !has(ts, b + "feed_forward.w2.weight", {D, ffn}) || qk != has(ts, b + "attention.norm_q.weight", {hd}) ||
            modulated != has(ts, b + "adaLN_modulation.0.weight", {4 * D, adaln}))
            return false;
    }
    return true;
}

// FLUX.2: x_embedder [H, in], context_embedder [H, joint], the timestep embedder [H, channels], the guidance embedder
// exactly when guidance_embeds, the shared modulations [6H, H] (double, img and txt) and [3H, H] (single), L double
// and S single blocks of width H = heads * head_dim with an MLP of mlp_ratio H (SwiGLU: linear_in 2 mlp rows), the
// single blocks' fused [3H + 2 mlp, H] in and [H, H + mlp] out, and proj_out [patch^2 out, H].
bool matches_flux2(const json& c, const TensorSet& ts) {
    const int64_t d = field(c, "attention_head_dim", 128), H = field(c, "num_attention_heads", 48) * d;
    const int64_t in = field(c, "in_channels", 128), out = field(c, "out_channels", in), p = field(c, "patch_size", 1);
    const int64_t L = field(c, "num_layers", 8), S = field(c, "num_single_layers", 48);
    const int64_t mlp = (int64_t)(H * c.value("mlp_ratio", 3.0)), ch = field(c, "timestep_guidance_channels", 256);
    const bool guidance = c.value("guidance_embeds", true);
    const std::string tb = "transformer_blocks.", sb = "single_transformer_blocks.";
    const std::string last = tb + std::to_string(L - 1) + ".", last_single = sb + std::to_string(S - 1) + ".";
    const std::string g = "time_guidance_embed.guidance_embedder.linear_1.weight";
    return has(ts, "x_embedder.weight", {H, in}) &&
           has(ts, "context_embedder.weight", {H, field(c, "joint_attention_dim", 15360)}) &&
           has(ts, "time_guidance_embed.timestep_embedder.linear_1.weight", {H, ch}) &&
           guidance == has(ts, g, {H, ch}) && guidance == (ts.find(g) != nullptr) &&
           has(ts, "double_stream_modulation_img.linear.weight", {6 * H, H}) &&
           has(ts, "double_stream_modulation_txt.linear.weight", {6 * H, H}) &&
           has(ts, "single_stream_modulation.linear.weight", {3 * H, H}) && count_blocks(ts, tb) == L &&
           count_blocks(ts, sb) == S && has(ts, tb + "0.attn.to_q.weight", {H, H}) &&
           has(ts, tb + "0.attn.norm_q.weight", {d}) && has(ts, last + "ff.linear_in.weight", {2 * mlp, H}) &&
           has(ts, last + "ff_context.linear_out.weight", {H, mlp}) &&
           has(ts, last_single + "attn.to_qkv_mlp_proj.weight", {3 * H + 2 * mlp, H}) &&
           has(ts, last_single + "attn.to_out.weight", {H, H + mlp}) && has(ts, "norm_out.linear.weight", {2 * H, H}) &&
           has(ts, "proj_out.weight", {p * p * out, H});
}

// What each tokenizer class needs (the files read_tokenizer_folder reads): `required` to be usable, `fetch` to
// behave as published (tokenizer_config.json carries model_max_length; special_tokens_map.json the pad token).
struct Need {
    std::string component;
    std::vector<std::string> required, fetch;
};

std::vector<Need> needs(const Published& p) {
    std::vector<Need> v;
    for (const std::string& tok : p.tokenizers) {
        const json& entry = p.model_index.at(tok);
        const auto* cls = models::find_component_class(entry.at(1).get<std::string>());
        KILN_CHECK(cls, "internal: ", p.repo, "'s ", tok, " has a class Kiln does not read");
        Need n{tok, models::tokenizer_format(cls->kind).model_files, {}};
        n.fetch = n.required;
        n.fetch.insert(n.fetch.end(), {"special_tokens_map.json", "tokenizer_config.json"});
        v.push_back(std::move(n));
    }
    return v;
}

// Every required file is there (a Hugging Face snapshot's files are links into blobs/: followed).
bool holds(const fs::path& dir, const Need& n) {
    std::error_code ec;
    for (const std::string& f : n.required)
        if (!fs::is_regular_file(dir / f, ec)) return false;
    return true;
}

// The snapshots of a cached repository, refs/main's first (the one huggingface_hub would use), then the rest by name.
std::vector<fs::path> snapshots(const fs::path& repo_dir) {
    std::vector<fs::path> v;
    std::error_code ec;
    if (!fs::is_directory(repo_dir / "snapshots", ec)) return v;
    for (const auto& e : fs::directory_iterator(repo_dir / "snapshots", ec))
        if (e.is_directory(ec)) v.push_back(e.path());
    std::sort(v.begin(), v.end());
    std::ifstream ref(repo_dir / "refs" / "main");
    std::string main;
    if (ref >> main) {
        auto it = std::find(v.begin(), v.end(), repo_dir / "snapshots" / main);
        if (it != v.end()) std::rotate(v.begin(), it, it + 1);
    }
    return v;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

// One line: which files of which tokenizers to fetch, from where, and how.
[[noreturn]] void fail_missing(const Published& p, const std::vector<const Need*>& missing, const std::string& where,
                               const std::string& dir) {
    std::vector<std::string> files, patterns;
    for (const Need* n : missing) {
        files.push_back(n->component + "/{" + join(n->fetch, ",") + "}");
        patterns.push_back("'" + n->component + "/*'");
    }
    const std::string name = p.repo.substr(p.repo.find('/') + 1);
    const std::string cli = "huggingface-cli download " + p.repo + " --include " + join(patterns, " ");
    if (!dir.empty())
        KILN_FAIL(name, "'s tokenizers were not found in ", where, ": put ", join(files, " and "),
                  " there, from https://huggingface.co/", p.repo, " (e.g. `", cli, " --local-dir ", dir, "`)");
    KILN_FAIL(name, "'s tokenizers were not found in ", where, ": fetch ", join(files, " and "),
              " from https://huggingface.co/", p.repo, " (e.g. `", cli, "`) or pass --tokenizers DIR");
}

}  // namespace

const Published* recognize(const std::string& family, const TensorSet& transformer) {
    const Published* found = nullptr;
    for (const Published& p : published_models()) {
        if (p.family != family) continue;
        const json& c = p.configs.at("transformer");
        const bool match = family == "flux"      ? matches_flux(c, transformer)
                           : family == "sd3"     ? matches_sd3(c, transformer)
                           : family == "z_image" ? matches_z_image(c, transformer)
                                                 : family == "flux2" && matches_flux2(c, transformer);
        if (!match) continue;
        KILN_CHECK(!found, "internal: ", transformer.source(), " matches both ", found->id, " and ", p.id);
        found = &p;
    }
    return found;
}

std::map<std::string, std::string> find_tokenizers(const Published& p, const std::string& dir,
                                                   const std::string& hf_home) {
    const std::vector<Need> all = needs(p);
    std::map<std::string, std::string> found;
    std::vector<const Need*> missing;
    if (!dir.empty()) {
        // A pipeline folder (tokenizer/, tokenizer_2/, ...), or the one tokenizer itself when only one is needed.
        for (const Need& n : all) {
            if (holds(fs::path(dir) / n.component, n))
                found[n.component] = (fs::path(dir) / n.component).string();
            else if (all.size() == 1 && holds(dir, n))
                found[n.component] = dir;
            else
                missing.push_back(&n);
        }
        if (!missing.empty()) fail_missing(p, missing, dir, dir);
        return found;
    }
    // The Hugging Face cache: hub/models--<org>--<name>/snapshots/<revision>/<tokenizer>/.
    const std::string home = hf_home.empty() ? settings_from_env().hf_home : hf_home;
    const size_t slash = p.repo.find('/');
    const fs::path repo_dir =
        fs::path(home) / "hub" / ("models--" + p.repo.substr(0, slash) + "--" + p.repo.substr(slash + 1));
    const std::vector<fs::path> snaps = home.empty() ? std::vector<fs::path>{} : snapshots(repo_dir);
    for (const Need& n : all) {
        auto it =
            std::find_if(snaps.begin(), snaps.end(), [&](const fs::path& s) { return holds(s / n.component, n); });
        if (it != snaps.end())
            found[n.component] = (*it / n.component).string();
        else
            missing.push_back(&n);
    }
    if (!missing.empty())
        fail_missing(p, missing,
                     home.empty() ? "the Hugging Face cache (neither HF_HOME nor HOME is set)"
                                  : repo_dir.string() + "/snapshots",
                     "");
    return found;
}

}  // namespace kiln::layouts
