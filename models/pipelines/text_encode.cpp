#include "models/pipelines/text_encode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "models/core/forward.h"
#include "models/layouts/lora.h"
#include "models/pipelines/sana_pipeline.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/registry/registry.h"
#include "models/text/encoders/qwen3.h"
#include "models/text/tokenizers/qwen_tokenizer.h"
#include "models/text/tokenizers/tokenizer.h"
#include "models/text/tokenizers/unicode.h"
#include "runtime/core/error.h"
#include "runtime/cpu/reference.h"

namespace kiln::models {

struct EncoderCache::Entry {
    std::unique_ptr<WeightStore> ws;
    ir::Graph g;
    std::unique_ptr<Builder> b;
    std::unique_ptr<exec::Executor> x;
};
struct EncoderCacheAccess {
    static std::map<std::string, std::unique_ptr<EncoderCache::Entry>>& entries(EncoderCache& c) { return c.entries_; }
};
EncoderCache::EncoderCache() = default;
EncoderCache::~EncoderCache() = default;
size_t EncoderCache::size() const { return entries_.size(); }
void EncoderCache::clear() { entries_.clear(); }
uint64_t EncoderCache::device_bytes() const {
    uint64_t n = 0;
    for (auto& [k, e] : entries_)
        if (e->x) n += e->x->counters().device_bytes;
    return n;
}

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// A warning of encode_prompts: to opt.warn, else stderr.
void warn(const PromptOptions& opt, const std::string& msg) {
    if (opt.warn)
        opt.warn(msg);
    else
        std::fprintf(stderr, "kiln: warning: %s\n", msg.c_str());
}

struct TokenBatch {
    Tensor ids, mask;  // I64 [B, L]
};

// tokenizer(prompts, padding="max_length", max_length, truncation=True) as the pipelines call it.
TokenBatch tokenize(const text::Tokenizer& tok, const ModelSource& src, const std::string& comp,
                    const std::vector<std::string>& prompts, int max_length, const PromptOptions& opt) {
    if (max_length <= 0) max_length = tok.model_max_length();
    KILN_CHECK(max_length > 0, src.path(), " (", comp, "): the tokenizer has no model_max_length");
    const int64_t B = (int64_t)prompts.size();
    TokenBatch t{Tensor(DType::i64, {B, max_length}), Tensor(DType::i64, {B, max_length})};
    for (int64_t b = 0; b < B; ++b) {
        text::check_utf8(prompts[(size_t)b], "prompt " + std::to_string(b));
        text::Tokens k = tok.encode(prompts[(size_t)b], max_length, true);
        KILN_CHECK((int)k.ids.size() == max_length, comp, ": tokenizer returned ", k.ids.size(), " ids, expected ",
                   max_length);
        if (k.untruncated > (size_t)max_length) {
            warn(opt, comp + ": prompt " + std::to_string(b) + " has " + std::to_string(k.untruncated) +
                          " tokens; truncated to " + std::to_string(max_length) + " (as diffusers does)");
        }
        for (int i = 0; i < max_length; ++i) {
            t.ids.data<int64_t>()[b * max_length + i] = k.ids[(size_t)i];
            t.mask.data<int64_t>()[b * max_length + i] = k.mask[(size_t)i];
        }
    }
    return t;
}

// Runs one text encoder on each batch of token ids (the prompts, then the negative prompts: same shape), with the
// mask when `with_mask`. The encoder is planned and its weights uploaded once for all batches; its device memory
// is freed on return, before the next encoder or the transformer loads, so the peak is one encoder's.
// loras: the encoder's own (lora_component), null without: a runtime side path beside its linears, or merged into
// its weights as they are read.
std::vector<std::map<std::string, Tensor>> run_encoder(vk::Context* ctx, const ModelSource& src,
                                                       const std::string& comp, const std::vector<TokenBatch>& batches,
                                                       bool with_mask, const PromptOptions& opt, EncodedPrompts& res,
                                                       int clip_skip, const std::shared_ptr<const LoraSet>& loras,
                                                       const std::vector<int>& states = {}) {
    auto inputs = [&](const TokenBatch& t) {
        std::map<std::string, Tensor> in{{"input_ids", t.ids}};
        if (with_mask) in["attention_mask"] = t.mask;
        if (!states.empty()) {  // a decoder LLM's hidden_states entries
            Tensor l(DType::i64, {(int64_t)states.size()});
            for (size_t i = 0; i < states.size(); ++i) l.data<int64_t>()[i] = states[i];
            in["hidden_states_layers"] = l;
        }
        return in;
    };
    auto t0 = Clock::now();
    std::vector<std::map<std::string, Tensor>> outs;
    // The encoder's weights and a Builder for them, with its LoRAs (merged on read, or the side path).
    auto store = [&] { return loras ? with_loras(src.weights(comp), loras, nullptr) : src.weights(comp); };
    auto builder = [&](ir::Graph& g, const WeightStore& ws) {
        auto b = std::make_unique<Builder>(g, ws);
        if (loras && opt.lora.apply == "runtime") b->set_loras(loras);
        return b;
    };
    if (!ctx && !loras) {
        for (auto& t : batches) outs.push_back(forward_component(nullptr, src, comp, inputs(t), opt.mode, {clip_skip}));
    } else if (!ctx) {  // the CPU reference with LoRAs
        auto ws = store();
        for (auto& t : batches) {
            ir::Graph g;
            auto b = builder(g, *ws);
            auto in = build_component(*b, src.class_of(comp), src.config(comp), inputs(t), {clip_skip});
            outs.push_back(cpu::run(g, in, cpu_weights(*ws, b->constants())));
        }
    } else {
        // One entry per encoder and input shape: the planned, uploaded executor with what it references. Its LoRAs
        // are part of the key (merged ones with their scales): another set replaces the entry of the same shape.
        // The hidden states a decoder LLM outputs are part of the graph: other states, another entry.
        std::string base = comp + "/" + shape_str(batches.at(0).ids.shape) + (with_mask ? "/mask" : "") +
                           (clip_skip ? "/skip" + std::to_string(clip_skip) : "");
        for (size_t i = 0; i < states.size(); ++i) base += (i ? "," : "/states ") + std::to_string(states[i]);
        std::string key = base;
        if (loras) {
            key += "|lora " + opt.lora.apply;
            for (const LoraRequest& l : opt.lora.files) {
                key.append(";").append(l.path);
                if (opt.lora.apply == "merge") key.append("@").append(std::to_string(l.scale));  // baked in
            }
        }
        std::unique_ptr<EncoderCache::Entry> local;
        EncoderCache::Entry* e = nullptr;
        if (opt.keep) {
            auto& m = EncoderCacheAccess::entries(*opt.keep);
            if (auto it = m.find(key); it != m.end()) e = it->second.get();
            for (auto it = m.begin(); !e && it != m.end();)  // the same encoder and shape with other LoRAs: stale
                it = it->first.substr(0, it->first.find('|')) == base ? m.erase(it) : std::next(it);
        }
        const std::string cls = src.class_of(comp);
        std::map<std::string, Tensor> converted;
        if (e) {
            res.reused_encoders++;
        } else {  // plan and upload; only a complete entry goes into the cache
            local = std::make_unique<EncoderCache::Entry>();
            e = local.get();
            e->ws = store();
            e->b = builder(e->g, *e->ws);
            converted = build_component(*e->b, cls, src.config(comp), inputs(batches.at(0)), {clip_skip});
            exec::Mode mode =
                opt.mode == exec::Mode::regional && e->g.regions().size() < 2 ? exec::Mode::full : opt.mode;
            e->x = std::make_unique<exec::Executor>(*ctx, e->g, e->b->weight_fn(), mode);
            if (opt.keep) EncoderCacheAccess::entries(*opt.keep)[key] = std::move(local);
        }
        for (size_t i = 0; i < batches.size(); ++i) {
            if (i > 0 || converted.empty()) {  // the host-side inputs (embedding rows, masks, EOS rows) of a batch,
                ir::Graph scratch;             // and this call's runtime LoRA scales
                auto sb = builder(scratch, *e->ws);
                converted = build_component(*sb, cls, src.config(comp), inputs(batches[i]), {clip_skip});
            }
            for (auto& [name, v] : converted) e->x->set_input(name, v);
            e->x->run();
            std::map<std::string, Tensor> out;
            for (auto& [name, id] : e->g.outputs()) out[name] = e->x->output(name);
            outs.push_back(std::move(out));
        }
        const auto& k = e->x->counters();
        res.peak_device_bytes = std::max<uint64_t>(res.peak_device_bytes, k.device_bytes);
        res.peak_needed_bytes = std::max<uint64_t>(res.peak_needed_bytes, k.weight_bytes + k.activation_bytes_planned);
    }
    res.encode_ms += ms_since(t0);
    return outs;
}

const Tensor& need(const std::map<std::string, Tensor>& m, const std::string& name, const std::string& comp) {
    auto it = m.find(name);
    KILN_CHECK(it != m.end(), comp, ": the text encoder gave no '", name, "'");
    return it->second;
}

// [B, L, D] rows of a and b concatenated along `axis` (1: sequence, 2: features), f32.
Tensor cat3(const Tensor& a, const Tensor& b, int axis) {
    KILN_CHECK(a.shape.size() == 3 && b.shape.size() == 3 && a.shape[0] == b.shape[0], "cat3: bad shapes");
    const int64_t B = a.shape[0];
    Tensor out(DType::f32, axis == 1 ? Shape{B, a.shape[1] + b.shape[1], a.shape[2]}
                                     : Shape{B, a.shape[1], a.shape[2] + b.shape[2]});
    auto fa = a.to_f32(), fb = b.to_f32();
    float* o = out.data<float>();
    if (axis == 1) {
        KILN_CHECK(a.shape[2] == b.shape[2], "cat3: feature widths differ");
        const size_t na = (size_t)(a.shape[1] * a.shape[2]), nb = (size_t)(b.shape[1] * b.shape[2]);
        for (int64_t i = 0; i < B; ++i) {
            std::memcpy(o + i * (na + nb), fa.data() + i * na, na * 4);
            std::memcpy(o + i * (na + nb) + na, fb.data() + i * nb, nb * 4);
        }
    } else {
        KILN_CHECK(a.shape[1] == b.shape[1], "cat3: sequence lengths differ");
        const size_t da = (size_t)a.shape[2], db = (size_t)b.shape[2];
        for (int64_t r = 0; r < B * a.shape[1]; ++r) {
            std::memcpy(o + r * (da + db), fa.data() + r * da, da * 4);
            std::memcpy(o + r * (da + db) + da, fb.data() + r * db, db * 4);
        }
    }
    return out;
}

// F.pad(x, (0, width - D)): zeros on the feature axis.
Tensor pad_features(const Tensor& x, int64_t width) {
    KILN_CHECK(x.shape.size() == 3 && x.shape[2] <= width, "SD3: CLIP features (", x.shape.size() == 3 ? x.shape[2] : 0,
               ") are wider than the T5 features (", width, ")");
    Tensor out(DType::f32, {x.shape[0], x.shape[1], width});
    auto f = x.to_f32();
    const size_t d = (size_t)x.shape[2];
    for (int64_t r = 0; r < x.shape[0] * x.shape[1]; ++r)
        std::memcpy(out.data<float>() + r * width, f.data() + r * d, d * 4);
    return out;
}

Tensor cat2(const Tensor& a, const Tensor& b) {  // [B, Da] ++ [B, Db] on the feature axis
    Tensor a3 = a, b3 = b;
    a3.shape = {a.shape[0], 1, a.shape[1]};
    b3.shape = {b.shape[0], 1, b.shape[1]};
    Tensor o = cat3(a3, b3, 2);
    o.shape = {a.shape[0], a.shape[1] + b.shape[1]};
    return o;
}

std::string tokenizer_of(const std::string& encoder) {  // text_encoder_2 -> tokenizer_2
    return "tokenizer" + encoder.substr(std::string("text_encoder").size());
}
}  // namespace

