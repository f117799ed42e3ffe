// diffusers folder -> Kiln model file.
//
// Metadata written (the runtime never guesses):
//   general.architecture="kiln", general.name, general.alignment=4096 (u32), kiln.format_version=1 (u32)
//   kiln.components                  string array: transformer, vae, scheduler, then text_encoder* and
//                                    tokenizer* (pipelines with text encoders: SD3, Flux, PixArt)
//   kiln.pipeline.class / .model_index / .id2label (pipelines only; id2label only if model_index has it)
//   kiln.C.class, kiln.C.config (config text verbatim), kiln.C.params (i64, elements of all C's tensors)
//   kiln.C.blocks                    string array of block kinds (models only)
//   kiln.C.blocks.K.count            i64, number of blocks of kind K
//   kiln.C.blocks.K.runs             i64 array, 4 per run: [first, count, base, stride]. A run is a
//                                    maximal range of blocks with one layout; block i of a run starts at
//                                    data_start + base + (i - first) * stride, and every tensor of it at
//                                    the same offset relative to its block start as in the run's first block.
//   kiln.C.blocks.K.base / .stride   i64, only when K is a single run (DiT, PixArt, Flux): base + i*stride.
//                                    SD3 has several runs (its last block is context_pre_only; dual-attention
//                                    blocks carry attn2), so it has runs but no base/stride.
//                                    T5's block 0 alone has relative_attention_bias: two runs, [0] and [1..].
//   Text encoders: class from model_index.json or config.json "architectures"; config.json verbatim;
//                                    tensors as transformers names them (T5's encoder.embed_tokens is kept
//                                    as shared.weight; buffers transformers ignores are dropped).
//   Tokenizers: kiln.C.class (tokenizer class), kiln.C.config (tokenizer_config.json or "{}"), and the
//                                    files verbatim (converter/tokenizer_files.h: kiln.C.files, ...).
// Tensor order: per component, non-block tensors sorted by name, then each block kind, blocks in order,
// each block's tensors sorted by their name relative to the block. Names are "C." + diffusers name.
#include "converter/convert.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "converter/arch.h"
#include "converter/assemble.h"
#include "converter/info.h"
#include "converter/lora_bake.h"
#include "converter/plan.h"
#include "converter/tokenizer_files.h"
#include "models/layouts/layouts.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/platform.h"
#include "runtime/core/quant.h"
#include "runtime/core/safetensors.h"

namespace kiln::converter {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string class_name(const json& j, const std::string& where) {
    KILN_CHECK(j.contains("_class_name") && j["_class_name"].is_string(), where,
               ": no \"_class_name\" string (is this a diffusers config?)");
    return j["_class_name"].get<std::string>();
}

// A model config's class: diffusers' _class_name, else (transformers) the class model_index.json names,
// else transformers' architectures[0], as diffusers and ModelSource pick it.
std::string model_class(const json& j, const std::string& expect_cls, const std::string& where) {
    if (j.contains("_class_name") || expect_cls.empty()) {
        if (!j.contains("_class_name") && j.contains("architectures") && j["architectures"].is_array() &&
            !j["architectures"].empty() && j["architectures"][0].is_string())
            return j["architectures"][0].get<std::string>();
        KILN_CHECK(j.contains("_class_name") && j["_class_name"].is_string(), where,
                   ": no \"_class_name\" string nor transformers' \"architectures\" (is this a diffusers or "
                   "transformers config?)");
        return j["_class_name"].get<std::string>();
    }
    return expect_cls;
}

std::string name_list(const std::vector<std::string>& v, size_t max = 10) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + ("'" + v[i] + "'");
    if (v.size() > max) s += ", ... (" + std::to_string(v.size() - max) + " more)";
    return s;
}

