// The text encoders' descriptors (component_ops.h): CLIP (with and without projection), T5, Gemma-2, Qwen3.
#include <algorithm>
#include <string>
#include <vector>

#include "models/core/component_ops.h"
#include "models/text/encoders/clip_text.h"
#include "models/text/encoders/gemma2.h"
#include "models/text/encoders/qwen3.h"
#include "models/text/encoders/t5_encoder.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// input_ids [B, S] (integer) and the optional attention_mask [B, S] (1 = keep), as every text encoder takes them.
struct TokenIds {
    const Tensor& ids;
    const Tensor* mask;  // nullptr: none
    int B, S;
};

TokenIds token_ids(const Inputs& inputs, const std::string& cls) {
    const Tensor& ids = need_input(inputs, "input_ids", cls);
    KILN_CHECK(ids.shape.size() == 2, cls, ": input_ids must be [B, S], got ", shape_str(ids.shape));
    auto m = inputs.find("attention_mask");
    return {ids, m != inputs.end() ? &m->second : nullptr, (int)ids.shape[0], (int)ids.shape[1]};
}

// An encoder's host-side inputs (ids, masks, EOS positions, T5 position buckets) with the token embeddings in place of
// input_ids: they are gathered on the host, so the vocabulary table never goes to the device.
Inputs embed(Builder& b, Inputs in, const std::string& table, int64_t V, int64_t D) {
    in["inputs_embeds"] = b.gather_rows(table, {V, D}, in.at("input_ids"));
    in.erase("input_ids");
    return in;
}

// CLIPTextModel (clip_skip: also the hidden state it names) and CLIPTextModelWithProjection.
Inputs clip_inputs(Builder& b, ComponentKind kind, const std::string& cls, const nlohmann::json& config,
                   const Inputs& inputs, const ComponentOptions& co) {
    const TokenIds t = token_ids(inputs, cls);
    auto c = CLIPTextConfig::from_json(config, kind == ComponentKind::clip_text_projection);
    build_clip_text(b, c, t.B, t.S, t.mask != nullptr, co.clip_skip);
    return embed(b, clip_text_inputs(c, t.ids, t.mask), "text_model.embeddings.token_embedding.weight", c.vocab_size,
                 c.hidden_size);
}

Inputs t5_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config, const Inputs& inputs,
                 const ComponentOptions&) {
    const TokenIds t = token_ids(inputs, cls);
    auto c = T5Config::from_json(config);
    build_t5_encoder(b, c, t.B, t.S);
    // embed_tokens is tied to `shared`; some checkpoints store only the encoder's copy.
    const std::string table = b.has("shared.weight") || !b.has("encoder.embed_tokens.weight")
                                  ? "shared.weight"
                                  : "encoder.embed_tokens.weight";
    return embed(b, t5_encoder_inputs(c, t.ids, t.mask), table, c.vocab_size, c.d_model);
}

// CLIP and T5: a prompt of S/3 tokens then the end token (CLIP: EOS padding to 77 tokens; T5: </s> = 1, then pad 0
// to 512 tokens, as Flux's pipeline), no attention mask.
Inputs clip_t5_example(ComponentKind kind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    const bool t5 = kind == ComponentKind::t5_encoder;
    const int V = cfg.value("vocab_size", t5 ? 32128 : 49408);
    const int S = t5 ? 512 : std::min(77, cfg.value("max_position_embeddings", 77));
    const int eos_cfg = cfg.value("eos_token_id", 2), eos = t5 ? 1 : eos_cfg == 2 ? V - 1 : eos_cfg;
    Tensor ids(DType::i64, {B, S});
    for (int b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s) {
            int64_t v = s < S / 3 ? 3 + (s * 7919 + b * 13) % (V - 4) : (s == S / 3 || !t5) ? eos : 0;
            ids.data<int64_t>()[(int64_t)b * S + s] = v;
        }
    in["input_ids"] = ids;
    return in;
}

Inputs gemma2_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                     const Inputs& inputs, const ComponentOptions&) {
    const TokenIds t = token_ids(inputs, cls);
    auto c = Gemma2Config::from_json(config);
    build_gemma2_encoder(b, c, t.B, t.S);
    return embed(b, gemma2_encoder_inputs(c, t.ids, t.mask), "embed_tokens.weight", c.vocab_size, c.hidden_size);
}