std::string python_lower_strip(const std::string& utf8) {
    if (!text::unicode::valid_utf8(utf8)) return utf8;  // the tokenizer then names the bad bytes
    const std::u32string d = text::unicode::decode_utf8(utf8);
    const std::u32string u = text::unicode::lower(d.data(), d.data() + d.size());
    // str.strip(): Python's whitespace (Unicode White_Space plus the separators \x1c-\x1f).
    auto space = [](char32_t c) { return text::unicode::is_white_space(c) || (c >= 0x1c && c <= 0x1f); };
    size_t s = 0, e = u.size();
    while (s < e && space(u[s])) ++s;
    while (e > s && space(u[e - 1])) --e;
    return text::unicode::encode_utf8(u.data() + s, u.data() + e);
}

namespace {
// The family of a text-to-image model (nullptr for others) and, when asked, its pipeline's registry entry.
const Family* prompt_family(const ModelSource& src, std::string& pipe, const PipelineClass** pc = nullptr) {
    pipe = t2i_pipeline_class(src);
    return find_pipeline_family(pipe, pc);
}
}  // namespace

int default_max_sequence_length(const ModelSource& src) {
    std::string p;
    const PipelineClass* pc = nullptr;
    const Family* f = prompt_family(src, p, &pc);
    KILN_CHECK(f && f->text_to_image(), src.path(), ": ", p, " takes no prompt");
    if (f->schnell_max_sequence_length) {  // Flux: FLUX.1-schnell has no guidance embedding
        const auto& c = src.config("transformer");
        bool guidance =
            c.contains("guidance_embeds") && c["guidance_embeds"].is_boolean() && c["guidance_embeds"].get<bool>();
        if (!guidance) return f->schnell_max_sequence_length;
    }
    return pc->max_sequence_length;
}