// Output dtype of the tensor stored as `name` ("component.diffusers name"): the last --keep pattern that
// matches it, else --dtype; floats with < 2 dims are f32; a quantized dtype applies to linear matrices
// only (quant_storage()), other floats take f16; integers are kept.
DType out_dtype(const layouts::TensorInfo& t, const std::string& name, const Options& opt, const std::string& file) {
    switch (t.dtype) {
        case DType::f32:
        case DType::f16:
        case DType::bf16:
        case DType::f8_e4m3:  // fp8 sources (read only): stored as --dtype asks, f16 holding them exactly
        case DType::f8_e5m2: {
            if (t.shape.size() < 2) return DType::f32;
            DType want = opt.dtype;
            for (auto& [pattern, dt] : opt.keep)
                if (platform::glob_match(pattern, name)) want = dt;
            return dtype_is_quant(want) ? quant_storage(want, name, t.shape) : want;
        }
        case DType::i32:
        case DType::i64:
            return t.dtype;
        default:
            // Already quantized (a city96 GGUF): kept as it is, since quantizing again would only lose.
            if (dtype_is_quant(t.dtype)) return t.dtype;
            break;
    }
    std::string name_upper = dtype_name(t.dtype);  // as safetensors names it: U8
    for (char& ch : name_upper) ch = (char)std::toupper((unsigned char)ch);
    KILN_FAIL(file, ": tensor '", t.name, "' has dtype ", name_upper, ", which a Kiln model file cannot hold");
}

// base: "diffusion_pytorch_model" (diffusers) or "model" (transformers); both name variants and shards alike.
fs::path find_weights(const fs::path& dir, const std::string& variant, const std::string& base) {
    const std::string v = variant.empty() ? "" : "." + variant;
    fs::path single = dir / (base + v + ".safetensors");
    fs::path index = dir / (base + ".safetensors.index" + v + ".json");
    if (fs::exists(index)) return index;  // diffusers prefers the index when both exist
    if (fs::exists(single)) return single;
    std::string hint;
    if (!variant.empty() &&
        (fs::exists(dir / (base + ".safetensors")) || fs::exists(dir / (base + ".safetensors.index.json"))))
        hint = " (the folder has non-variant weights: drop --variant)";
    else if (variant.empty() && fs::exists(dir / (base + ".fp16.safetensors")))
        hint = " (the folder has fp16 variant weights: add --variant fp16)";
    else if (fs::exists(dir / (base == "model" ? "pytorch_model.bin" : base + ".bin")))
        hint = " (PyTorch .bin checkpoints are not supported: save with safe_serialization=True)";
    KILN_FAIL(dir.string(), ": no weights: neither ", single.filename().string(), " nor ", index.filename().string(),
              hint);
}

}  // namespace

std::map<std::string, const layouts::TensorInfo*> match_tensors(const layouts::TensorSet& set, const std::string& cls,
                                                                const json& cfg, const std::string& cfg_where,
                                                                std::ostream* log) {
    ArchSpec spec = arch_spec(cls, cfg, cfg_where);
    const std::string file = set.source();
    // Canonical name -> source tensor; compare with the expected set.
    std::map<std::string, const layouts::TensorInfo*> have;
    std::vector<std::string> ignored;
    std::set<std::string> names;
    for (auto& t : set.tensors()) names.insert(t.name);
    for (auto& t : set.tensors()) {
        bool ignore = false;
        for (auto& pre : spec.ignored) ignore |= t.name.compare(0, pre.size(), pre) == 0;
        for (auto& [alias, canon] : spec.aliases)  // tied weights saved under both names: keep the canonical
            if (t.name == alias && names.count(canon)) {
                const layouts::TensorInfo& o = *set.find(canon);
                KILN_CHECK(o.shape == t.shape, file, ": tied tensors '", alias, "' ", shape_str(t.shape), " and '",
                           canon, "' ", shape_str(o.shape), " differ in shape");
                ignore = true;
            }
        if (ignore) {
            ignored.push_back(t.name);
            continue;
        }
        std::string n = canonical_name(spec, t.name);
        KILN_CHECK(!have.count(n), file, ": tensors '", have[n]->name, "' and '", t.name, "' both map to '", n, "'");
        have[n] = &t;
    }
    if (log && !ignored.empty())
        *log << "kiln-convert: note: " << file << ": dropping " << ignored.size()
             << " tensor(s) that transformers ignores: " << name_list(ignored, 3) << "\n";
    std::set<std::string> expected(spec.expected.begin(), spec.expected.end());
    KILN_CHECK(expected.size() == spec.expected.size(), "internal: duplicate expected name for ", cls);
    std::vector<std::string> missing, unexpected;
    for (auto& n : expected)
        if (!have.count(n)) missing.push_back(n);
    for (auto& [n, t] : have)
        if (!expected.count(n)) unexpected.push_back(t->name);
    if (!missing.empty() || !unexpected.empty()) {
        std::string msg = file + ": tensors do not match " + cls + " as " + cfg_where + " configures it:";
        if (!missing.empty())
            msg += " missing tensor(s) [" + std::to_string(missing.size()) + "]: " + name_list(missing);
        if (!missing.empty() && !unexpected.empty()) msg += ";";
        if (!unexpected.empty())
            msg += " unexpected tensor(s) [" + std::to_string(unexpected.size()) + "]: " + name_list(unexpected);
        KILN_FAIL(msg);
    }
    return have;
}

