// LoRA files: their keys grouped by module (lora_keys.cpp maps each layout's names to diffusers' modules), fused
// targets split by B's rows, alphas as trained (docs/lora.md), and the merge into weights.
#include "models/layouts/lora.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "models/layouts/lora_keys.h"
#include "runtime/core/error.h"
#include "runtime/core/platform.h"
#include "runtime/core/safetensors.h"

namespace kiln::layouts {

using namespace lora_keys;

namespace {

// PEFT's per-module r / alpha from lora_adapter_metadata: rank_pattern / alpha_pattern keys match a module when
// re.match(rf"(.*\.)?({key})$", module) (peft get_pattern_key); else r / lora_alpha.
struct PeftConfig {
    bool present = false, rslora = false;
    double r = 0, alpha = 0;
    std::vector<std::pair<std::string, double>> rank_pattern, alpha_pattern;

    static double pattern(const std::vector<std::pair<std::string, double>>& p, const std::string& module, double d) {
        for (const auto& [k, v] : p) {
            const bool anchored = !k.empty() && k[0] == '^';
            const std::regex re(anchored ? k.substr(1) + "$" : "(.*\\.)?(" + k + ")$");
            if (std::regex_match(module, re)) return v;
        }
        return d;
    }
};

// diffusers writes each component's LoraConfig under its prefix ("transformer.r", "text_encoder.r"); the
// transformer's may also be unprefixed. A text encoder without its own 'r' has no config (alpha keys, else 1).
PeftConfig peft_config(const SafeTensors& st, const std::string& path, const std::string& component) {
    PeftConfig c;
    auto it = st.metadata().find("lora_adapter_metadata");
    if (it == st.metadata().end()) return c;
    const bool te = component != "transformer";
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(it->second);
    } catch (const nlohmann::json::exception& e) {
        KILN_FAIL(path, ": lora_adapter_metadata is not JSON: ", e.what());
    }
    auto get = [&](const std::string& k) -> const nlohmann::json* {
        for (const std::string& kk : {component + "." + k, te ? component + "." + k : k})
            if (j.is_object() && j.contains(kk) && !j[kk].is_null()) return &j[kk];
        return nullptr;
    };
    if (te && !get("r")) return c;
    KILN_CHECK(j.is_object() && get("r") && get("r")->is_number(), path,
               ": lora_adapter_metadata has no number 'r' (PEFT LoraConfig)");
    c.present = true;
    c.r = get("r")->get<double>();
    c.alpha = get("lora_alpha") && get("lora_alpha")->is_number() ? get("lora_alpha")->get<double>() : c.r;
    c.rslora = get("use_rslora") && get("use_rslora")->is_boolean() && get("use_rslora")->get<bool>();
    KILN_CHECK(!(get("use_dora") && get("use_dora")->is_boolean() && get("use_dora")->get<bool>()), path,
               ": a DoRA adapter (use_dora) is not supported");
    for (auto [name, out] : {std::pair{"rank_pattern", &c.rank_pattern}, std::pair{"alpha_pattern", &c.alpha_pattern}})
        if (const nlohmann::json* p = get(name); p && p->is_object())
            for (auto& [k, v] : p->items())
                if (v.is_number()) out->push_back({k, v.get<double>()});
    return c;
}

void check_finite(const Tensor& t, const std::string& path, const std::string& key) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
        KILN_CHECK(std::isfinite(p[i]), path, ": tensor '", key, "' holds NaN or Inf");
}

Tensor read_f32(const SafeTensors& st, const std::string& key, const std::string& path) {
    const SafeTensorInfo& info = st.at(key);
    KILN_CHECK(info.dtype == DType::f32 || info.dtype == DType::f16 || info.dtype == DType::bf16, path, ": tensor '",
               key, "' has dtype ", dtype_name(info.dtype), " (LoRA tensors are f32, f16 or bf16)");
    Tensor t = st.read(key).astype(DType::f32);
    check_finite(t, path, key);
    return t;
}

std::string first_keys(const std::vector<std::string>& keys) {
    std::string s;
    for (size_t i = 0; i < keys.size() && i < 3; ++i) s += (i ? ", " : "") + keys[i];
    if (keys.size() > 3) s += ", ... (" + std::to_string(keys.size()) + " in all)";
    return s;
}