namespace {
// One empty text in a list that falls back to another is Python's None there (`prompt_2 or prompt`).
bool is_none(const std::vector<std::string>& v) { return v.empty() || (v.size() == 1 && v[0].empty()); }

bool is_clip(ComponentKind k) { return k == ComponentKind::clip_text || k == ComponentKind::clip_text_projection; }

// The prompt lists a family's encoders do not read (prompt_2, prompt_3 and their negatives past its last encoder)
// must be None.
void check_prompt_lists(const ModelSource& src, const PromptOptions& opt, const Family& f, const std::string& pipe) {
    int read = 0;
    for (const auto& e : f.encoders) read = std::max(read, e.prompt);
    const std::vector<std::string>* lists[] = {&opt.prompts_2, &opt.prompts_3, &opt.negatives_2, &opt.negatives_3};
    std::vector<std::string> unread;
    bool none = true;
    for (int neg = 0; neg < 2; ++neg)
        for (int k = std::max(read + 1, 2); k <= 3; ++k) {
            unread.push_back(std::string(neg ? "negative_" : "") + "prompt_" + std::to_string(k));
            none = none && is_none(*lists[neg * 2 + k - 2]);
        }
    if (unread.empty() || none) return;
    std::string names;
    for (size_t i = 0; i < unread.size(); ++i)
        names += (i == 0 ? "" : i + 1 == unread.size() ? " and " : ", ") + unread[i];
    KILN_FAIL(src.path(), ": ", pipe, " has ", f.encoders_summary, ": ", names, " do not apply");
}
}  // namespace