namespace {
// Validates one model component's tensors (`set`) against its config (`cfg`): expected names, block layouts.
Component plan_tensors(Component c, const Options& opt, std::ostream* log) {
    const json& cfg = c.cfg;
    const std::string& cfg_where = c.cfg_where;
    ArchSpec spec = arch_spec(c.cls, cfg, cfg_where);
    const std::string file = c.set->source();
    const std::map<std::string, const layouts::TensorInfo*> have = match_tensors(*c.set, c.cls, cfg, cfg_where, log);
    // A 1x1 conv the model reads as a matrix is stored [O, C] (the same bytes), so its dtype is chosen as a linear's.
    const std::set<std::string> as_matrix(spec.matrices_1x1.begin(), spec.matrices_1x1.end());
    auto item = [&](const std::string& rel, const std::string& n, const layouts::TensorInfo* t) {
        layouts::TensorInfo stored = *t;
        if (as_matrix.count(n) && t->shape.size() == 4 && t->shape[2] == 1 && t->shape[3] == 1)
            stored.shape = {t->shape[0], t->shape[1]};
        return Item{rel, t, out_dtype(stored, c.name + "." + n, opt, file), stored.shape};
    };

    // Split into block tensors and the rest.
    std::set<std::string> in_block;
    for (auto& kind : spec.blocks) {
        KindPlan kp;
        kp.name = kind.name;
        kp.count = kind.count;
        kp.blocks.resize((size_t)kind.count);
        for (auto& [n, t] : have) {
            if (n.compare(0, kind.name.size() + 1, kind.name + ".") != 0) continue;
            size_t dot = n.find('.', kind.name.size() + 1);
            KILN_CHECK(dot != std::string::npos, file, ": bad block tensor name '", t->name, "'");
            int64_t i = std::stoll(n.substr(kind.name.size() + 1, dot - kind.name.size() - 1));
            kp.blocks[(size_t)i].push_back(item(n.substr(dot + 1), n, t));
            in_block.insert(n);
        }
        // Runs of one variant; every block of a run must equal the run's first block.
        for (int64_t i = 0; i < kind.count; ++i) {
            if (i == 0 || kind.variant[(size_t)i] != kind.variant[(size_t)i - 1]) kp.runs.push_back({i, 0, 0, 0});
            Run& r = kp.runs.back();
            r.count++;
            const auto& a = kp.blocks[(size_t)r.first];
            const auto& b = kp.blocks[(size_t)i];
            const std::string bi = kind.name + "." + std::to_string(i), b0 = kind.name + "." + std::to_string(r.first);
            KILN_CHECK(a.size() == b.size(), file, ": block ", bi, " has ", b.size(), " tensors but ", b0, " has ",
                       a.size(), " (blocks of one kind must be identical)");
            for (size_t k = 0; k < a.size(); ++k) {
                KILN_CHECK(a[k].rel == b[k].rel, file, ": block ", bi, " is not identical to ", b0, ": '", b[k].rel,
                           "' vs '", a[k].rel, "'");
                KILN_CHECK(a[k].src->shape == b[k].src->shape && a[k].src->dtype == b[k].src->dtype, file, ": block ",
                           bi, " is not identical to ", b0, ": tensor '", b[k].src->name, "' is ",
                           dtype_name(b[k].src->dtype), " ", shape_str(b[k].src->shape), " but '", a[k].src->name,
                           "' is ", dtype_name(a[k].src->dtype), " ", shape_str(a[k].src->shape));
                KILN_CHECK(a[k].out == b[k].out, "--keep: tensor '", b[k].src->name, "' would be stored ",
                           dtype_name(b[k].out), " but '", a[k].src->name, "' ", dtype_name(a[k].out),
                           "; blocks of one kind are stored alike (match every block, e.g. '*.", a[k].rel, "')");
            }
        }
        c.kinds.push_back(std::move(kp));
    }
    for (auto& [n, t] : have) {
        c.params += shape_numel(t->shape);
        if (!in_block.count(n)) c.loose.push_back(item(n, n, t));
    }
    return c;
}

// Opens one model component folder: config and weights (plan_tensors validates them).
Component open_model(const fs::path& dir, const std::string& comp_name, const std::string& expect_cls,
                     const Options& opt) {
    Component c;
    c.name = comp_name;
    const fs::path cfg_path = dir / "config.json";
    KILN_CHECK(fs::exists(cfg_path), dir.string(), ": missing config.json");
    c.config_text = read_text(cfg_path);
    c.cfg = parse_json_object(c.config_text, cfg_path.string());
    c.cfg_where = cfg_path.string();
    c.cls = model_class(c.cfg, expect_cls, cfg_path.string());
    KILN_CHECK(expect_cls.empty() || expect_cls == c.cls, cfg_path.string(), ": _class_name '", c.cls,
               "' differs from model_index.json, which says '", expect_cls, "'");
    if (comp_name.empty()) c.name = arch_spec(c.cls, c.cfg, cfg_path.string()).component;
    c.set = layouts::open_safetensors(
        find_weights(dir, opt.variant, arch_spec(c.cls, c.cfg, cfg_path.string()).weights_base).string());
    return c;
}

// The opened components with --lora merged into those each LoRA targets (the family from the transformer's
// class), then each model component planned.
void merge_and_plan(std::vector<Component>& comps, const Options& opt, std::ostream* log) {
    if (!opt.loras.empty()) {
        std::map<std::string, std::unique_ptr<layouts::TensorSet>*> sets;
        std::string family;
        for (Component& c : comps) {
            if (!c.set) continue;
            sets[c.name] = &c.set;
            if (c.name == "transformer")
                family = c.cls.find("Flux") != std::string::npos  ? "Flux"
                         : c.cls.find("SD3") != std::string::npos ? "SD3"
                                                                  : c.cls;
        }
        merge_loras(sets, family, opt.loras, opt.lora_allow_unmatched, log);
    }
    for (Component& c : comps)
        if (c.set) c = plan_tensors(std::move(c), opt, log);
}

// A tokenizer folder: its files are stored verbatim; the config is tokenizer_config.json ("{}" if absent).
Component plan_tokenizer(const fs::path& dir, const std::string& comp_name, const std::string& expect_cls,
                         std::ostream* log) {
    Component c;
    c.name = comp_name;
    c.tokenizer = true;
    c.cls = expect_cls.empty() ? tokenizer_class_of_dir(dir.string()) : expect_cls;
    std::vector<std::string> skipped;
    c.files = read_tokenizer_dir(dir.string(), c.cls, &skipped);
    c.config_text = c.files.count("tokenizer_config.json") ? c.files["tokenizer_config.json"] : "{}";
    if (log && !skipped.empty())
        *log << "kiln-convert: note: " << dir.string() << ": not storing " << name_list(skipped)
             << " (Kiln's tokenizers do not read them)\n";
    return c;
}

Component plan_scheduler(const fs::path& dir) {
    Component c;
    c.name = "scheduler";
    c.scheduler = true;
    const fs::path p = dir / "scheduler_config.json";
    KILN_CHECK(fs::exists(p), dir.string(), ": missing scheduler_config.json");
    c.config_text = read_text(p);
    json j = parse_json_object(c.config_text, p.string());
    c.cls = class_name(j, p.string());
    if (!is_supported_scheduler(c.cls)) {
        std::string list;
        for (auto& s : supported_scheduler_classes()) list += (list.empty() ? "" : ", ") + s;
        KILN_FAIL(p.string(), ": unsupported scheduler _class_name '", c.cls, "' (supported: ", list, ")");
    }
    return c;
}

// A pipeline folder: model_index.json's components (transformer, vae, scheduler, then text encoders and tokenizers)
// planned and validated; the pipeline metadata goes to w.
std::vector<Component> plan_pipeline(const fs::path& dir, const Options& opt, std::ostream* log, GgufWriter& w) {
    std::vector<Component> comps;
    const fs::path mi = dir / "model_index.json";
    std::string text = read_text(mi);
    json j = parse_json_object(text, mi.string());
    std::string pcls = class_name(j, mi.string());
    std::map<std::string, std::string> classes;
    for (auto& [k, v] : j.items()) {
        if (k.empty() || k[0] == '_' || !v.is_array()) continue;
        KILN_CHECK(v.size() == 2, mi.string(), ": component '", k, "' is not [library, class]");
        if (v[1].is_null()) continue;  // an optional component that is absent
        KILN_CHECK(v[1].is_string(), mi.string(), ": component '", k, "' class is not a string");
        classes[k] = v[1].get<std::string>();
    }
    KILN_CHECK(classes.count("transformer") || classes.count("vae") || classes.count("scheduler"), mi.string(),
               ": pipeline ", pcls, " has no transformer, vae or scheduler component",
               (classes.count("unet") ? " (UNet pipelines are not supported)" : ""));
    // Text encoders and tokenizers by class; model_index keys sort text_encoder < text_encoder_2 < ...
    const auto& models = supported_model_classes();
    std::vector<std::string> encoders, tokenizers;
    for (auto& [k, cls] : classes) {
        if (k == "transformer" || k == "vae" || k == "scheduler") continue;
        if (k == "unet") KILN_FAIL(mi.string(), ": component 'unet' (", cls, ") is not supported");
        if (is_supported_tokenizer(cls))
            tokenizers.push_back(k);
        else if (k.compare(0, 12, "text_encoder") == 0 && std::find(models.begin(), models.end(), cls) != models.end())
            encoders.push_back(k);
        else if (log)
            *log << "kiln-convert: note: skipping component '" << k << "' (" << cls << "): not supported\n";
    }
    auto folder = [&](const std::string& k) {
        KILN_CHECK(fs::is_directory(dir / k), mi.string(), ": component '", k, "' (", classes[k], ") has no folder ",
                   (dir / k).string());
        return dir / k;
    };
    for (const char* k : {"transformer", "vae"})
        if (classes.count(k)) comps.push_back(open_model(folder(k), k, classes[k], opt));
    if (classes.count("scheduler")) {
        comps.push_back(plan_scheduler(folder("scheduler")));
        KILN_CHECK(comps.back().cls == classes["scheduler"], (dir / "scheduler/scheduler_config.json").string(),
                   ": _class_name '", comps.back().cls, "' differs from model_index.json, which says '",
                   classes["scheduler"], "'");
    }
    for (auto& k : encoders) comps.push_back(open_model(folder(k), k, classes[k], opt));
    merge_and_plan(comps, opt, log);
    for (auto& k : tokenizers) comps.push_back(plan_tokenizer(folder(k), k, classes[k], log));
    w.set_string("kiln.pipeline.class", pcls);
    w.set_string("kiln.pipeline.model_index", text);
    if (j.contains("id2label")) w.set_string("kiln.pipeline.id2label", j["id2label"].dump());
    return comps;
}

// The components of any folder kiln-convert takes: a pipeline, a model, a scheduler or a tokenizer.
std::vector<Component> plan_folder(const fs::path& dir, const std::string& src_dir, const Options& opt,
                                   std::ostream* log, GgufWriter& w) {
    std::vector<Component> comps;
    if (fs::exists(dir / "model_index.json")) {
        comps = plan_pipeline(dir, opt, log, w);
    } else if (fs::exists(dir / "config.json")) {
        comps.push_back(open_model(dir, "", "", opt));
        merge_and_plan(comps, opt, log);
    } else if (fs::exists(dir / "scheduler_config.json")) {
        comps.push_back(plan_scheduler(dir));
    } else if (fs::exists(dir / "tokenizer_config.json") || fs::exists(dir / "spiece.model") ||
               fs::exists(dir / "vocab.json")) {
        comps.push_back(plan_tokenizer(dir, "tokenizer", "", log));
    } else {
        KILN_FAIL(src_dir,
                  ": not a diffusers folder (no model_index.json, config.json, scheduler_config.json or "
                  "tokenizer files)");
    }
    return comps;
}

// One part of an assembly, opened as a component of the output file (merge_and_plan plans it).
Component open_part_component(const Part& p, const Options& opt, std::ostream* log) {
    switch (p.from) {
        case Part::From::diffusers_dir:
            return open_model(p.path, p.name, p.cls, opt);
        case Part::From::tokenizer_dir:
            return plan_tokenizer(p.path, p.name, p.cls, log);
        case Part::From::config_only: {
            Component c;
            c.name = p.name;
            c.scheduler = true;
            c.cls = p.cls;
            c.config_text = p.config_text;
            KILN_CHECK(is_supported_scheduler(c.cls), p.name, ": unsupported scheduler '", c.cls, "'");
            return c;
        }
        case Part::From::layout_file:
        case Part::From::kiln_file: {
            Component c;
            c.name = p.name;
            c.cls = p.cls;
            c.config_text = p.config_text;
            c.set = open_part(p);
            c.cfg = parse_json_object(p.config_text, p.name + " config");
            c.cfg_where = p.name + "'s config";
            return c;
        }
    }
    KILN_FAIL("internal: part kind");
}
}  // namespace

