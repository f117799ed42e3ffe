#include "converter/assemble.h"

#include <algorithm>
#include <filesystem>

#include "converter/tokenizer_files.h"
#include "models/layouts/layouts.h"
#include "models/layouts/published.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"

namespace kiln::converter {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::Family;

bool ComponentFiles::any() const {
    return !(model.empty() && diffusion_model.empty() && vae.empty() && clip_l.empty() && clip_g.empty() &&
             t5xxl.empty() && llm.empty() && config.empty());
}

const Part* Assembly::find(const std::string& name) const {
    for (auto& p : parts)
        if (p.name == name) return &p;
    return nullptr;
}

namespace {

// A file given for one role, and the flag that gave it.
struct Given {
    std::string flag, path, role;  // role: "transformer", "vae", "clip_l", "clip_g", "t5xxl", "llm"
};

const char* flag_of(const std::string& role) {
    if (role == "transformer") return "--diffusion-model";
    if (role == "vae") return "--vae";
    if (role == "clip_l") return "--clip-l";
    if (role == "clip_g") return "--clip-g";
    if (role == "llm") return "--text-encoder";
    return "--t5xxl";
}

std::string what_role(const std::string& role) {
    if (role == "transformer") return "a diffusion transformer";
    if (role == "vae") return "a VAE";
    if (role == "clip_l") return "a CLIP-L text encoder";
    if (role == "clip_g") return "a CLIP-G text encoder";
    if (role == "llm") return "a Qwen3 text encoder";
    return "a T5 text encoder";
}

std::string held(const layouts::FileInfo& info) {
    std::string s;
    for (auto& d : info.components)
        s += (s.empty() ? "" : ", ") + what_role(d.role) + (d.family.empty() ? "" : " (" + d.family + ")");
    return s.empty() ? "nothing Kiln reads" : s;
}

// The layout role of `g` in its file, checked: the file must hold that role (CLIP-L and CLIP-G files are told
// apart later, by the config's hidden size, so a CLIP file answers either).
const layouts::Detected& detected_role(const layouts::FileInfo& info, const Given& g) {
    auto is_clip = [](const std::string& r) { return r == "clip_l" || r == "clip_g"; };
    for (auto& d : info.components)
        if (d.role == g.role) return d;
    for (auto& d : info.components)
        if (is_clip(d.role) && is_clip(g.role)) return d;
    KILN_FAIL(g.path, ": given as ", g.flag, " but holds ", held(info), ", not ", what_role(g.role));
}

// A single file or Kiln file holding a VAE (a folder is one component).
bool holds_vae(const std::string& path, const std::map<std::string, layouts::FileInfo>& infos) {
    if (auto it = infos.find(path); it != infos.end())
        return std::any_of(it->second.components.begin(), it->second.components.end(),
                           [](const layouts::Detected& d) { return d.role == "vae"; });
    if (!layouts::is_kiln_file(path)) return false;
    GgufFile f = GgufFile::open(path);
    for (auto& c : f.get_string_array("kiln.components"))
        if (const models::ComponentClass* k = models::find_component_class(f.get_string("kiln." + c + ".class"));
            k && k->role == models::Role::vae)
            return true;
    return false;
}

// The files given, each with its role; a --model file gives every component it holds, a --diffusion-model file its
// VAE when no other file gives one.
std::vector<Given> given_files(const ComponentFiles& f, std::map<std::string, layouts::FileInfo>& infos) {
    std::vector<Given> out;
    if (!f.model.empty()) {
        layouts::FileInfo info = layouts::inspect(f.model);
        for (auto& d : info.components) out.push_back({"--model", f.model, d.role});
        infos[f.model] = std::move(info);
    }
    const std::pair<const char*, const std::string*> flags[] = {{"transformer", &f.diffusion_model},
                                                                {"vae", &f.vae},
                                                                {"clip_l", &f.clip_l},
                                                                {"clip_g", &f.clip_g},
                                                                {"t5xxl", &f.t5xxl},
                                                                {"llm", &f.llm}};
    for (auto& [role, path] : flags) {
        if (path->empty()) continue;
        KILN_CHECK(fs::exists(*path), *path, ": no such file or folder (", flag_of(role), ")");
        // A flag overrides what --model holds for the same role.
        const std::string r = role;  // (clang: a lambda does not capture a structured binding)
        std::erase_if(out, [&](const Given& g) { return g.role == r; });
        out.push_back({flag_of(role), *path, role});
        if (!fs::is_directory(*path) && !layouts::is_kiln_file(*path) && !infos.count(*path))
            infos[*path] = layouts::inspect(*path);
    }
    // The transformer's file may hold the VAE too (Stability's SD3 files, ComfyUI checkpoints, a Kiln file): it gives
    // the VAE when neither --vae nor --model does.
    const std::string& t = f.diffusion_model;
    if (!t.empty() && std::none_of(out.begin(), out.end(), [](const Given& g) { return g.role == "vae"; }) &&
        holds_vae(t, infos))
        out.push_back({"--diffusion-model", t, "vae"});
    return out;
}

// Configs, scheduler and tokenizers of a diffusers pipeline folder (--config): component -> (class, text, folder).
struct ConfigDir {
    std::string dir, pipeline_class, model_index_text;
    std::map<std::string, std::pair<std::string, std::string>> configs;  // component -> (class, config text)
    std::map<std::string, std::string> tokenizers;                       // component -> folder
    std::vector<std::string> tokenizers_absent;                          // listed, without a folder
};

ConfigDir read_config_dir(const std::string& dir) {
    ConfigDir c;
    c.dir = dir;
    const fs::path mi = fs::path(dir) / "model_index.json";
    KILN_CHECK(fs::exists(mi), dir, ": --config needs a diffusers pipeline folder (model_index.json, the ",
               "components' config.json and the tokenizer folders; weights are not read)");
    c.model_index_text = read_text(mi);
    json j = parse_json_object(c.model_index_text, mi.string());
    KILN_CHECK(j.contains("_class_name") && j["_class_name"].is_string(), mi.string(), ": no _class_name");
    c.pipeline_class = j["_class_name"].get<std::string>();
    for (auto& [name, v] : j.items()) {
        if (name.empty() || name[0] == '_' || !v.is_array() || v.size() != 2 || !v[1].is_string()) continue;
        const std::string cls = v[1].get<std::string>();
        const fs::path sub = fs::path(dir) / name;
        if (is_supported_tokenizer(cls)) {
            if (fs::is_directory(sub))
                c.tokenizers[name] = sub.string();
            else
                c.tokenizers_absent.push_back(name);
            continue;
        }
        for (const char* f : {"config.json", "scheduler_config.json"})
            if (fs::exists(sub / f)) c.configs[name] = {cls, read_text(sub / f)};
    }
    return c;
}

// The component a role fills in the family's pipeline.
std::string component_of(const Family& fam, const std::string& role) {
    if (role == "transformer" || role == "vae") return role;
    for (auto& e : fam.encoders)
        if (role == e.file_role) return e.component;
    KILN_FAIL(fam.name, " pipelines have no ", what_role(role).substr(2), " (", flag_of(role), ")");  // "a ..."
}

// The family of the transformer given.
const Family& transformer_family(const Given& t, const std::map<std::string, layouts::FileInfo>& infos) {
    auto it = infos.find(t.path);
    if (it != infos.end()) {
        const layouts::Detected& d = detected_role(it->second, t);
        const Family* f = models::file_family(d.family);
        KILN_CHECK(f, t.path, ": a transformer of family '", d.family, "', which Kiln does not run from single files");
        return *f;
    }
    KILN_FAIL(t.path, ": ", t.flag, " takes a single file (", "a diffusers folder or Kiln file goes to --model)");
}

// Hidden size of a CLIP or T5 set from its token embedding, to tell CLIP-L from CLIP-G and catch encoders of another
// model; -1 when the set has no such tensor.
int64_t embedding_width(const layouts::TensorSet& s) {
    for (const char* n : {"text_model.embeddings.token_embedding.weight", "shared.weight",
                          "encoder.embed_tokens.weight", "embed_tokens.weight"})
        if (const layouts::TensorInfo* t = s.find(n); t && t->shape.size() == 2) return t->shape[1];
    return -1;
}

int64_t config_width(const json& cfg) {
    for (const char* k : {"hidden_size", "d_model"})
        if (cfg.contains(k) && cfg[k].is_number_integer()) return cfg[k].get<int64_t>();
    return -1;
}

// A text encoder file must have the width its config says: CLIP-G (1280 in SD3) given as CLIP-L (768) is caught here
// with the flags named, not deep in the graph.
void check_encoder_width(const Part& p, const Given& g) {
    auto set = layouts::open_component(g.path, p.role);
    const int64_t have = embedding_width(*set), want = config_width(parse_json_object(p.config_text, p.name));
    KILN_CHECK(have < 0 || want < 0 || have == want, g.path, ": given as ", g.flag, " but its hidden size is ", have,
               " where this model's ", p.name, " has ", want,
               have == 1280  ? " (it looks like CLIP-G: pass it with --clip-g)"
               : have == 768 ? " (it looks like CLIP-L: pass it with --clip-l)"
                             : " (an encoder of another model)");
}

// The component of a Kiln file given for `g`: the one named like p, else the only one of p's role; its config too.
void kiln_file_part(Part& p, const Given& g) {
    GgufFile f = GgufFile::open(g.path);
    const bool want_vae = g.role == "vae", want_transformer = g.role == "transformer";
    std::string pick;
    for (auto& c : f.get_string_array("kiln.components")) {
        const models::ComponentClass* k = models::find_component_class(f.get_string("kiln." + c + ".class"));
        if (!k) continue;
        const bool ok = want_vae           ? k->role == models::Role::vae
                        : want_transformer ? k->role == models::Role::transformer
                                           : k->role == models::Role::text_encoder;
        if (ok && (pick.empty() || c == p.name)) pick = c;
    }
    KILN_CHECK(!pick.empty(), g.path, ": given as ", g.flag, " but this Kiln file holds no ", what_role(g.role));
    p.role = pick;
    p.cls = f.get_string("kiln." + pick + ".class");
    p.config_text = f.get_string("kiln." + pick + ".config");
}

// A VAE or encoder taken from a file that also holds a transformer of another family (Stability's SD3 file given as
// Flux's --vae): the shapes of SD3's and Flux's VAEs agree, so the file's own transformer is what tells them apart.
void check_same_family(const layouts::FileInfo& info, const Given& g, const Family& fam) {
    if (g.role == "transformer") return;
    for (auto& d : info.components) {
        const Family* other = d.role == "transformer" ? models::file_family(d.family) : nullptr;
        KILN_CHECK(!other || other == &fam, g.path, ": given as ", g.flag, " but it is a ", other->name,
                   " file (it holds a ", other->name, " transformer); this pipeline's transformer is ", fam.name);
    }
}

// FLUX.1's VAE (ae.safetensors, 16 latent channels) and FLUX.2's (flux2-vae.safetensors: 32 channels and the latent
// BatchNorm bn.*) are told apart by bn.*, and named, before their tensors are counted against the other's config.
void check_vae_kind(const layouts::Detected& d, const Part& p, const Given& g, const Family& fam) {
    const models::ComponentClass* k = models::find_component_class(p.cls);
    const bool want2 = k && k->kind == models::ComponentKind::vae_flux2, have2 = d.family == "flux2";
    KILN_CHECK(
        want2 == have2, g.path, ": given as ", g.flag, " but it is ",
        have2 ? "FLUX.2's VAE (it has the latent BatchNorm bn.*)" : "a FLUX.1-style VAE (no latent BatchNorm bn.*)",
        "; ", fam.name, " needs ",
        want2 ? std::string("FLUX.2's VAE (flux2-vae.safetensors)")
              : "an " + p.cls + " (FLUX.1's ae.safetensors for Flux and Z-Image)");
}

// Where the configs and tokenizers come from: component -> (class, config text), tokenizer -> folder.
struct Sources {
    std::map<std::string, std::pair<std::string, std::string>> configs;
    std::map<std::string, std::string> tokenizers;
};

// --config DIR, with --tokenizers DIR (tokenizer/, tokenizer_2/, ...) overriding its tokenizers and filling those
// it lacks.
Sources from_config_dir(const ComponentFiles& f, const Family& fam, const std::string& transformer, Assembly& a) {
    ConfigDir c = read_config_dir(f.config);
    const Family* cf = models::find_pipeline_family(c.pipeline_class);
    KILN_CHECK(cf == &fam, f.config, ": --config is a ", c.pipeline_class, " but ", transformer, " holds a ", fam.name,
               " transformer");
    a.configs_from = "--config " + f.config;
    a.pipeline_class = c.pipeline_class;
    a.model_index_text = c.model_index_text;
    Sources s{std::move(c.configs), std::move(c.tokenizers)};
    for (const std::string& k : c.tokenizers_absent) s.tokenizers[k] = "";
    std::string absent;
    for (auto it = s.tokenizers.begin(); it != s.tokenizers.end();) {
        if (!f.tokenizers.empty() && fs::is_directory(fs::path(f.tokenizers) / it->first))
            it->second = (fs::path(f.tokenizers) / it->first).string();
        if (!it->second.empty()) {
            ++it;
            continue;
        }
        absent += (absent.empty() ? "" : ", ") + it->first + "/";
        it = s.tokenizers.erase(it);
    }
    if (!absent.empty())
        a.tokenizers_missing = "no tokenizer folder " + absent + " in " + f.config +
                               (f.tokenizers.empty() ? "" : " or " + f.tokenizers) +
                               ": pass --tokenizers DIR, a folder holding them";
    return s;
}

// The published model the transformer's shapes identify; its tokenizers from --tokenizers or the HF cache.
Sources from_published(const ComponentFiles& f, const std::string& family, const Family& fam,
                       const layouts::TensorSet& transformer, Assembly& a) {
    const layouts::Published* p = layouts::recognize(family, transformer);
    KILN_CHECK(p, transformer.source(), ": a ", fam.name, " transformer of a size Kiln has no published config for; ",
               "pass --config DIR, a diffusers pipeline folder of the same model (its *.json and tokenizer files are ",
               "read, never its weights)");
    a.configs_from = "the published " + p->id + " (" + p->repo + ")";
    a.pipeline_class = p->model_index.value("_class_name", "");
    a.model_index_text = p->model_index.dump(2);
    Sources s;
    for (auto& [k, cfg] : p->configs) s.configs[k] = {cfg.value("_class_name", ""), cfg.dump(2)};
    try {  // needed only to encode prompts: `kiln forward` of the transformer runs without them
        s.tokenizers = layouts::find_tokenizers(*p, f.tokenizers, f.hf_home);
    } catch (const Error& e) {
        a.tokenizers_missing = e.what();
    }
    return s;
}

}  // namespace

Assembly assemble(const ComponentFiles& f) {
    std::map<std::string, layouts::FileInfo> infos;
    std::vector<Given> given = given_files(f, infos);
    auto find_role = [&](const std::string& role) -> const Given* {
        for (auto& g : given)
            if (g.role == role) return &g;
        return nullptr;
    };
    const Given* tg = find_role("transformer");
    KILN_CHECK(tg, "no diffusion transformer: pass --diffusion-model FILE (or --model FILE holding one)");
    const Family& fam = transformer_family(*tg, infos);
    std::unique_ptr<layouts::TensorSet> tset = layouts::open_component(tg->path, "transformer");

    Assembly a;
    a.family = fam.name;
    Sources src = f.config.empty() ? from_published(f, detected_role(infos.at(tg->path), *tg).family, fam, *tset, a)
                                   : from_config_dir(f, fam, tg->path, a);
    auto& configs = src.configs;
    auto& tokenizers = src.tokenizers;

    auto config_part = [&](const std::string& name) {
        auto it = configs.find(name);
        KILN_CHECK(it != configs.end(), a.configs_from, ": no config for component '", name, "'");
        Part p;
        p.name = name;
        p.cls = it->second.first;
        p.config_text = it->second.second;
        return p;
    };
    auto add_given = [&](const Given& g) {
        Part p = config_part(component_of(fam, g.role));
        p.path = g.path;
        if (fs::is_directory(g.path)) {  // a component folder brings its own config
            p.from = Part::From::diffusers_dir;
            const fs::path cfg = fs::path(g.path) / "config.json";
            KILN_CHECK(fs::exists(cfg), g.path, ": given as ", g.flag, " but has no config.json");
            p.config_text = read_text(cfg);
        } else if (layouts::is_kiln_file(g.path)) {  // so does a Kiln file
            p.from = Part::From::kiln_file;
            kiln_file_part(p, g);
        } else {
            p.from = Part::From::layout_file;
            p.role = detected_role(infos.at(g.path), g).role;
            check_same_family(infos.at(g.path), g, fam);
            if (g.role == "vae") check_vae_kind(detected_role(infos.at(g.path), g), p, g, fam);
            if (g.role != "transformer" && g.role != "vae") check_encoder_width(p, g);
            // Names only, before any weight is read: missing tensors are counted and named here.
            match_tensors(*open_part(p), p.cls, parse_json_object(p.config_text, p.name),
                          p.name + "'s config from " + a.configs_from, nullptr);
        }
        a.parts.push_back(std::move(p));
    };
    add_given(*tg);
    if (const Given* g = find_role("vae")) {
        add_given(*g);
        if (g->flag == "--diffusion-model")
            a.notes.push_back("the VAE from " + fs::path(g->path).filename().string() +
                              ", which holds one beside the transformer (--vae FILE gives another)");
    }
    a.parts.push_back(config_part("scheduler"));
    for (auto& e : fam.encoders)
        if (const Given* g = find_role(e.file_role)) add_given(*g);
    for (auto& [name, dir] : tokenizers) {
        Part p;
        p.name = name;
        p.cls = tokenizer_class_of_dir(dir);
        p.from = Part::From::tokenizer_dir;
        p.path = dir;
        a.parts.push_back(std::move(p));
    }
    for (auto& g : given)  // a role the family does not have (a CLIP-G beside Flux) is named, not ignored
        if (g.role != "transformer" && g.role != "vae") component_of(fam, g.role);
    // model_index.json as the parts make it: the components no file gave are left out.
    json mi = parse_json_object(a.model_index_text, "model_index");
    for (auto it = mi.begin(); it != mi.end();) {
        const bool component = !it.key().empty() && it.key()[0] != '_' && it.value().is_array();
        it = component && !a.find(it.key()) ? mi.erase(it) : std::next(it);
    }
    a.model_index_text = mi.dump(2);
    return a;
}

std::unique_ptr<layouts::TensorSet> open_part(const Part& p) {
    if (p.from == Part::From::kiln_file) return layouts::open_kiln_component(p.path, p.role);
    KILN_CHECK(p.from == Part::From::layout_file, "internal: open_part of a part without a tensor file");
    auto set = layouts::open_component(p.path, p.role);
    const models::ComponentClass* k = models::find_component_class(p.cls);
    if (p.role == "clip_l" && k && k->kind == models::ComponentKind::clip_text_projection)
        return layouts::with_identity_projection(std::move(set));
    // A Qwen3 file is read under Qwen3Model's names; Qwen3ForCausalLM keeps them under "model." (FLUX.2 [klein]).
    if (p.role == "llm" && k && *k->weights_prefix) return layouts::with_prefix(std::move(set), k->weights_prefix);
    return set;
}

std::string Assembly::incomplete() const {
    const Family* fam = nullptr;
    for (auto& f : models::families())
        if (family == f.name) fam = &f;
    KILN_CHECK(fam, "internal: assembly of unknown family ", family);
    std::string missing;
    auto need = [&](const std::string& name, const std::string& role) {
        if (!find(name)) missing += (missing.empty() ? "" : ", ") + what_role(role) + " (" + flag_of(role) + ")";
    };
    need("vae", "vae");
    for (auto& e : fam->encoders)
        if (!e.optional) need(e.component, e.file_role);
    if (!missing.empty()) return std::string(fam->name) + " also needs " + missing;
    return tokenizers_missing;
}

}  // namespace kiln::converter
