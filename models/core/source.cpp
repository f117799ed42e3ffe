#include "models/core/source.h"

#include <filesystem>
#include <fstream>

#include "converter/convert.h"
#include "converter/tokenizer_files.h"
#include "models/core/forward.h"
#include "models/layouts/layouts.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"

namespace kiln::models {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string component_role(const std::string& cls) {
    if (const ComponentClass* c = find_component_class(cls)) {
        switch (c->role) {
            case Role::transformer:
                return "transformer";
            case Role::vae:
                return "vae";
            case Role::text_encoder:
                return "text_encoder";
            case Role::tokenizer:
                return "tokenizer";
        }
    }
    // Classes Kiln does not run still name their role, so that the error comes where they are used.
    if (cls.find("Scheduler") != std::string::npos) return "scheduler";
    if (cls.find("Transformer") != std::string::npos) return "transformer";
    return "";
}

const Family* model_family(const ModelSource& src) {
    if (!src.has("transformer")) return nullptr;
    const ComponentClass* c = find_component_class(src.class_of("transformer"));
    const Family* f = c ? transformer_family(c->kind) : nullptr;
    if (!f) return nullptr;
    // Families sharing a transformer class (Sana, Sana-Sprint): model_index.json's pipeline class, else the one
    // whose guidance is a transformer input when the config has a guidance embedding.
    const auto& mi = src.model_index();
    if (mi.is_object() && mi.contains("_class_name") && mi["_class_name"].is_string())
        if (const Family* p = find_pipeline_family(mi["_class_name"].get<std::string>());
            p && p->transformer == c->kind)
            return p;
    const auto& tc = src.config("transformer");
    const bool guidance =
        tc.contains("guidance_embeds") && tc["guidance_embeds"].is_boolean() && tc["guidance_embeds"].get<bool>();
    for (const auto& g : families())
        if (g.transformer == c->kind && g.complex_human_instruction && g.scaled_guidance_input == guidance) return &g;
    return f;
}

namespace {
// diffusers writes Python's JSON (-Infinity, NaN in scheduler configs); parsed with those as null.
json parse_py_json(const std::string& text, const std::string& what) {
    try {
        return json::parse(converter::python_json_to_json(text));
    } catch (const json::exception& e) {
        KILN_FAIL(what, ": invalid JSON: ", e.what());
    }
}

// A folder holding tokenizer_config.json or the model files of some tokenizer (registry tokenizer_formats()).
bool is_tokenizer_folder(const fs::path& d) {
    if (fs::exists(d / "tokenizer_config.json")) return true;
    for (const auto& f : tokenizer_formats())
        for (const auto& n : f.model_files)
            if (fs::exists(d / n)) return true;
    return false;
}

json read_json(const fs::path& p) {
    std::ifstream f(p);
    KILN_CHECK(f.good(), p.string(), ": cannot open");
    try {
        return parse_py_json(std::string(std::istreambuf_iterator<char>(f), {}), p.string());
    } catch (const std::exception& e) {
        KILN_FAIL(p.string(), ": invalid JSON: ", e.what());
    }
}
}  // namespace

ModelSource ModelSource::open(const std::string& path) {
    ModelSource s;
    s.path_ = path;
    KILN_CHECK(fs::exists(path), path, ": no such file or folder");
    if (fs::is_directory(path)) {
        fs::path d(path);
        if (fs::exists(d / "model_index.json")) {
            s.model_index_ = read_json(d / "model_index.json");
            for (auto& [name, v] : s.model_index_.items()) {
                if (!v.is_array() || v.size() != 2 || v[1].is_null()) continue;
                fs::path sub = d / name;
                const std::string cls = v[1].get<std::string>();
                std::string role = component_role(cls);
                if (role.empty() || !fs::is_directory(sub)) continue;
                json cfg;
                if (role == "tokenizer") {  // tokenizer_config.json is optional; the files are what matter
                    cfg = fs::exists(sub / "tokenizer_config.json") ? read_json(sub / "tokenizer_config.json")
                                                                    : json::object();
                } else {
                    fs::path f = fs::exists(sub / "config.json") ? sub / "config.json" : sub / "scheduler_config.json";
                    if (!fs::exists(f)) continue;
                    cfg = read_json(f);
                }
                // transformers' configs name their class in "architectures", not "_class_name".
                if (!cfg.contains("_class_name") || !cfg["_class_name"].is_string()) cfg["_class_name"] = cls;
                s.components_.push_back(name);
                s.configs_[name] = cfg;
                s.dirs_[name] = sub.string();
            }
        } else if (!fs::exists(d / "config.json") && !fs::exists(d / "scheduler_config.json") &&
                   is_tokenizer_folder(d)) {
            // A tokenizer folder as transformers saves it: the class its tokenizer_config.json names, else the one
            // its files imply (models/registry/registry.h tokenizer_formats()).
            const std::string cls = converter::tokenizer_class_of_dir(path);
            KILN_CHECK(converter::is_supported_tokenizer(cls), path, ": unsupported tokenizer class '", cls,
                       "' (supported: ", class_list({Role::tokenizer}), ")");
            json j = fs::exists(d / "tokenizer_config.json") ? read_json(d / "tokenizer_config.json") : json::object();
            j["tokenizer_class"] = cls;
            j["_class_name"] = cls;
            s.components_.push_back("tokenizer");
            s.configs_["tokenizer"] = j;
            s.dirs_["tokenizer"] = path;
        } else {
            fs::path cfg = fs::exists(d / "config.json") ? d / "config.json" : d / "scheduler_config.json";
            KILN_CHECK(fs::exists(cfg), path,
                       ": neither model_index.json, config.json, scheduler_config.json nor a tokenizer's files");
            json j = read_json(cfg);
            // transformers' configs (text encoders) name their class in "architectures".
            if (!j.contains("_class_name") && j.contains("architectures") && j["architectures"].is_array() &&
                !j["architectures"].empty() && j["architectures"][0].is_string())
                j["_class_name"] = j["architectures"][0];
            KILN_CHECK(j.contains("_class_name"), cfg.string(), ": no _class_name (nor transformers' architectures)");
            std::string role = component_role(j["_class_name"].get<std::string>());
            KILN_CHECK(!role.empty(), cfg.string(), ": unsupported class ", j["_class_name"]);
            s.components_.push_back(role);
            s.configs_[role] = j;
            s.dirs_[role] = path;
        }
        // Weights and tokenizer files are read later, from the component folders.
        for (auto& [c, dir] : s.dirs_)
            for (auto& e : fs::directory_iterator(dir))
                if (e.is_regular_file()) s.stamps_.push_back({e.path().string(), FileStamp::of(e.path().string())});
        return s;
    }
    s.kiln_file_ = true;
    s.stamps_.push_back({path, FileStamp::of(path)});  // before reading: a change while open() reads is caught too
    GgufFile f = GgufFile::open(path);
    KILN_CHECK(f.has("kiln.components"), path,
               ": not a Kiln model file (no kiln.components; convert with kiln-convert)");
    s.components_ = f.get_string_array("kiln.components");
    for (auto& c : s.components_) {
        json cfg = parse_py_json(f.get_string("kiln." + c + ".config"), path + ": kiln." + c + ".config");
        KILN_CHECK(cfg.is_object(), path, ": kiln.", c, ".config is not a JSON object");
        // Text encoders (transformers configs) and tokenizers (tokenizer_config.json) have no _class_name.
        if (!cfg.contains("_class_name") || !cfg["_class_name"].is_string())
            cfg["_class_name"] = f.get_string("kiln." + c + ".class");
        s.configs_[c] = std::move(cfg);
    }
    if (f.has("kiln.pipeline.model_index"))
        s.model_index_ = parse_py_json(f.get_string("kiln.pipeline.model_index"), path + ": kiln.pipeline.model_index");
    return s;
}

ModelSource ModelSource::assemble(const converter::Assembly& a) {
    ModelSource s;
    s.path_ = a.parts.front().path;
    for (auto& p : a.parts) {
        json cfg = p.config_text.empty() ? json::object() : parse_py_json(p.config_text, p.name + " config");
        KILN_CHECK(cfg.is_object(), p.name, " config is not a JSON object");
        if (!cfg.contains("_class_name") || !cfg["_class_name"].is_string()) cfg["_class_name"] = p.cls;
        s.components_.push_back(p.name);
        s.configs_[p.name] = std::move(cfg);
        s.parts_[p.name] = p;
        const std::string first = p.from == converter::Part::From::config_only ? "" : p.path;
        if (first.empty()) continue;
        if (fs::is_directory(first)) {
            for (auto& e : fs::directory_iterator(first))
                if (e.is_regular_file()) s.stamps_.push_back({e.path().string(), FileStamp::of(e.path().string())});
        } else {
            s.stamps_.push_back({first, FileStamp::of(first)});
        }
    }
    s.incomplete_ = a.incomplete();
    s.notes_ = a.notes;
    s.model_index_ = parse_py_json(a.model_index_text, "model_index");
    return s;
}

ModelSource ModelSource::synthetic(const std::string& arch, DType weight_dtype) {
    const auto& archs = synthetic_archs();
    auto it = archs.find(arch);
    KILN_CHECK(it != archs.end() && it->second.kind == ComponentKind::dit, "no synthetic DiT pipeline '", arch,
               "' (dit-xl-2-256, dit-xl-2-512, dit-tiny)");
    ModelSource s;
    s.path_ = "synthetic:" + arch;
    s.synthetic_ = true;
    s.synthetic_dtype_ = weight_dtype;
    s.components_ = {"transformer", "vae", "scheduler"};
    s.configs_["transformer"] = it->second.config;
    s.configs_["vae"] = {{"_class_name", class_name(ComponentKind::vae)},
                         {"block_out_channels", {128, 256, 512, 512}},
                         {"layers_per_block", 2},
                         {"norm_num_groups", 32},
                         {"latent_channels", 4},
                         {"in_channels", 3},
                         {"out_channels", 3},
                         {"scaling_factor", 0.18215}};
    s.configs_["scheduler"] = {{"_class_name", "DPMSolverMultistepScheduler"},
                               {"beta_schedule", "linear"},
                               {"beta_start", 0.0001},
                               {"beta_end", 0.02},
                               {"num_train_timesteps", 1000},
                               {"solver_order", 2},
                               {"algorithm_type", "dpmsolver++"}};
    return s;
}

bool ModelSource::has(const std::string& c) const { return configs_.count(c) > 0; }

const json& ModelSource::config(const std::string& c) const {
    auto it = configs_.find(c);
    KILN_CHECK(
        it != configs_.end(), path_, ": no component '", c, "' (has: ",
        [&] {
            std::string s;
            for (auto& x : components_) s += (s.empty() ? "" : ", ") + x;
            return s;
        }(),
        ")", incomplete_.empty() ? "" : "; " + incomplete_);
    return it->second;
}

std::string ModelSource::class_of(const std::string& c) const {
    const json& j = config(c);
    KILN_CHECK(j.contains("_class_name") && j["_class_name"].is_string(), path_, ": component '", c,
               "' has no _class_name");
    return j["_class_name"].get<std::string>();
}

void ModelSource::check_unchanged() const {
    for (auto& [file, stamp] : stamps_) stamp.check(file);
}

std::unique_ptr<WeightStore> ModelSource::weights(const std::string& c) const {
    config(c);
    check_unchanged();
    if (synthetic_) return synthetic_store(synthetic_dtype_, std::hash<std::string>{}(c));
    if (auto it = parts_.find(c); it != parts_.end()) {
        using From = converter::Part::From;
        const converter::Part& p = it->second;
        switch (p.from) {
            case From::layout_file:
            case From::kiln_file:
                return set_store(converter::open_part(p));
            case From::diffusers_dir:
                return open_diffusers_component(p.path);
            default:
                KILN_FAIL(path_, ": component '", c, "' has no weights");
        }
    }
    if (kiln_file_) return open_kiln_component(path_, c);
    return open_diffusers_component(dirs_.at(c));
}

text::TokenizerFiles ModelSource::tokenizer_files(const std::string& c) const {
    KILN_CHECK(component_role(class_of(c)) == "tokenizer", path_, ": component '", c, "' is ", class_of(c),
               ", not a tokenizer");
    check_unchanged();
    if (auto it = parts_.find(c); it != parts_.end()) return text::read_tokenizer_folder(it->second.path);
    if (kiln_file_) return converter::read_tokenizer_files(GgufFile::open(path_), c);
    return text::read_tokenizer_folder(dirs_.at(c));
}

}  // namespace kiln::models
