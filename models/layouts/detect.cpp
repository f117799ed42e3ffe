// Which components a file holds, from its key names (and prefixes), and the files that are not models.
//
// Prefixes: "model.diffusion_model." (ComfyUI / Stability transformer; some fine-tunes carry it twice),
// "first_stage_model." or "vae." (a checkpoint's VAE), "text_encoders.{clip_l,clip_g,t5xxl}.transformer."
// (Stability's SD3 file), "model." before a Qwen3 encoder's embed_tokens / layers / norm (transformers'
// Qwen3ForCausalLM). Unprefixed keys are told apart by their first module name (see bucket_of); "layers.N" is Z-Image's
// when its modules are attention / feed_forward / adaLN_modulation, Qwen3's when they are self_attn / mlp.
//
// CLIP-L vs CLIP-G in a separate file (both are "text_model.*"): the hidden size of
// text_model.embeddings.token_embedding.weight decides when it is a real one (768: CLIP-L, 1280: CLIP-G). Any
// other size (tiny test models) is ambiguous: the role the caller names wins, then the file name ("clip_g" in it:
// CLIP-G), else CLIP-L. A caller naming CLIP-L for a 1280-wide file gets an error, not a silent swap.
//
// Transformer families, by the keys diffusers' infer_diffusers_model_type looks for: FLUX.2 by its shared
// modulations (single_stream_modulation.lin), Z-Image by layers.N.adaLN_modulation.0 (Lumina 2, the NextDiT it
// derives from, has adaLN_modulation.1), FLUX.1 by double_blocks, SD3 by joint_blocks.
#include <algorithm>
#include <filesystem>

#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