Summary convert_folder(const std::string& src_dir, const std::string& out_path, const Options& opt) {
    const auto t0 = std::chrono::steady_clock::now();
    std::ostream* log = opt.quiet ? nullptr : (opt.log ? opt.log : &std::cerr);
    const fs::path dir(src_dir);
    KILN_CHECK(fs::is_directory(dir), src_dir, ": not a directory");
    KILN_CHECK(!out_path.empty(), "no output path given");
    KILN_CHECK(opt.loras.empty() || fs::exists(dir / "model_index.json") || fs::exists(dir / "config.json"), src_dir,
               ": --lora: no transformer to merge LoRAs into");
    GgufWriter w;
    std::string name = fs::weakly_canonical(dir).filename().string();
    std::vector<Component> comps = plan_folder(dir, src_dir, opt, log, w);
    return write_kiln_file(comps, w, name, out_path, opt, log, t0);
}

Summary convert_assembly(const Assembly& a, const std::string& out_path, const Options& opt) {
    const auto t0 = std::chrono::steady_clock::now();
    std::ostream* log = opt.quiet ? nullptr : (opt.log ? opt.log : &std::cerr);
    KILN_CHECK(!out_path.empty(), "no output path given");
    GgufWriter w;
    std::vector<Component> comps;
    for (auto& p : a.parts) comps.push_back(open_part_component(p, opt, log));
    merge_and_plan(comps, opt, log);
    // The configs travel with the weights.
    w.set_string("kiln.pipeline.class", a.pipeline_class);
    w.set_string("kiln.pipeline.model_index", a.model_index_text);
    w.set_string("kiln.source.configs", a.configs_from);
    const std::string name = fs::path(a.parts.front().path).stem().string();
    return write_kiln_file(comps, w, name, out_path, opt, log, t0);
}

}  // namespace kiln::converter
