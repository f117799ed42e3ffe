#include "models/text_encode.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "models/forward.h"
#include "models/t2i_pipeline.h"
#include "models/text/tokenizer.h"
#include "runtime/core/error.h"

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
std::vector<std::map<std::string, Tensor>> run_encoder(vk::Context* ctx, const ModelSource& src,
                                                       const std::string& comp, const std::vector<TokenBatch>& batches,
                                                       bool with_mask, const PromptOptions& opt, EncodedPrompts& res,
                                                       int clip_skip = 0) {
    auto inputs = [&](const TokenBatch& t) {
        std::map<std::string, Tensor> in{{"input_ids", t.ids}};
        if (with_mask) in["attention_mask"] = t.mask;
        return in;
    };
    auto t0 = Clock::now();
    std::vector<std::map<std::string, Tensor>> outs;
    if (!ctx) {
        for (auto& t : batches) outs.push_back(forward_component(nullptr, src, comp, inputs(t), opt.mode, {clip_skip}));
    } else {
        // One entry per encoder and input shape: the planned, uploaded executor with what it references.
        const std::string key = comp + "/" + shape_str(batches.at(0).ids.shape) + (with_mask ? "/mask" : "") +
                                (clip_skip ? "/skip" + std::to_string(clip_skip) : "");
        std::unique_ptr<EncoderCache::Entry> local;
        EncoderCache::Entry* e = nullptr;
        if (opt.keep) {
            auto& m = EncoderCacheAccess::entries(*opt.keep);
            if (auto it = m.find(key); it != m.end()) e = it->second.get();
        }
        const std::string cls = src.class_of(comp);
        std::map<std::string, Tensor> converted;
        if (e) {
            res.reused_encoders++;
        } else {  // plan and upload; only a complete entry goes into the cache
            local = std::make_unique<EncoderCache::Entry>();
            e = local.get();
            e->ws = src.weights(comp);
            e->b = std::make_unique<Builder>(e->g, *e->ws);
            converted = build_component(*e->b, cls, src.config(comp), inputs(batches.at(0)), {clip_skip});
            exec::Mode mode =
                opt.mode == exec::Mode::regional && e->g.regions().size() < 2 ? exec::Mode::full : opt.mode;
            e->x = std::make_unique<exec::Executor>(*ctx, e->g, e->b->weight_fn(), mode);
            if (opt.keep) EncoderCacheAccess::entries(*opt.keep)[key] = std::move(local);
        }
        for (size_t i = 0; i < batches.size(); ++i) {
            if (i > 0 || converted.empty()) {  // the host-side inputs (embedding rows, masks, EOS rows) of a batch
                ir::Graph scratch;
                Builder sb(scratch, *e->ws);
                converted = build_component(sb, cls, src.config(comp), inputs(batches[i]), {clip_skip});
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
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(utf8);
    u.toLower(icu::Locale::getRoot());
    // str.strip(): Python's whitespace (Unicode White_Space plus the separators \x1c-\x1f).
    auto space = [](UChar32 c) { return u_isUWhiteSpace(c) || (c >= 0x1c && c <= 0x1f); };
    int32_t s = 0, e = u.length();
    while (s < e && space(u.char32At(s))) s = u.moveIndex32(s, 1);
    while (e > s && space(u.char32At(u.moveIndex32(e, -1)))) e = u.moveIndex32(e, -1);
    std::string out;
    u.tempSubStringBetween(s, e).toUTF8String(out);
    return out;
}

int default_max_sequence_length(const ModelSource& src) {
    const std::string p = t2i_pipeline_class(src);
    if (p == "PixArtAlphaPipeline") return 120;
    if (p == "PixArtSigmaPipeline") return 300;
    if (p == "StableDiffusion3Pipeline") return 256;
    if (p == "FluxPipeline") {
        const auto& c = src.config("transformer");
        bool guidance =
            c.contains("guidance_embeds") && c["guidance_embeds"].is_boolean() && c["guidance_embeds"].get<bool>();
        return guidance ? 512 : 256;  // FLUX.1-schnell (no guidance embedding) was trained with 256
    }
    KILN_FAIL(src.path(), ": ", p, " takes no prompt");
}

namespace {
// One empty text in a list that falls back to another is Python's None there (`prompt_2 or prompt`).
bool is_none(const std::vector<std::string>& v) { return v.empty() || (v.size() == 1 && v[0].empty()); }
}  // namespace

void check_prompts(const ModelSource& src, const PromptOptions& opt) {
    const std::string pipe = t2i_pipeline_class(src);
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
    if (pipe == "PixArtSigmaPipeline" || pipe == "PixArtAlphaPipeline")
        KILN_CHECK(
            is_none(opt.prompts_2) && is_none(opt.prompts_3) && is_none(opt.negatives_2) && is_none(opt.negatives_3),
            src.path(), ": ", pipe,
            " has one text encoder (T5): prompt_2, prompt_3, negative_prompt_2 and negative_prompt_3 do not "
            "apply");
    KILN_CHECK(opt.clip_skip == 0 || pipe == "StableDiffusion3Pipeline", src.path(), ": clip_skip applies to ",
               "StableDiffusion3Pipeline (", pipe, "'s __call__ has no clip_skip)");
    KILN_CHECK(opt.clip_skip >= 0, "clip_skip is ", opt.clip_skip, " (0 = none)");
    if (opt.clip_skip > 0)  // diffusers indexes hidden_states[-(clip_skip + 2)] of both CLIP encoders
        for (const char* enc : {"text_encoder", "text_encoder_2"})
            if (src.has(enc)) {
                const int layers = src.config(enc).value("num_hidden_layers", 12);
                KILN_CHECK(opt.clip_skip <= layers - 1, src.path(), ": clip_skip ", opt.clip_skip,
                           " for a CLIP text model of ", layers, " layers (", enc, "; 0..", layers - 1,
                           ": hidden_states[-(clip_skip + 2)])");
            }
    if (pipe == "FluxPipeline")
        KILN_CHECK(is_none(opt.prompts_3) && is_none(opt.negatives_3), src.path(), ": ", pipe,
                   " has two text encoders (CLIP, then T5 which reads prompt_2): prompt_3 and negative_prompt_3 do "
                   "not apply");
}

EncodedPrompts encode_prompts(vk::Context* ctx, const ModelSource& src, const PromptOptions& opt) {
    EncodedPrompts res;
    const std::string pipe = t2i_pipeline_class(src);
    check_prompts(src, opt);
    const int T5 = opt.max_sequence_length > 0 ? opt.max_sequence_length : default_max_sequence_length(src);
    // Every encoder's texts, one per prompt: diffusers' negative_prompt (default ""), prompt_2 / prompt_3 (default
    // the prompt) and negative_prompt_2 / negative_prompt_3 (default the negative prompt).
    const size_t n = opt.prompts.size();
    auto rows = [n](const std::vector<std::string>& v, const std::vector<std::string>& fallback, bool none_falls_back) {
        if (v.empty() || (none_falls_back && is_none(v))) return fallback;
        return v.size() == 1 ? std::vector<std::string>(n, v[0]) : v;
    };
    const auto negs = rows(opt.negatives, std::vector<std::string>(n), false);
    const auto prompts_2 = rows(opt.prompts_2, opt.prompts, true), prompts_3 = rows(opt.prompts_3, opt.prompts, true);
    const auto negs_2 = rows(opt.negatives_2, negs, true), negs_3 = rows(opt.negatives_3, negs, true);
    auto keep = [&](const std::string& name, const Tensor& t) {
        if (opt.keep_intermediates) res.intermediates.push_back({name, t});
    };
    double tok_ms = 0;
    const int passes = opt.cfg ? 2 : 1;  // prompts, then negative prompts (Flux: true CFG)
    // The token batches of encoder `enc` for the prompts and (with CFG) the negative prompts; its tokenizer is
    // loaded once for both.
    auto both = [&](const std::string& enc, int max_len, bool lower, const std::vector<std::string>& pos_texts,
                    const std::vector<std::string>& neg_texts) {
        auto t0 = Clock::now();
        const std::string comp = tokenizer_of(enc);
        KILN_CHECK(src.has(comp), src.path(), ": this model has no '", comp,
                   "' (tokenizer files) for its text encoder; give --prompt-embeds FILE instead");
        auto tok = text::load_tokenizer(src.tokenizer_files(comp), src.path() + " (" + comp + ")");
        std::vector<TokenBatch> t;
        for (int neg = 0; neg < passes; ++neg) {
            std::vector<std::string> p = neg ? neg_texts : pos_texts;
            if (lower)
                for (auto& s : p) s = python_lower_strip(s);
            t.push_back(tokenize(*tok, src, comp, p, max_len, opt));
            keep(enc + (neg ? "_negative" : "") + "_input_ids", t.back().ids);
        }
        tok_ms += ms_since(t0);
        return t;
    };
    auto pre = [](int neg) { return std::string(neg ? "negative_" : ""); };
    if (pipe == "PixArtSigmaPipeline" || pipe == "PixArtAlphaPipeline") {
        // _text_preprocessing(clean_caption): without bs4/ftfy diffusers falls back to lower().strip(). The negative
        // prompt is tokenized to the prompt's length (max_sequence_length).
        auto t = both("text_encoder", T5, true, opt.prompts, negs);
        auto out = run_encoder(ctx, src, "text_encoder", t, true, opt, res);
        for (int neg = 0; neg < passes; ++neg) {
            res.tensors[pre(neg) + "prompt_embeds"] = need(out[(size_t)neg], "last_hidden_state", "text_encoder");
            res.tensors[pre(neg) + "prompt_attention_mask"] = t[(size_t)neg].mask;
        }
    } else if (pipe == "StableDiffusion3Pipeline") {
        std::vector<std::map<std::string, Tensor>> clip[2];
        for (int k = 0; k < 2; ++k) {  // CLIP-L reads the prompts, CLIP-G prompt_2; both 77 tokens
            const std::string enc = k ? "text_encoder_2" : "text_encoder";
            clip[k] = run_encoder(ctx, src, enc, both(enc, 77, false, k ? prompts_2 : opt.prompts, k ? negs_2 : negs),
                                  false, opt, res, opt.clip_skip);
            for (int neg = 0; neg < passes; ++neg) {
                keep(enc + "_" + pre(neg) + "text_embeds", need(clip[k][(size_t)neg], "text_embeds", enc));
                keep(enc + "_" + pre(neg) + "penultimate_hidden_state",
                     need(clip[k][(size_t)neg], "penultimate_hidden_state", enc));
            }
            if (opt.clip_skip) keep(enc + "_clip_skip_hidden_state", need(clip[k][0], "clip_skip_hidden_state", enc));
        }
        // The prompts' CLIP state: hidden_states[-(clip_skip + 2)]; the negatives': [-2] (clip_skip None).
        auto clip_state = [&](int neg) {
            return !neg && opt.clip_skip ? "clip_skip_hidden_state" : "penultimate_hidden_state";
        };
        std::vector<std::map<std::string, Tensor>> t5;
        if (!src.has("text_encoder_3") && !(is_none(opt.prompts_3) && is_none(opt.negatives_3)))
            warn(opt, src.path() +
                          " has no text_encoder_3 (T5): prompt_3 and negative_prompt_3 are ignored, its "
                          "part of prompt_embeds is zeros (as diffusers)");
        if (src.has("text_encoder_3"))
            t5 = run_encoder(ctx, src, "text_encoder_3", both("text_encoder_3", T5, false, prompts_3, negs_3), false,
                             opt, res);
        for (int neg = 0; neg < passes; ++neg) {
            const size_t n = (size_t)neg;
            Tensor clip_embeds = cat3(clip[0][n][clip_state(neg)], clip[1][n][clip_state(neg)], 2);
            // _get_t5_prompt_embeds without T5: zeros [B, tokenizer_max_length, joint_attention_dim].
            Tensor t = !t5.empty() ? need(t5[n], "last_hidden_state", "text_encoder_3")
                                   : Tensor(DType::f32, {(int64_t)opt.prompts.size(), 77,
                                                         src.config("transformer").value("joint_attention_dim", 4096)});
            res.tensors[pre(neg) + "prompt_embeds"] = cat3(pad_features(clip_embeds, t.shape[2]), t, 1);
            res.tensors[pre(neg) + "pooled_prompt_embeds"] = cat2(clip[0][n]["text_embeds"], clip[1][n]["text_embeds"]);
        }
    } else if (pipe == "FluxPipeline") {
        auto clip =
            run_encoder(ctx, src, "text_encoder", both("text_encoder", 77, false, opt.prompts, negs), false, opt, res);
        auto t5 = run_encoder(ctx, src, "text_encoder_2", both("text_encoder_2", T5, false, prompts_2, negs_2), false,
                              opt, res);
        for (int neg = 0; neg < passes; ++neg) {  // the negatives with true_cfg_scale > 1 (opt.cfg)
            const size_t n = (size_t)neg;
            res.tensors[pre(neg) + "pooled_prompt_embeds"] = need(clip[n], "pooler_output", "text_encoder");
            keep(std::string("text_encoder_") + (neg ? "negative_" : "") + "pooler_output",
                 res.tensors[pre(neg) + "pooled_prompt_embeds"]);
            res.tensors[pre(neg) + "prompt_embeds"] = need(t5[n], "last_hidden_state", "text_encoder_2");
        }
    } else {
        KILN_FAIL(src.path(), ": ", pipe, " does not take a prompt (it is class-conditional: use --class-labels)");
    }
    res.tokenize_ms = tok_ms;
    return res;
}

}  // namespace kiln::models
