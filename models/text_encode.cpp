#include "models/text_encode.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "models/forward.h"
#include "models/text/tokenizer.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct TokenBatch {
    Tensor ids, mask;  // I64 [B, L]
};

// tokenizer(prompts, padding="max_length", max_length, truncation=True) as the pipelines call it.
TokenBatch tokenize(const ModelSource& src, const std::string& comp, const std::vector<std::string>& prompts,
                    int max_length, const PromptOptions& opt) {
    KILN_CHECK(src.has(comp), src.path(), ": this model has no '", comp,
               "' (tokenizer files) for its text encoder; give --prompt-embeds FILE instead");
    auto tok = text::load_tokenizer(src.tokenizer_files(comp), src.path() + " (" + comp + ")");
    if (max_length <= 0) max_length = tok->model_max_length();
    KILN_CHECK(max_length > 0, src.path(), " (", comp, "): the tokenizer has no model_max_length");
    const int64_t B = (int64_t)prompts.size();
    TokenBatch t{Tensor(DType::i64, {B, max_length}), Tensor(DType::i64, {B, max_length})};
    for (int64_t b = 0; b < B; ++b) {
        text::check_utf8(prompts[(size_t)b], "prompt " + std::to_string(b));
        text::Tokens k = tok->encode(prompts[(size_t)b], max_length, true);
        KILN_CHECK((int)k.ids.size() == max_length, comp, ": tokenizer returned ", k.ids.size(), " ids, expected ",
                   max_length);
        if (k.untruncated > (size_t)max_length) {
            std::string msg = comp + ": prompt " + std::to_string(b) + " has " + std::to_string(k.untruncated) +
                              " tokens; truncated to " + std::to_string(max_length) + " (as diffusers does)";
            if (opt.warn)
                opt.warn(msg);
            else
                std::fprintf(stderr, "kiln: warning: %s\n", msg.c_str());
        }
        for (int i = 0; i < max_length; ++i) {
            t.ids.data<int64_t>()[b * max_length + i] = k.ids[(size_t)i];
            t.mask.data<int64_t>()[b * max_length + i] = k.mask[(size_t)i];
        }
    }
    return t;
}

