#include "models/pipelines/t2i_transformers.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "models/core/forward.h"
#include "models/pipelines/text_encode.h"
#include "runtime/core/error.h"

namespace kiln::models {

void Transformers::graphs(const ModelSource& src, const T2IOptions& opt, const T2IPlan& p,
                          const std::map<std::string, Tensor>& raw, const TextConditioning& tx,
                          const Shape& lat_shape) {
    const std::string cls = src.class_of("transformer");
    const auto& tcfg = src.config("transformer");
    ws = src.weights("transformer");
    std::shared_ptr<const LoraSet> loras;
    if (!opt.lora.files.empty()) {
        loras = opt.lora.loaded ? opt.lora.loaded : load_model_loras(src, p.family->name, opt.lora, true);
        ws = with_loras(std::move(ws), loras,
                        [](const std::string& m) { std::fprintf(stderr, "kiln: %s\n", m.c_str()); });
        lora_apply = opt.lora.apply;
        lora_count = opt.lora.files.size();
    }
    b = std::make_unique<Builder>(g, *ws);
    if (opt.lora.apply == "runtime") b->set_loras(loras);
    in = build_component(*b, cls, tcfg, raw);
    // The call's scales, not the LoraSet's: a cached set (LoraFileCache) holds the scales of the call that read it.
    std::vector<double> scales;
    for (const LoraRequest& l : opt.lora.files) scales.push_back(l.scale);
    if (opt.lora.apply == "runtime")
        for (auto& [name, v] : b->lora_scale_values(scales)) in[name] = v;
    if (p.slg_steps.empty()) return;
    const int64_t B = lat_shape[0];
    std::map<std::string, Tensor> sin{{"hidden_states", Tensor(DType::f32, lat_shape)},
                                      {"timestep", Tensor(DType::f32, {B})},
                                      {"encoder_hidden_states", tx.prompt_embeds},
                                      {"pooled_projections", tx.pooled_prompt_embeds}};
    ComponentOptions co;
    co.skip_layers = opt.skip_guidance_layers;
    slg_b = std::make_unique<Builder>(slg_g, *ws);
    if (opt.lora.apply == "runtime") slg_b->set_loras(loras);
    slg_in = build_component(*slg_b, cls, tcfg, sin, co);
    if (opt.lora.apply == "runtime")
        for (auto& [name, v] : slg_b->lora_scale_values(scales)) slg_in[name] = v;
}

namespace {
std::unique_ptr<exec::Executor> executor(vk::Context& ctx, const T2IOptions& opt, ir::Graph& graph, Builder& builder,
                                         const std::map<std::string, Tensor>& graph_in) {
    const exec::Mode mode =
        opt.mode == exec::Mode::regional && graph.regions().size() < 2 ? exec::Mode::full : opt.mode;
    auto e = std::make_unique<exec::Executor>(ctx, graph, builder.weight_fn(), mode);
    for (auto& [name, t] : graph_in)
        if (name != "hidden_states" && name != "timestep") e->set_input(name, t);
    return e;
}
}  // namespace

void Transformers::plan(vk::Context& ctx, const T2IOptions& opt) {
    x = executor(ctx, opt, g, *b, in);
    if (slg_b) slg = executor(ctx, opt, slg_g, *slg_b, slg_in);
}

std::string Transformers::key(const T2IOptions& opt) const {
    std::string k = exec::mode_name(opt.mode);
    for (const auto* m : {&in, &slg_in}) {
        k += "|";
        for (const auto& [name, t] : *m) k += name + ":" + dtype_name(t.dtype) + shape_str(t.shape) + ";";
    }
    for (int l : opt.skip_guidance_layers) k += "skip" + std::to_string(l) + ";";
    k += "|lora " + opt.lora.apply + (opt.lora.allow_unmatched ? " allow" : "");
    for (const LoraRequest& l : opt.lora.files) {
        k += ";" + l.path;
        if (opt.lora.apply == "merge") k += "@" + std::to_string(l.scale);  // merged: the scale is in the weights
    }
    // The files' sizes and mtimes as read: a file changed on disk makes another transformer (its A/B or merged
    // weights are other bytes).
    return k + "|" + opt.lora.loaded_from;
}

void Transformers::set_inputs(const Transformers& from, const std::optional<std::vector<double>>& scales) {
    auto write = [&](exec::Executor& e, const std::map<std::string, Tensor>& m, const Builder& builder) {
        for (const auto& [name, t] : m)
            if (name != "hidden_states" && name != "timestep") e.set_input(name, t);
        if (scales)
            for (const auto& [name, t] : builder.lora_scale_values(*scales)) e.set_input(name, t);
    };
    write(*x, from.in, *b);
    if (slg) write(*slg, from.slg_in, *slg_b);
}

TransformerCache::TransformerCache() = default;
TransformerCache::~TransformerCache() = default;

bool TransformerCache::resident() const { return entry_ != nullptr; }

void TransformerCache::clear() { entry_.reset(); }

void TransformerCache::set_lora_scales(const std::vector<double>& scales) {
    KILN_CHECK(entry_, "no resident transformer: generate with keep_transformer first");
    const Transformers& t = *entry_->t;
    KILN_CHECK(t.lora_count > 0, "the resident transformer has no LoRAs");
    KILN_CHECK(t.lora_apply == "runtime", "the resident transformer's ", t.lora_count,
               " LoRA(s) were merged into its weights at load (lora_apply merge): their scales are baked; use "
               "lora_apply runtime to change them");
    KILN_CHECK(scales.size() == t.lora_count, scales.size(), " LoRA scales given, the resident transformer has ",
               t.lora_count, " LoRA(s)");
    for (size_t i = 0; i < scales.size(); ++i)
        KILN_CHECK(std::isfinite(scales[i]), "LoRA scale ", i, " is ", scales[i], ": not finite");
    entry_->lora_scales = scales;
    for (const auto& [name, v] : t.b->lora_scale_values(scales)) t.x->set_input(name, v);
    if (t.slg)
        for (const auto& [name, v] : t.slg_b->lora_scale_values(scales)) t.slg->set_input(name, v);
}

namespace {
// "path:size:mtime_ns" of each file, in order; a file that cannot be stat'ed gets "?" (load_loras then names it).
std::string lora_stamps(const LoraOptions& opt, const std::string& family) {
    std::string k = family + "|" + opt.apply + (opt.allow_unmatched ? "|allow" : "|");
    for (const LoraRequest& l : opt.files) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(l.path, ec);
        const auto mtime = ec ? std::filesystem::file_time_type{} : std::filesystem::last_write_time(l.path, ec);
        k += ";" + l.path + ":";
        k += ec ? "?" : std::to_string(size) + ":" + std::to_string(mtime.time_since_epoch().count());
        if (opt.apply == "merge") k += "@" + std::to_string(l.scale);  // merged scales are in LoraSet's terms
    }
    return k;
}
}  // namespace