// One group's modules: A copied, B's rows split by the targets' out features (swapped halves for norm_out).
void add_modules(LoraFile& f, const SafeTensors& st, const Group& g, bool has_alpha, double alpha,
                 const PeftConfig* peft, const LoraTargetFn& target) {
    const std::string& path = f.path;
    Tensor A = read_f32(st, g.a_key, path), B = read_f32(st, g.b_key, path);
    KILN_CHECK(A.shape.size() != 4, path, ": '", g.a_key, "' ", shape_str(A.shape), " is a conv LoRA (on ",
               g.modules[0], "); Kiln applies LoRAs to linear layers only");
    KILN_CHECK(A.shape.size() == 2 && B.shape.size() == 2, path, ": '", g.a_key, "' ", shape_str(A.shape), " and '",
               g.b_key, "' ", shape_str(B.shape), " are not matrices");
    const int64_t r = A.shape[0], in = A.shape[1];
    KILN_CHECK(B.shape[1] == r, path, ": rank mismatch: '", g.a_key, "' has rank ", r, " ", shape_str(A.shape), ", '",
               g.b_key, "' has ", B.shape[1], " ", shape_str(B.shape));
    std::vector<Shape> shapes;
    int64_t rows = 0;
    for (const std::string& m : g.modules) {
        std::optional<Shape> s = target(m + ".weight");
        KILN_CHECK(s && s->size() == 2, path, ": the model has no weight '", m, ".weight' for '", g.b_key, "'");
        KILN_CHECK((*s)[1] == in, path, ": '", g.a_key, "' ", shape_str(A.shape), " does not fit '", m, ".weight' ",
                   shape_str(*s), " (", (*s)[1], " input features)");
        shapes.push_back(*s);
        rows += (*s)[0];
    }
    std::string parts;
    for (size_t i = 0; i < g.modules.size(); ++i) parts += (i ? " + " : "") + std::to_string(shapes[i][0]);
    KILN_CHECK(B.shape[0] == rows, path, ": '", g.b_key, "' ", shape_str(B.shape), " does not fit ",
               g.modules.size() > 1 ? "the fused target's rows " : "the target's ", parts, " (",
               g.modules.size() == 1 ? g.modules[0] + ".weight" : g.modules[0] + ", ...", ")");
    if (g.swap) {  // BFL [shift; scale] -> diffusers [scale; shift]
        Tensor s(DType::f32, B.shape);
        const size_t half = (size_t)(B.shape[0] / 2 * r) * sizeof(float);
        std::memcpy(s.bytes.data(), B.bytes.data() + half, half);
        std::memcpy(s.bytes.data() + half, B.bytes.data(), half);
        B = std::move(s);
    }
    int64_t r0 = 0;
    for (size_t i = 0; i < g.modules.size(); ++i) {
        LoraModule m;
        m.component = g.component;
        m.module = g.modules[i];
        m.key = g.a_key;
        m.A = A;
        m.B = Tensor(DType::f32, {shapes[i][0], r});
        std::memcpy(m.B.bytes.data(), B.bytes.data() + (size_t)(r0 * r) * sizeof(float), m.B.nbytes());
        r0 += shapes[i][0];
        double a = has_alpha ? alpha : (double)r, rr = (double)r;
        if (peft && peft->present) {
            rr = PeftConfig::pattern(peft->rank_pattern, m.module, peft->r);
            a = PeftConfig::pattern(peft->alpha_pattern, m.module, peft->alpha);
            KILN_CHECK(rr == (double)r, path, ": '", g.a_key, "' has rank ", r, ", lora_adapter_metadata says ", rr);
        }
        m.scale = peft && peft->present && peft->rslora ? a / std::sqrt(rr) : a / rr;
        f.modules.push_back(std::move(m));
    }
}

}  // namespace

std::vector<std::string> lora_text_encoders(const std::string& family) {
    // diffusers' _lora_loadable_modules: FluxLoraLoaderMixin [transformer, text_encoder], SD3LoraLoaderMixin
    // [transformer, text_encoder, text_encoder_2].
    if (family == "Flux") return {"text_encoder"};
    if (family == "SD3" || family == "Stable Diffusion 3") return {"text_encoder", "text_encoder_2"};
    return {};
}

std::string text_encoder_label(const std::string& component) {
    return component == "text_encoder" ? "CLIP-L" : component == "text_encoder_2" ? "CLIP-G" : component;
}

std::string LoraFile::summary() const {
    std::string s = "lora " + path + " (" + layout + "): " + std::to_string(matched) + " tensors matched, " +
                    std::to_string(modules.size()) + " modules";
    std::map<std::string, size_t> te;
    for (const LoraModule& m : modules)
        if (m.component != "transformer") te[m.component]++;
    if (!te.empty()) {
        size_t n = 0;
        std::string on;
        for (const auto& [c, k] : te) {
            n += k;
            on += (on.empty() ? "" : ", ") + (te.size() > 1 ? std::to_string(k) + " on " : "") + text_encoder_label(c);
        }
        s += " (" + std::to_string(n) + " of them text-encoder modules, applied to " + on + ")";
    }
    if (!unmatched.empty()) s += ", " + std::to_string(unmatched.size()) + " keys unmatched";
    if (text_encoder_keys) s += " (" + std::to_string(text_encoder_keys) + " of them text-encoder keys)";
    return s;
}