void check_prompts(const ModelSource& src, const PromptOptions& opt) {
    std::string pipe;
    const Family* f = prompt_family(src, pipe);
    KILN_CHECK(!opt.prompts.empty(), "no prompt given");
    const size_t n = opt.prompts.size();
    auto check = [&](const std::vector<std::string>& v, const std::string& name, bool listed) {
        KILN_CHECK(listed || v.empty() || v.size() == 1 || v.size() == n, name, ": ", v.size(), " texts for ", n,
                   " prompts (give one for every prompt, or one per prompt)");
        for (size_t i = 0; i < v.size(); ++i) {
            std::string what = name;  // appended piecewise: GCC 12's -Wrestrict misreads "[" + std::to_string(i)
            if (v.size() > 1 || listed) what.append("[").append(std::to_string(i)).append("]");
            text::check_utf8(v[i], what);
        }
    };
    check(opt.prompts, "prompt", true);
    check(opt.negatives, "negative_prompt", false);
    check(opt.prompts_2, "prompt_2", false);
    check(opt.prompts_3, "prompt_3", false);
    check(opt.negatives_2, "negative_prompt_2", false);
    check(opt.negatives_3, "negative_prompt_3", false);
    if (f && f->text_to_image()) check_prompt_lists(src, opt, *f, pipe);
    KILN_CHECK(opt.clip_skip == 0 || (f && f->clip_skip), src.path(), ": clip_skip applies to ",
               family_with(&Family::clip_skip).pipelines[0].name, " (", pipe, "'s __call__ has no clip_skip)");
    KILN_CHECK(!opt.complex_human_instruction || (f && f->complex_human_instruction), src.path(),
               ": complex_human_instruction applies to ",
               family_with(&Family::complex_human_instruction).pipelines[0].name, " (", pipe, "'s __call__ has none)");
    if (opt.complex_human_instruction) text::check_utf8(*opt.complex_human_instruction, "complex_human_instruction");
    KILN_CHECK(opt.clip_skip >= 0, "clip_skip is ", opt.clip_skip, " (0 = none)");
    KILN_CHECK(opt.text_encoder_layers.empty() || (f && f->text_encoder_layers_option), src.path(),
               ": text_encoder_out_layers apply to ",
               family_with(&Family::text_encoder_layers_option).pipelines[0].name, " (", pipe, "'s __call__ has none)");
    KILN_CHECK(is_none(opt.negatives) || !f || !f->distilled_flag, src.path(), ": ", pipe,
               " takes no negative_prompt (its classifier-free guidance always encodes \"\")");
    if (opt.clip_skip > 0)  // diffusers indexes hidden_states[-(clip_skip + 2)] of both CLIP encoders
        for (const auto& e : f->encoders)
            if (is_clip(e.kind) && src.has(e.component)) {
                const std::string enc = e.component;
                const int layers = src.config(enc).value("num_hidden_layers", 12);
                KILN_CHECK(opt.clip_skip <= layers - 1, src.path(), ": clip_skip ", opt.clip_skip,
                           " for a CLIP text model of ", layers, " layers (", enc, "; 0..", layers - 1,
                           ": hidden_states[-(clip_skip + 2)])");
            }
    if (!opt.text_encoder_layers.empty())  // before any work, as encode_qwen indexes them
        for (const auto& e : f->encoders)
            if (e.kind == ComponentKind::qwen3 && src.has(e.component)) {
                const int n = qwen3_config(src.config(e.component), src.class_of(e.component)).layers;
                for (int l : opt.text_encoder_layers)
                    KILN_CHECK(l >= -(n + 1) && l <= n, src.path(), ": text_encoder_out_layers: ", l,
                               " is not a hidden_states entry of this ", n, "-layer Qwen3 (", -(n + 1), "..", n, ")");
            }
}