// Runs one text encoder on token ids (and the mask when `with_mask`), returning its named outputs.
std::map<std::string, Tensor> run_encoder(vk::Context* ctx, const ModelSource& src, const std::string& comp,
                                          const TokenBatch& t, bool with_mask, const PromptOptions& opt,
                                          EncodedPrompts& res) {
    std::map<std::string, Tensor> in{{"input_ids", t.ids}};
    if (with_mask) in["attention_mask"] = t.mask;
    auto t0 = Clock::now();
    std::map<std::string, Tensor> out;
    if (!ctx) {
        out = forward_component(nullptr, src, comp, in, opt.mode);
    } else {
        auto ws = src.weights(comp);
        ir::Graph g;
        Builder b(g, *ws);
        auto converted = build_component(b, src.class_of(comp), src.config(comp), in);
        exec::Mode mode = opt.mode == exec::Mode::regional && g.regions().size() < 2 ? exec::Mode::full : opt.mode;
        exec::Executor x(*ctx, g, b.weight_fn(), mode);  // freed on return, before the transformer loads
        for (auto& [name, v] : converted) x.set_input(name, v);
        x.run();
        for (auto& [name, id] : g.outputs()) out[name] = x.output(name);
        res.peak_device_bytes = std::max<uint64_t>(res.peak_device_bytes, x.counters().device_bytes);
    }
    res.encode_ms += ms_since(t0);
    return out;
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

std::string pipeline_class(const ModelSource& src) {
    const auto& mi = src.model_index();
    if (mi.contains("_class_name") && mi["_class_name"].is_string()) return mi["_class_name"].get<std::string>();
    KILN_CHECK(src.has("transformer"), src.path(), ": no transformer component");
    const std::string t = src.class_of("transformer");
    if (t == "DiTTransformer2DModel") return "DiTPipeline";
    if (t == "PixArtTransformer2DModel") return "PixArtSigmaPipeline";
    if (t == "SD3Transformer2DModel") return "StableDiffusion3Pipeline";
    if (t == "FluxTransformer2DModel") return "FluxPipeline";
    KILN_FAIL(src.path(), ": no pipeline for transformer class ", t);
}

int default_max_sequence_length(const ModelSource& src) {
    const std::string p = pipeline_class(src);
    if (p == "PixArtAlphaPipeline") return 120;
    if (p == "PixArtSigmaPipeline") return 300;
    if (p == "StableDiffusion3Pipeline") return 256;
    if (p == "FluxPipeline") {
        const auto& c = src.config("transformer");
        bool guidance = c.contains("guidance_embeds") && c["guidance_embeds"].is_boolean() &&
                        c["guidance_embeds"].get<bool>();
        return guidance ? 512 : 256;  // FLUX.1-schnell (no guidance embedding) was trained with 256
    }
    KILN_FAIL(src.path(), ": ", p, " takes no prompt");
}

EncodedPrompts encode_prompts(vk::Context* ctx, const ModelSource& src, const PromptOptions& opt) {
    EncodedPrompts res;
    const std::string pipe = pipeline_class(src);
    KILN_CHECK(!opt.prompts.empty(), "no prompt given");
    const int T5 = opt.max_sequence_length > 0 ? opt.max_sequence_length : default_max_sequence_length(src);
    const std::vector<std::string> negs(opt.prompts.size(), opt.negative.value_or(""));
    auto keep = [&](const std::string& name, const Tensor& t) {
        if (opt.keep_intermediates) res.intermediates.push_back({name, t});
    };
    auto t_tok = Clock::now();
    double tok_ms = 0;
    auto tokenized = [&](const std::string& enc, const std::vector<std::string>& prompts, int max_len, bool neg) {
        auto t0 = Clock::now();
        TokenBatch t = tokenize(src, tokenizer_of(enc), prompts, max_len, opt);
        tok_ms += ms_since(t0);
        keep(enc + (neg ? "_negative" : "") + "_input_ids", t.ids);
        return t;
    };
    (void)t_tok;

    if (pipe == "PixArtSigmaPipeline" || pipe == "PixArtAlphaPipeline") {
        // _text_preprocessing(clean_caption): without bs4/ftfy diffusers falls back to lower().strip().
        for (int neg = 0; neg <= (opt.cfg ? 1 : 0); ++neg) {
            std::vector<std::string> p;
            for (auto& s : neg ? negs : opt.prompts) p.push_back(python_lower_strip(s));
            TokenBatch t = tokenized("text_encoder", p, T5, neg);
            auto out = run_encoder(ctx, src, "text_encoder", t, true, opt, res);
            const std::string pre = neg ? "negative_" : "";
            res.tensors[pre + "prompt_embeds"] = need(out, "last_hidden_state", "text_encoder");
            res.tensors[pre + "prompt_attention_mask"] = t.mask;
        }
    } else if (pipe == "StableDiffusion3Pipeline") {
        for (int neg = 0; neg <= (opt.cfg ? 1 : 0); ++neg) {
            const auto& p = neg ? negs : opt.prompts;
            const std::string pre = neg ? "negative_" : "";
            std::map<std::string, Tensor> clip[2];
            for (int k = 0; k < 2; ++k) {
                const std::string enc = k ? "text_encoder_2" : "text_encoder";
                TokenBatch t = tokenized(enc, p, 77, neg);  // tokenizer_max_length (CLIP: 77)
                clip[k] = run_encoder(ctx, src, enc, t, false, opt, res);
                keep(enc + "_" + pre + "text_embeds", need(clip[k], "text_embeds", enc));
                keep(enc + "_" + pre + "penultimate_hidden_state", need(clip[k], "penultimate_hidden_state", enc));
            }
            Tensor clip_embeds = cat3(clip[0]["penultimate_hidden_state"], clip[1]["penultimate_hidden_state"], 2);
            Tensor t5;
            const int64_t B = (int64_t)p.size();
            if (src.has("text_encoder_3")) {
                TokenBatch t = tokenized("text_encoder_3", p, T5, neg);
                t5 = need(run_encoder(ctx, src, "text_encoder_3", t, false, opt, res), "last_hidden_state",
                          "text_encoder_3");
            } else {  // _get_t5_prompt_embeds without T5: zeros [B, tokenizer_max_length, joint_attention_dim]
                const auto& tc = src.config("transformer");
                t5 = Tensor(DType::f32, {B, 77, tc.value("joint_attention_dim", 4096)});
            }
            res.tensors[pre + "prompt_embeds"] = cat3(pad_features(clip_embeds, t5.shape[2]), t5, 1);
            res.tensors[pre + "pooled_prompt_embeds"] = cat2(clip[0]["text_embeds"], clip[1]["text_embeds"]);
        }
    } else if (pipe == "FluxPipeline") {
        TokenBatch tc = tokenized("text_encoder", opt.prompts, 77, false);
        auto clip = run_encoder(ctx, src, "text_encoder", tc, false, opt, res);
        res.tensors["pooled_prompt_embeds"] = need(clip, "pooler_output", "text_encoder");
        keep("text_encoder_pooler_output", res.tensors["pooled_prompt_embeds"]);
        TokenBatch tt = tokenized("text_encoder_2", opt.prompts, T5, false);
        res.tensors["prompt_embeds"] =
            need(run_encoder(ctx, src, "text_encoder_2", tt, false, opt, res), "last_hidden_state", "text_encoder_2");
    } else {
        KILN_FAIL(src.path(), ": ", pipe, " does not take a prompt (it is class-conditional: use --class-labels)");
    }
    res.tokenize_ms = tok_ms;
    for (auto& [name, t] : res.tensors) keep(name, t);
    return res;
}

}  // namespace kiln::models