namespace {
// A text-encoder key's group: the component and CLIP module it goes to; false (why set) when it is dropped: an
// encoder the family's diffusers loader does not load LoRAs into (T5), or one not given in targets.
bool text_encoder_group(const std::string& family, const std::string& path, const LoraTargets& targets, Group& g,
                        std::string& why) {
    std::string rest;
    const int i = text_encoder_index(path, rest);
    const std::vector<std::string> tes = lora_text_encoders(family);
    // Flux's text_encoder_2 is T5 (diffusers' Flux loader filters lora_te2_ / T5 keys out); SD3's is CLIP-G.
    if (i == 3 || (size_t)i > tes.size()) {
        why = "T5: diffusers does not apply T5 LoRAs to " + family + " either";
        return false;
    }
    g.component = tes[(size_t)i - 1];
    if (!targets.text_encoders.count(g.component)) {
        why = text_encoder_label(g.component) + " (" + g.component + ") " +
              (targets.absent_why.empty() ? "is not loaded here" : targets.absent_why);
        return false;
    }
    const std::string m = clip_module(rest);
    if (!m.empty()) g.modules = {m};  // a path that is no CLIP linear has none: unmatched
    return true;
}
}  // namespace

LoraFile read_lora(const std::string& path, const std::string& family_name, const LoraTargetFn& target,
                   bool allow_unmatched) {
    return read_lora(path, family_name, LoraTargets{target, {}}, allow_unmatched);
}

LoraFile read_lora(const std::string& path, const std::string& family_name, const LoraTargets& targets,
                   bool allow_unmatched) {
    const std::string family = family_name == "Stable Diffusion 3" ? "SD3" : family_name;  // the registry's name
    SafeTensors st = SafeTensors::open(path);
    LoraFile f;
    f.path = path;
    std::vector<std::string> keys;
    for (const auto& t : st.tensors()) keys.push_back(t.name);
    f.tensors = keys.size();
    KILN_CHECK(!keys.empty(), path, ": holds no tensors (not a LoRA)");
    const Layout l = guess_layout(keys);
    f.layout = l.name;
    KILN_CHECK(l.family.empty() || l.family == family, path, ": a LoRA for ", l.family, " (", l.name,
               " layout); the model is ", family);
    auto target_of = [&](const std::string& component) -> const LoraTargetFn& {
        return component == "transformer" ? targets.transformer : targets.text_encoders.at(component);
    };
    // Group the keys by module; a key of no module of the layout, or of no module the model has, is unmatched.
    std::map<std::string, Group> groups;
    std::vector<std::string> order;
    std::map<std::string, std::vector<std::string>> dropped;  // why -> keys
    for (const std::string& k : keys) {
        std::string module;
        Role role;
        Group probe;
        std::string why;
        if (!split_key(k, module, role)) {
            f.unmatched.push_back(k);
            continue;
        }
        if (is_text_encoder_key(module)) {
            if (!text_encoder_group(family, module, targets, probe, why)) {
                dropped[why].push_back(k);
                continue;
            }
        } else if (!resolve_module(l, family, module, targets.transformer, probe)) {
            f.unmatched.push_back(k);
            continue;
        }
        bool present = !probe.modules.empty();
        for (const std::string& m : probe.modules)
            present = present && target_of(probe.component)(m + ".weight").has_value();
        if (!present) {
            f.unmatched.push_back(k);
            continue;
        }
        auto [it, fresh] = groups.try_emplace(probe.component + ":" + module, probe);
        if (fresh) order.push_back(probe.component + ":" + module);
        std::string& slot = role == Role::down ? it->second.a_key
                            : role == Role::up ? it->second.b_key
                                               : it->second.alpha_key;
        KILN_CHECK(slot.empty(), path, ": keys '", slot, "' and '", k, "' are the same LoRA tensor");
        slot = k;
    }
    for (const auto& [why, ks] : dropped)
        f.dropped.push_back(std::to_string(ks.size()) + " text-encoder keys not applied (" + why +
                            "): " + first_keys(ks));
    // Unmatched keys: an error naming the first few (text-encoder keys counted apart), unless allowed.
    std::vector<std::string> te, other;
    for (const std::string& k : f.unmatched) (is_text_encoder_key(k) ? te : other).push_back(k);
    f.text_encoder_keys = te.size();
    if (!other.empty()) {
        const std::string msg = path + ": " + std::to_string(other.size()) + " keys match no module of this " + family +
                                " transformer (layout guessed: " + l.name + (l.family.empty() ? "" : ", " + l.family) +
                                (l.family.empty() && family == "Flux" ? ", no Flux-only module: an SD3 LoRA?" : "") +
                                "): " + first_keys(other) +
                                (te.empty() ? "" : "; and " + std::to_string(te.size()) + " text-encoder keys");
        KILN_CHECK(allow_unmatched, msg, "; --lora-allow-unmatched applies the rest");
    } else if (!te.empty()) {
        KILN_CHECK(allow_unmatched, path, ": ", te.size(), " text-encoder keys match no linear of the text encoder (",
                   first_keys(te),
                   "; Kiln applies q/k/v/out_proj and fc1/fc2 of the encoder layers, as diffusers ranks them); "
                   "--lora-allow-unmatched applies the rest");
    }
    std::map<std::string, PeftConfig> peft;
    for (const std::string& key : order) {
        const Group& g = groups.at(key);
        const std::string module = key.substr(key.find(':') + 1);
        KILN_CHECK(!g.a_key.empty() && !g.b_key.empty(), path, ": module '", module, "' has ",
                   g.a_key.empty() ? "no down (A)" : "no up (B)", " matrix");
        bool has_alpha = false;
        double alpha = 0;
        if (!g.alpha_key.empty()) {
            Tensor a = read_f32(st, g.alpha_key, path);
            KILN_CHECK(a.numel() == 1, path, ": '", g.alpha_key, "' is not a scalar");
            alpha = a.data<float>()[0];
            has_alpha = true;
        }
        // PEFT's LoraConfig: the diffusers/PEFT layout's transformer, and any file's diffusers-named text encoders.
        const bool peft_te = g.component != "transformer" && starts_with(module, "text_encoder");
        if ((l.name == "diffusers/PEFT" || peft_te) && !peft.count(g.component))
            peft[g.component] = peft_config(st, path, g.component);
        auto pc = peft.find(g.component);
        add_modules(f, st, g, has_alpha, alpha, pc == peft.end() ? nullptr : &pc->second, target_of(g.component));
        f.matched += 2 + (has_alpha ? 1 : 0);
    }
    KILN_CHECK(!f.modules.empty(), path, ": no LoRA tensor applies to this ", family,
               " transformer (layout guessed: ", l.name, ")", f.dropped.empty() ? "" : "; " + f.dropped[0]);
    return f;
}