namespace {
// One encode_prompts call: every encoder's texts, the token batches and the encoder runs, into res.
struct PromptRun {
    vk::Context* ctx;
    const ModelSource& src;
    const PromptOptions& opt;
    EncodedPrompts& res;
    int t5_tokens = 0;                        // max_sequence_length
    int passes = 1;                           // prompts, then (with CFG) negative prompts
    std::vector<std::string> pos[4], neg[4];  // the texts of prompt, prompt_2, prompt_3 ([1..3]) and negatives
    double tok_ms = 0;
    std::shared_ptr<const LoraSet> loras;  // opt.lora as read (every component's modules)

    void keep(const std::string& name, const Tensor& t) {
        if (opt.keep_intermediates) res.intermediates.push_back({name, t});
    }
    // The token batches of encoder e for the prompts and (with CFG) the negative prompts; its tokenizer is loaded
    // once for both. lower: Python's lower().strip() first (PixArt).
    std::vector<TokenBatch> tokens(const TextEncoderUse& e, bool lower = false) {
        auto t0 = Clock::now();
        const std::string enc = e.component, comp = tokenizer_of(enc);
        KILN_CHECK(src.has(comp), src.path(), ": this model has no '", comp,
                   "' (tokenizer files) for its text encoder; give --prompt-embeds FILE instead");
        auto tok = text::load_tokenizer(src.tokenizer_files(comp), src.path() + " (" + comp + ")");
        std::vector<TokenBatch> t;
        for (int n = 0; n < passes; ++n) {
            std::vector<std::string> p = n ? neg[e.prompt] : pos[e.prompt];
            if (lower)
                for (auto& s : p) s = python_lower_strip(s);
            t.push_back(tokenize(*tok, src, comp, p, e.max_tokens ? e.max_tokens : t5_tokens, opt));
            keep(enc + (n ? "_negative" : "") + "_input_ids", t.back().ids);
        }
        tok_ms += ms_since(t0);
        return t;
    }
    std::vector<std::map<std::string, Tensor>> run(const TextEncoderUse& e, const std::vector<TokenBatch>& t,
                                                   bool with_mask, int clip_skip = 0,
                                                   const std::vector<int>& states = {}) {
        return run_encoder(ctx, src, e.component, t, with_mask, opt, res, clip_skip, lora_component(loras, e.component),
                           states);
    }
};

std::string pre(int neg) { return neg ? "negative_" : ""; }

// PixArt: _text_preprocessing(clean_caption): without bs4/ftfy diffusers falls back to lower().strip(). The
// negative prompt is tokenized to the prompt's length (max_sequence_length); the mask goes with the embeddings.
void encode_pixart(PromptRun& r, const Family& f) {
    const TextEncoderUse& t5 = f.encoders[0];
    auto t = r.tokens(t5, true);
    auto out = r.run(t5, t, true);
    for (int neg = 0; neg < r.passes; ++neg) {
        r.res.tensors[pre(neg) + "prompt_embeds"] = need(out[(size_t)neg], "last_hidden_state", t5.component);
        r.res.tensors[pre(neg) + "prompt_attention_mask"] = t[(size_t)neg].mask;
    }
}

// SD3: CLIP-L and CLIP-G penultimate states (clip_skip: the prompts' earlier) concatenated on features, zero-padded
// to the T5 width, then T5 along the sequence; pooled = cat(CLIP-L, CLIP-G text_embeds). No T5: zeros.
void encode_sd3(PromptRun& r, const Family& f) {
    const PromptOptions& opt = r.opt;
    std::vector<std::map<std::string, Tensor>> clip[2];
    for (int k = 0; k < 2; ++k) {  // CLIP-L reads the prompts, CLIP-G prompt_2; both 77 tokens
        const TextEncoderUse& e = f.encoders[(size_t)k];
        const std::string enc = e.component;
        clip[k] = r.run(e, r.tokens(e), false, opt.clip_skip);
        for (int neg = 0; neg < r.passes; ++neg) {
            r.keep(enc + "_" + pre(neg) + "text_embeds", need(clip[k][(size_t)neg], "text_embeds", enc));
            r.keep(enc + "_" + pre(neg) + "penultimate_hidden_state",
                   need(clip[k][(size_t)neg], "penultimate_hidden_state", enc));
        }
        if (opt.clip_skip) r.keep(enc + "_clip_skip_hidden_state", need(clip[k][0], "clip_skip_hidden_state", enc));
    }
    // The prompts' CLIP state: hidden_states[-(clip_skip + 2)]; the negatives': [-2] (clip_skip None).
    auto clip_state = [&](int neg) {
        return !neg && opt.clip_skip ? "clip_skip_hidden_state" : "penultimate_hidden_state";
    };
    const TextEncoderUse& t5e = f.encoders[2];
    std::vector<std::map<std::string, Tensor>> t5;
    if (!r.src.has(t5e.component) && !(is_none(opt.prompts_3) && is_none(opt.negatives_3)))
        warn(opt, r.src.path() +
                      " has no text_encoder_3 (T5): prompt_3 and negative_prompt_3 are ignored, its "
                      "part of prompt_embeds is zeros (as diffusers)");
    if (r.src.has(t5e.component)) t5 = r.run(t5e, r.tokens(t5e), false);
    for (int neg = 0; neg < r.passes; ++neg) {
        const size_t n = (size_t)neg;
        Tensor clip_embeds = cat3(clip[0][n][clip_state(neg)], clip[1][n][clip_state(neg)], 2);
        // _get_t5_prompt_embeds without T5: zeros [B, tokenizer_max_length, joint_attention_dim].
        Tensor t = !t5.empty() ? need(t5[n], "last_hidden_state", t5e.component)
                               : Tensor(DType::f32, {(int64_t)opt.prompts.size(), 77,
                                                     r.src.config("transformer").value("joint_attention_dim", 4096)});
        r.res.tensors[pre(neg) + "prompt_embeds"] = cat3(pad_features(clip_embeds, t.shape[2]), t, 1);
        r.res.tensors[pre(neg) + "pooled_prompt_embeds"] = cat2(clip[0][n]["text_embeds"], clip[1][n]["text_embeds"]);
    }
}

// Flux: CLIP pooler_output (pooled), T5 last_hidden_state (no mask); the negatives with true CFG only.
void encode_flux(PromptRun& r, const Family& f) {
    const TextEncoderUse &ce = f.encoders[0], &te = f.encoders[1];
    auto clip = r.run(ce, r.tokens(ce), false);
    auto t5 = r.run(te, r.tokens(te), false);
    for (int neg = 0; neg < r.passes; ++neg) {  // the negatives with true_cfg_scale > 1 (opt.cfg)
        const size_t n = (size_t)neg;
        r.res.tensors[pre(neg) + "pooled_prompt_embeds"] = need(clip[n], "pooler_output", ce.component);
        r.keep(std::string(ce.component) + "_" + pre(neg) + "pooler_output",
               r.res.tensors[pre(neg) + "pooled_prompt_embeds"]);
        r.res.tensors[pre(neg) + "prompt_embeds"] = need(t5[n], "last_hidden_state", te.component);
    }
}

// Sana, Sana-Sprint: Gemma-2 on the instruction + prompt, then <bos> and the last max_sequence_length - 1 positions
// of the states and the mask (models/pipelines/sana_pipeline.h); the negative prompts without instruction or selection.
void encode_sana(PromptRun& r, const Family& f) {
    const TextEncoderUse& e = f.encoders[0];
    const std::string enc = e.component, comp = tokenizer_of(enc);
    KILN_CHECK(r.src.has(comp), r.src.path(), ": this model has no '", comp,
               "' (tokenizer files) for its text encoder; give --prompt-embeds FILE instead");
    auto t0 = Clock::now();
    auto tok = text::load_tokenizer(r.src.tokenizer_files(comp), r.src.path() + " (" + comp + ")");
    r.tok_ms += ms_since(t0);
    const std::string instruction = r.opt.complex_human_instruction.value_or(sana_default_instruction());
    auto warn_fn = [&](const std::string& m) { warn(r.opt, m); };
    for (int neg = 0; neg < r.passes; ++neg) {
        auto t1 = Clock::now();
        const SanaTokens t =
            sana_tokenize(*tok, neg ? r.neg[1] : r.pos[1], r.t5_tokens, neg ? "" : instruction, warn_fn);
        r.tok_ms += ms_since(t1);
        r.keep(enc + (neg ? "_negative" : "") + "_input_ids", t.ids);
        r.keep(enc + (neg ? "_negative" : "") + "_attention_mask", t.mask);
        auto out = r.run(e, {TokenBatch{t.ids, t.mask}}, true);
        const Tensor& h = need(out[0], "last_hidden_state", enc);
        r.keep(enc + (neg ? "_negative" : "") + "_last_hidden_state", h);
        r.res.tensors[pre(neg) + "prompt_embeds"] = neg ? h : sana_select(h, r.t5_tokens);
        r.res.tensors[pre(neg) + "prompt_attention_mask"] = neg ? t.mask : sana_select(t.mask, r.t5_tokens);
    }
}

// Z-Image, FLUX.2 [klein]: each prompt in the Qwen3 chat template, tokenized alone to max_sequence_length (padded,
// truncated), Qwen3 with the mask, the family's hidden_states. Klein stacks them on features (layer-major) and keeps
// every position; Z-Image's one state goes with the mask (its pipeline keeps each prompt's unmasked rows).
void encode_qwen(PromptRun& r, const Family& f) {
    const TextEncoderUse& e = f.encoders[0];
    const std::string enc = e.component, comp = tokenizer_of(enc);
    KILN_CHECK(r.src.has(enc), r.src.path(), ": this model has no '", enc, "' (", f.pipelines[0].name,
               " encodes the prompt with Qwen3): give --text-encoder FILE (--llm), or --prompt-embeds FILE");
    KILN_CHECK(r.src.has(comp), r.src.path(), ": this model has no '", comp,
               "' (tokenizer files) for its text encoder; give --prompt-embeds FILE instead");
    auto t0 = Clock::now();
    auto tok = text::load_tokenizer(r.src.tokenizer_files(comp), r.src.path() + " (" + comp + ")");
    const auto* q = dynamic_cast<const text::QwenTokenizer*>(tok.get());
    KILN_CHECK(q, r.src.path(), " (", comp, "): ", f.pipelines[0].name, " encodes with Qwen3, whose tokenizer is ",
               class_name(ComponentKind::qwen2_tokenizer), "; this one is ", tok->class_name());
    const bool thinking = f.chat_template == ChatTemplate::qwen_thinking;
    std::vector<TokenBatch> batches;
    for (int neg = 0; neg < r.passes; ++neg) {
        std::vector<std::string> texts;  // the chat-templated prompts, each tokenized alone
        for (const std::string& p : neg ? r.neg[1] : r.pos[1]) texts.push_back(q->chat_prompt(p, thinking));
        batches.push_back(tokenize(*q, r.src, comp, texts, r.t5_tokens, r.opt));
        r.keep(enc + (neg ? "_negative" : "") + "_input_ids", batches.back().ids);
        r.keep(enc + (neg ? "_negative" : "") + "_attention_mask", batches.back().mask);
    }
    r.tok_ms += ms_since(t0);
    const std::vector<int>& layers =
        r.opt.text_encoder_layers.empty() ? f.text_encoder_layers : r.opt.text_encoder_layers;
    // Each requested entry in transformers' numbering -> the encoder's output name (negative: from the end).
    const int n = qwen3_config(r.src.config(enc), r.src.class_of(enc)).layers;
    std::vector<std::string> names;
    for (int l : layers) {
        KILN_CHECK(l >= -(n + 1) && l <= n, r.src.path(), ": text_encoder_out_layers: ", l,
                   " is not a hidden_states entry of this ", n, "-layer Qwen3 (", -(n + 1), "..", n, ")");
        names.push_back("hidden_states_" + std::to_string(l < 0 ? n + 1 + l : l));
    }
    auto out = r.run(e, batches, true, 0, layers);
    for (int neg = 0; neg < r.passes; ++neg) {
        const auto& o = out[(size_t)neg];
        Tensor embeds = need(o, names[0], enc);
        for (size_t i = 1; i < names.size(); ++i) embeds = cat3(embeds, need(o, names[i], enc), 2);
        if (layers == std::vector<int>{-2}) r.keep(enc + (neg ? "_negative" : "") + "_hidden_states_m2", embeds);
        r.res.tensors[pre(neg) + "prompt_embeds"] = embeds;
        if (thinking) r.res.tensors[pre(neg) + "prompt_attention_mask"] = batches[(size_t)neg].mask;
    }
}
}  // namespace