namespace {

const char* const kDiffusionPrefix = "model.diffusion_model.";

bool contains(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

std::string first_keys(const std::vector<std::string>& keys, size_t n = 3) {
    std::string s;
    for (size_t i = 0; i < keys.size() && i < n; ++i) s += (i ? ", '" : "'") + keys[i] + "'";
    if (keys.size() > n) s += ", ...";
    return s;
}

void reject_non_models(const Container& c) {
    for (const auto& t : c.tensors) {
        const std::string& k = t.name;
        bool lora = contains(k, "lora_A") || contains(k, "lora_B") || contains(k, "lora_down") ||
                    contains(k, "lora_up") || starts_with(k, "lora_unet_") || starts_with(k, "lora_te") ||
                    (k.size() > 6 && k.compare(k.size() - 6, 6, ".alpha") == 0);
        KILN_CHECK(!lora, c.path, " is a LoRA adapter, not a model (key '", k,
                   "'); give the base model's file (Kiln applies no LoRA)");
        bool optim = starts_with(k, "state.") || starts_with(k, "param_groups") || contains(k, "exp_avg");
        KILN_CHECK(!optim, c.path, " is an optimizer state, not a model (key '", k, "')");
    }
}

// A Qwen3 decoder layer's module ("self_attn.q_proj.weight" of "layers.3.self_attn.q_proj.weight").
bool qwen3_layer_key(const std::string& k) {
    int n;
    std::string rest;
    if (!block_key(k, "layers.", n, rest)) return false;
    for (const char* p : {"self_attn.", "mlp.", "input_layernorm.", "post_attention_layernorm."})
        if (starts_with(rest, p)) return true;
    return false;
}

bool qwen3_key(const std::string& k) {
    return starts_with(k, "embed_tokens.") || k == "norm.weight" || qwen3_layer_key(k);
}

// The component an unprefixed key belongs to, by its first module name; "" if none. `llama_llm`: the file is a
// llama.cpp decoder GGUF (architecture qwen3, or blk.N keys), whose token_embd / output are its own, not T5's.
std::string bucket_of(const std::string& k, bool llama_llm) {
    auto top = k.substr(0, k.find('.'));
    if (llama_llm && (top == "token_embd" || top == "output" || top == "output_norm" || top == "blk")) return "llm";
    if (qwen3_key(k)) return "llm";
    static const char* const dm[] = {"double_blocks", "single_blocks", "img_in", "txt_in", "time_in", "vector_in",
                                     "guidance_in", "final_layer", "joint_blocks", "x_embedder", "t_embedder",
                                     "y_embedder", "context_embedder", "pos_embed", "transformer_blocks",
                                     "single_transformer_blocks", "time_text_embed", "norm_out", "proj_out",
                                     // FLUX.2 (BFL and diffusers names)
                                     "double_stream_modulation_img", "double_stream_modulation_txt",
                                     "single_stream_modulation", "time_guidance_embed",
                                     // Z-Image (original and diffusers names; its layers.N: see qwen3_key)
                                     "layers", "noise_refiner", "context_refiner", "cap_embedder", "x_pad_token",
                                     "cap_pad_token", "norm_final", "all_x_embedder", "all_final_layer"};
    for (const char* p : dm)
        if (top == p) return "transformer";
    if (starts_with(k, "encoder.block.") || starts_with(k, "encoder.final_layer_norm.") ||
        starts_with(k, "encoder.embed_tokens.") || starts_with(k, "decoder.block.") ||
        starts_with(k, "decoder.final_layer_norm.") || starts_with(k, "decoder.embed_tokens.") || top == "shared" ||
        top == "lm_head" || top == "spiece_model")
        return "t5";
    if (top == "encoder" || top == "decoder" || top == "quant_conv" || top == "post_quant_conv" || top == "bn")
        return "vae";
    if (top == "text_model" || top == "text_projection" || top == "logit_scale") return "clip";
    if (top == "token_embd" || top == "enc" || top == "dec" || top == "output") return "t5_llama";
    return "";
}

bool any_key(const Group& g, const char* prefix) {
    for (const auto& [k, i] : g.keys)
        if (starts_with(k, prefix)) return true;
    return false;
}

// layers.N.adaLN_modulation.1: Lumina 2's modulated NextDiT block (SiLU, Linear), which Z-Image's (Linear) is not.
bool lumina2_blocks(const Group& g) {
    for (const auto& [k, i] : g.keys) {
        int n;
        std::string rest;
        if (block_key(k, "layers.", n, rest) && starts_with(rest, "adaLN_modulation.1.")) return true;
    }
    return false;
}

void finish_transformer(const Container& c, Group& g) {
    Detected& d = g.det;
    const bool diffusers =
        any_key(g, "transformer_blocks.") || any_key(g, "single_transformer_blocks.") || any_key(g, "all_x_embedder.");
    std::vector<std::string> keys;
    for (const auto& [k, i] : g.keys) keys.push_back(c.tensors[i].name);
    if (any_key(g, "double_stream_modulation_img.") || any_key(g, "single_stream_modulation.") ||
        any_key(g, "time_guidance_embed."))
        d.family = "flux2";
    else if (any_key(g, "layers.") || any_key(g, "noise_refiner.") || any_key(g, "cap_embedder."))
        d.family = "z_image";
    else if (any_key(g, "double_blocks.") || any_key(g, "single_blocks.") || any_key(g, "img_in.") ||
             any_key(g, "single_transformer_blocks.") || (diffusers && any_key(g, "x_embedder.weight")))
        d.family = "flux";
    else if (any_key(g, "joint_blocks.") || (diffusers && any_key(g, "pos_embed.proj.")))
        d.family = "sd3";
    KILN_CHECK(!(d.family == "z_image" && lumina2_blocks(g)), c.path,
               ": a Lumina-Image 2.0 transformer (layers.N.adaLN_modulation.1), which Kiln does not run; Z-Image's "
               "blocks have adaLN_modulation.0");
    KILN_CHECK(!d.family.empty(), c.path, ": transformer keys of no model Kiln reads from a single file (",
               first_keys(keys), "); FLUX.1 (double_blocks.*), SD3 (joint_blocks.*), FLUX.2 ",
               "(single_stream_modulation.*) and Z-Image (layers.N.adaLN_modulation.0.*) are read");
    if (c.kind == "gguf")
        d.layout = "city96";
    else if (diffusers)
        d.layout = "diffusers";
    else if (d.family == "flux" || d.family == "flux2")
        d.layout = d.prefix.empty() ? "bfl" : "comfyui";
    else if (d.family == "z_image")
        d.layout = d.prefix.empty() ? "original" : "comfyui";
    else
        d.layout = "stability";
}

// CLIP-L or CLIP-G (see the file comment).
std::string clip_role(const Container& c, const Group& g, const std::string& role_hint) {
    for (const auto& [k, i] : g.keys) {
        if (k != "text_model.embeddings.token_embedding.weight") continue;
        const Shape& s = c.tensors[i].shape;
        if (s.size() == 2 && s[1] == 768) return "clip_l";
        if (s.size() == 2 && s[1] == 1280) return "clip_g";
    }
    if (role_hint == "clip_l" || role_hint == "clip_g") return role_hint;
    auto stem = std::filesystem::path(c.path).filename().string();
    std::transform(stem.begin(), stem.end(), stem.begin(), [](unsigned char ch) { return (char)std::tolower(ch); });
    return contains(stem, "clip_g") ? "clip_g" : "clip_l";
}

void check_gguf_architecture(const Container& c) {
    static const char* const ok[] = {"flux", "sd3", "lumina2", "z_image", "flux2", "t5", "t5encoder", "qwen3"};
    if (c.kind != "gguf" || c.arch.empty()) return;
    for (const char* a : ok)
        if (c.arch == a) return;
    KILN_FAIL(c.path, ": GGUF architecture '", c.arch,
              "' is not one Kiln runs (supported: flux, sd3, lumina2 (Z-Image), flux2 transformers; t5, t5encoder, "
              "qwen3 text encoders)");
}

// A GGUF's general.architecture and the component its tensors make agree. city96's tools name FLUX.2 files "flux"
// (their detection keys on double_blocks) and Z-Image files "lumina2" (NextDiT's keys).
bool arch_fits(const std::string& arch, const Detected& d) {
    if (arch.empty()) return true;
    if (arch == "t5" || arch == "t5encoder") return d.role == "t5xxl";
    if (arch == "qwen3") return d.role == "llm";
    if (arch == "flux") return d.family == "flux" || d.family == "flux2";
    if (arch == "lumina2") return d.family == "z_image";
    return d.family == arch;
}

}  // namespace

std::vector<Group> detect(const Container& c, const std::string& role_hint) {
    KILN_CHECK(!c.kiln, c.path, " is a Kiln model file, not a single-file layout: open it as a model");
    reject_non_models(c);
    check_gguf_architecture(c);
    bool llm = c.arch == "qwen3", llama_llm = c.arch == "qwen3";
    for (const auto& t : c.tensors) {
        llama_llm |= c.kind == "gguf" && starts_with(t.name, "blk.");
        llm |= llama_llm || qwen3_key(t.name) || (starts_with(t.name, "model.") && qwen3_key(t.name.substr(6)));
    }
    std::map<std::string, Group> groups;  // by bucket
    std::vector<std::string> unknown;
    for (size_t i = 0; i < c.tensors.size(); ++i) {
        std::string k = c.tensors[i].name, prefix, bucket;
        while (starts_with(k, kDiffusionPrefix)) {
            prefix += kDiffusionPrefix;
            k = k.substr(std::string(kDiffusionPrefix).size());
        }
        if (!prefix.empty()) {
            bucket = "transformer";
        } else if (llm && starts_with(k, "lm_head.")) {
            continue;  // a Qwen3ForCausalLM's LM head: unused by the encoder (the head of a tied file is the table)
        } else if (starts_with(k, "model.") && qwen3_key(k.substr(6))) {
            prefix = "model.";
            bucket = "llm";
        } else if (starts_with(k, "first_stage_model.") || starts_with(k, "vae.")) {
            prefix = k.substr(0, k.find('.') + 1);
            bucket = "vae";
        } else if (starts_with(k, "text_encoders.")) {
            auto dot = k.find('.', 14);
            std::string role = k.substr(14, dot == std::string::npos ? 0 : dot - 14);
            // ComfyUI checkpoints may also save CLIP's logit_scale and T5's tokenizer (spiece_model): not weights.
            if (k == "text_encoders." + role + ".logit_scale" || k == "text_encoders." + role + ".spiece_model")
                continue;
            prefix = "text_encoders." + role + ".transformer.";
            if ((role == "clip_l" || role == "clip_g" || role == "t5xxl") && starts_with(k, prefix)) bucket = role;
        } else {
            bucket = bucket_of(k, llama_llm);
        }
        if (bucket.empty()) {
            unknown.push_back(c.tensors[i].name);
            continue;
        }
        Group& g = groups[bucket];
        KILN_CHECK(g.keys.empty() || g.det.prefix == prefix, c.path, ": tensors '", c.tensors[g.keys[0].second].name,
                   "' and '", c.tensors[i].name, "' look like one component under two prefixes");
        g.det.prefix = prefix;
        g.keys.emplace_back(c.tensors[i].name.substr(prefix.size()), i);
    }
    KILN_CHECK(unknown.empty(), c.path, ": ", unknown.size(), " of ", c.tensors.size(),
               " tensors belong to no layout Kiln reads (", first_keys(unknown),
               "); Kiln reads FLUX.1 and FLUX.2 (BFL/ComfyUI), SD3 (Stability), Z-Image, LDM and FLUX.2 VAE, CLIP, T5 ",
               "and Qwen3 single files");
    KILN_CHECK(!groups.empty(), c.path, ": holds no tensors");

    std::vector<Group> out;
    for (auto& [bucket, g] : groups) {
        Detected& d = g.det;
        if (bucket == "transformer") {
            d.role = "transformer";
            finish_transformer(c, g);
        } else if (bucket == "vae") {
            d.role = "vae";
            d.layout = any_key(g, "encoder.down_blocks.") || any_key(g, "decoder.up_blocks.") ? "diffusers" : "ldm";
            if (any_key(g, "bn.running_mean")) d.family = "flux2";  // FLUX.2's latent BatchNorm statistics
        } else if (bucket == "llm") {
            d.role = "llm";
            d.layout = c.kind == "gguf" ? "llama.cpp" : "transformers";
        } else if (bucket == "t5" || bucket == "t5xxl" || bucket == "t5_llama") {
            d.role = "t5xxl";
            d.layout = c.kind == "gguf" ? "city96" : "transformers";
        } else {
            d.role = bucket == "clip" ? clip_role(c, g, role_hint) : bucket;
            d.layout = "transformers";
        }
        out.push_back(std::move(g));
    }
    // A GGUF's architecture and its tensors tell the same story (city96 files hold one component).
    for (const Group& g : out) {
        KILN_CHECK(arch_fits(c.arch, g.det), c.path, ": GGUF architecture '", c.arch, "' but tensors of a ",
                   g.det.family, g.det.family.empty() ? "" : " ", g.det.role, " ('", c.tensors[g.keys[0].second].name,
                   "')");
    }
    for (size_t a = 0; a < out.size(); ++a)
        for (size_t b = a + 1; b < out.size(); ++b)
            KILN_CHECK(out[a].det.role != out[b].det.role, c.path, ": holds two ", out[a].det.role,
                       " components (keys '", c.tensors[out[a].keys[0].second].name, "' and '",
                       c.tensors[out[b].keys[0].second].name, "')");
    return out;
}

std::vector<Entry> map_component(const Container& c, const Group& g) {
    MapOut out{c, {}, {}};
    const Detected& d = g.det;
    const bool llama_t5 = d.role == "t5xxl" && any_key(g, "enc.");
    if (d.layout == "diffusers" || d.role == "clip_l" || d.role == "clip_g")
        map_identity(g, out);
    else if (d.role == "llm")
        d.layout == "llama.cpp" ? map_qwen3_llama(g, out) : map_qwen3(g, out);
    else if (d.role == "transformer" && d.family == "flux")
        map_flux(g, out);
    else if (d.role == "transformer" && d.family == "flux2")
        map_flux2(g, out);
    else if (d.role == "transformer" && d.family == "z_image")
        map_z_image(g, out);
    else if (d.role == "vae" && d.family == "flux2")
        map_vae_flux2(g, out);
    else if (d.role == "transformer")
        map_sd3(g, out);
    else if (d.role == "vae")
        map_vae_ldm(g, out);
    else if (llama_t5)
        map_t5_llama(g, out);
    else
        map_t5(g, out);
    KILN_CHECK(out.unexplained.empty(), c.path, ": ", out.unexplained.size(), " tensors the ", d.layout, " ", d.role,
               " layout does not explain (", first_keys(out.unexplained), ")");
    std::sort(out.entries.begin(), out.entries.end(),
              [](const Entry& a, const Entry& b) { return a.info.name < b.info.name; });
    for (size_t i = 1; i < out.entries.size(); ++i)
        KILN_CHECK(out.entries[i].info.name != out.entries[i - 1].info.name, c.path, ": two tensors map to '",
                   out.entries[i].info.name, "'");
    return out.entries;
}

}  // namespace kiln::layouts::detail