// Sana's prompt part: max_sequence_length 300 tokens, <bos> (2), S/3 prompt tokens, then <pad> (0) with
// attention_mask 0 (right padding, as SanaPipeline pads).
Inputs gemma2_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    const int S = 300, V = cfg.value("vocab_size", 256000);
    Tensor ids(DType::i64, {B, S}), mask(DType::i64, {B, S});
    for (int b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s) {
            const bool valid = s <= S / 3;
            ids.data<int64_t>()[(int64_t)b * S + s] = s == 0 ? 2 : valid ? 3 + (s * 7919 + b * 13) % (V - 4) : 0;
            mask.data<int64_t>()[(int64_t)b * S + s] = valid;
        }
    in["input_ids"] = ids;
    in["attention_mask"] = mask;
    return in;
}

Inputs qwen3_inputs(Builder& b, ComponentKind, const std::string& cls, const nlohmann::json& config,
                    const Inputs& inputs, const ComponentOptions&) {
    const TokenIds t = token_ids(inputs, cls);
    DecoderLlmConfig c = qwen3_config(config, cls);
    // transformers loads either class from either layout (base_model_prefix "model"): follow the weights.
    const std::string other = c.prefix.empty() ? "model." : "";
    if (!b.has(c.prefix + "embed_tokens.weight") && b.has(other + "embed_tokens.weight")) c.prefix = other;
    // hidden_states_layers (optional, integer [k]): the hidden_states entries to output, transformers' numbering
    // (Z-Image: -2; FLUX.2 [klein]: 9, 18, 27); absent: every entry, as output_hidden_states=True.
    std::vector<int64_t> want;
    if (auto it = inputs.find("hidden_states_layers"); it != inputs.end()) {
        Tensor l = it->second.astype(DType::i64);
        KILN_CHECK(l.numel() > 0 && l.shape.size() <= 1, cls, ": hidden_states_layers must be a list of indices, got ",
                   shape_str(l.shape));
        want.assign(l.data<int64_t>(), l.data<int64_t>() + l.numel());
    } else {
        for (int64_t i = 0; i <= c.layers; ++i) want.push_back(i);
    }
    build_decoder_llm(b, c, t.B, t.S, t.mask != nullptr, resolve_hidden_states(c, want));
    return embed(b, decoder_llm_inputs(c, t.ids, t.mask), c.prefix + "embed_tokens.weight", c.vocab_size,
                 c.hidden_size);
}

// As Z-Image's pipeline: max_sequence_length 512 tokens, right padding after S/3 prompt tokens (the pad
// token, attention_mask 0), and the state it takes, hidden_states[-2].
Inputs qwen3_example(ComponentKind, const nlohmann::json& cfg, int B, int h, int w) {
    Inputs in;
    const int S = 512, V = cfg.value("vocab_size", 151936);
    Tensor ids(DType::i64, {B, S}), mask(DType::i64, {B, S}), layers(DType::i64, {1});
    for (int b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s) {
            const bool valid = s < S / 3;
            ids.data<int64_t>()[(int64_t)b * S + s] = valid ? (s * 7919 + b * 13) % (V - 1) : V - 1;
            mask.data<int64_t>()[(int64_t)b * S + s] = valid;
        }
    layers.data<int64_t>()[0] = -2;
    in["input_ids"] = ids;
    in["attention_mask"] = mask;
    in["hidden_states_layers"] = layers;
    return in;
}
}  // namespace

const std::vector<ComponentOps>& text_encoder_component_ops() {
    using K = ComponentKind;
    static const std::vector<ComponentOps> v = {
        {K::clip_text, clip_inputs, clip_t5_example}, {K::clip_text_projection, clip_inputs, clip_t5_example},
        {K::t5_encoder, t5_inputs, clip_t5_example},  {K::gemma2, gemma2_inputs, gemma2_example},
        {K::qwen3, qwen3_inputs, qwen3_example},
    };
    return v;
}

}  // namespace kiln::models