std::shared_ptr<const LoraSet> load_model_loras(const ModelSource& src, const std::string& family,
                                                const LoraOptions& opt, bool encoders_run) {
    std::vector<std::unique_ptr<WeightStore>> stores;
    std::map<std::string, const WeightStore*> components;
    stores.push_back(src.weights("transformer"));
    components["transformer"] = stores.back().get();
    if (encoders_run)
        for (const std::string& c : layouts::lora_text_encoders(family))
            if (src.has(c)) {
                stores.push_back(src.weights(c));
                components[c] = stores.back().get();
            }
    return load_loras(components, family, opt,
                      encoders_run ? "is not in this model" : "does not run: prompt_embeds given");
}

EncodedPrompts encode_prompts(vk::Context* ctx, const ModelSource& src, const PromptOptions& opt) {
    EncodedPrompts res;
    std::string pipe;
    const Family* f = prompt_family(src, pipe);
    check_prompts(src, opt);
    KILN_CHECK(f && f->text_to_image(), src.path(), ": ", pipe,
               " does not take a prompt (it is class-conditional: use --class-labels)");
    PromptRun r{ctx, src, opt, res};
    r.t5_tokens = opt.max_sequence_length > 0 ? opt.max_sequence_length : default_max_sequence_length(src);
    r.passes = opt.cfg ? 2 : 1;
    if (!opt.lora.files.empty())
        r.loras = opt.lora.loaded ? opt.lora.loaded : load_model_loras(src, f->name, opt.lora, true);
    // Every encoder's texts, one per prompt: diffusers' negative_prompt (default ""), prompt_2 / prompt_3 (default
    // the prompt) and negative_prompt_2 / negative_prompt_3 (default the negative prompt).
    const size_t n = opt.prompts.size();
    auto rows = [n](const std::vector<std::string>& v, const std::vector<std::string>& fallback, bool none_falls_back) {
        if (v.empty() || (none_falls_back && is_none(v))) return fallback;
        return v.size() == 1 ? std::vector<std::string>(n, v[0]) : v;
    };
    r.pos[1] = opt.prompts;
    r.neg[1] = rows(opt.negatives, std::vector<std::string>(n), false);
    r.pos[2] = rows(opt.prompts_2, opt.prompts, true), r.pos[3] = rows(opt.prompts_3, opt.prompts, true);
    r.neg[2] = rows(opt.negatives_2, r.neg[1], true), r.neg[3] = rows(opt.negatives_3, r.neg[1], true);
    switch (f->id) {
        case FamilyId::pixart:
            encode_pixart(r, *f);
            break;
        case FamilyId::sd3:
            encode_sd3(r, *f);
            break;
        case FamilyId::flux:
            encode_flux(r, *f);
            break;
        case FamilyId::sana:
        case FamilyId::sana_sprint:
            encode_sana(r, *f);
            break;
        case FamilyId::z_image:
        case FamilyId::flux2_klein:
            encode_qwen(r, *f);
            break;
        case FamilyId::dit:
            break;  // not text-to-image: refused above
    }
    res.tokenize_ms = r.tok_ms;
    return res;
}

}  // namespace kiln::models