std::shared_ptr<const LoraSet> LoraFileCache::load(const ModelSource& src, const std::string& family,
                                                   const LoraOptions& opt, bool encoders_run, std::string& key) {
    // The stamps are taken before the read: a file written during it is read again next time.
    key = lora_stamps(opt, family) + (encoders_run ? "" : " (no encoders)");
    {
        std::lock_guard<std::mutex> lock(m_);
        if (set_ && key_ == key && key.find(":?") == std::string::npos) return set_;
    }
    auto set = load_model_loras(src, family, opt, encoders_run);  // outside the lock: reading takes a while
    std::lock_guard<std::mutex> lock(m_);
    key_ = key, set_ = set, ++reads_;
    return set;
}

void LoraFileCache::clear() {
    std::lock_guard<std::mutex> lock(m_);
    key_.clear(), set_.reset();
}

int LoraFileCache::reads() const {
    std::lock_guard<std::mutex> lock(m_);
    return reads_;
}

Transformers& resident_transformers(vk::Context& ctx, TransformerCache* cache, std::unique_ptr<Transformers>& fresh,
                                    const T2IOptions& opt, bool& reused) {
    reused = false;
    if (!cache) {
        fresh->plan(ctx, opt);
        return *fresh;
    }
    auto& e = cache->entry_;
    const std::string k = fresh->key(opt);
    if (e && e->key == k) {
        e->t->set_inputs(*fresh, e->lora_scales);
        reused = true;
        return *e->t;
    }
    e.reset();  // its device memory goes before the new one is planned
    fresh->plan(ctx, opt);
    e = std::make_unique<TransformerCache::Entry>();
    e->key = k;
    e->t = std::move(fresh);
    return *e->t;
}

}  // namespace kiln::models