Tensor lora_merge(const Tensor& w, const std::vector<std::pair<const LoraModule*, double>>& terms) {
    KILN_CHECK(w.dtype == DType::f32 || w.dtype == DType::f16 || w.dtype == DType::bf16, "lora merge: weight dtype ",
               dtype_name(w.dtype), " (f32, f16 or bf16 only)");
    KILN_CHECK(w.shape.size() == 2, "lora merge: weight of shape ", shape_str(w.shape), " is not a matrix");
    const int64_t out = w.shape[0], in = w.shape[1];
    std::vector<float> v = w.to_f32();
    std::vector<double> acc(v.begin(), v.end());
    for (auto [m, user] : terms) {
        const int64_t r = m->A.shape[0];
        KILN_CHECK(m->B.shape == Shape({out, r}) && m->A.shape == Shape({r, in}), "lora merge: '", m->module,
                   "' does not fit the weight ", shape_str(w.shape));
        const double s = user * m->scale;
        const float* A = m->A.data<float>();
        const float* B = m->B.data<float>();
        for (int64_t o = 0; o < out; ++o)
            for (int64_t k = 0; k < r; ++k) {
                const double b = s * (double)B[o * r + k];
                if (b == 0) continue;
                const float* a = A + k * in;
                double* row = acc.data() + o * in;
                for (int64_t i = 0; i < in; ++i) row[i] += b * (double)a[i];
            }
    }
    Tensor f(DType::f32, w.shape);
    for (size_t i = 0; i < acc.size(); ++i) f.data<float>()[i] = (float)acc[i];
    return w.dtype == DType::f32 ? f : f.astype(w.dtype);
}

void check_mergeable(const LoraFile& f, const std::function<DType(const std::string&, const std::string&)>& dtype_of,
                     const char* why) {
    for (const LoraModule& m : f.modules) {
        const std::string w = m.module + ".weight";
        const DType t = dtype_of(m.component, w);
        KILN_CHECK(t == DType::f32 || t == DType::f16 || t == DType::bf16, f.path, ": '",
                   (m.component == "transformer" ? "" : m.component + ".") + w, "' is stored as ", dtype_name(t), "; ",
                   why);
    }
}

std::pair<std::string, double> parse_lora_arg(const std::string& arg) {
    const size_t c = arg.rfind(':');
    if (c != std::string::npos && c + 1 < arg.size()) {
        const std::string tail = arg.substr(c + 1);
        double s = 0;  // in the C locale, whatever locale the app set
        if (platform::parse_double(tail, &s) && std::isfinite(s)) return {arg.substr(0, c), s};
    }
    return {arg, 1.0};
}

}  // namespace kiln::layouts