#include "models/text/encoders/clip_text.h"

#include <limits>

#include "models/core/common.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"

namespace kiln::models {

namespace {
// Messages name the class as diffusers / transformers do.
std::string cls() { return class_name(ComponentKind::clip_text); }
}  // namespace

CLIPTextConfig CLIPTextConfig::from_json(const nlohmann::json& j, bool with_projection) {
    CLIPTextConfig c;
    auto get = [&](const char* k, auto def) { return config_value(j, k, def); };
    c.vocab_size = get("vocab_size", 49408);
    c.hidden_size = get("hidden_size", 512);
    c.intermediate_size = get("intermediate_size", 2048);
    c.heads = get("num_attention_heads", 8);
    c.layers = get("num_hidden_layers", 12);
    c.max_positions = get("max_position_embeddings", 77);
    c.projection_dim = get("projection_dim", 512);
    c.eos_token_id = get("eos_token_id", 2);
    c.hidden_act = get("hidden_act", std::string("quick_gelu"));
    c.layer_norm_eps = (float)get("layer_norm_eps", 1e-5);
    c.projection = with_projection;
    if (c.hidden_act == "gelu_pytorch_tanh") c.hidden_act = "gelu_new";  // the same tanh approximation
    KILN_CHECK(c.hidden_act == "quick_gelu" || c.hidden_act == "gelu" || c.hidden_act == "gelu_new", cls(),
               ": hidden_act '", c.hidden_act, "' is not supported (quick_gelu, gelu, gelu_new, gelu_pytorch_tanh)");
    KILN_CHECK(c.heads > 0 && c.hidden_size % c.heads == 0 && c.layers > 0 && c.vocab_size > 0, cls(),
               ": bad config (hidden_size ", c.hidden_size, ", ", c.heads, " heads, ", c.layers, " layers)");
    return c;
}

std::map<std::string, Tensor> clip_text_inputs(const CLIPTextConfig& c, const Tensor& input_ids,
                                               const Tensor* attention_mask) {
    KILN_CHECK(input_ids.shape.size() == 2, cls(), ": input_ids must be [B, S], got ", shape_str(input_ids.shape));
    const int64_t B = input_ids.shape[0], S = input_ids.shape[1];
    KILN_CHECK(S >= 1 && S <= c.max_positions, cls(), ": ", S, " tokens exceed max_position_embeddings ",
               c.max_positions);
    Tensor ids = input_ids.astype(DType::i64);
    const int64_t* id = ids.data<int64_t>();
    std::map<std::string, Tensor> in;
    Tensor tok(DType::i32, {B * S}), pos(DType::i32, {S}), eos(DType::i32, {B});
    for (int64_t i = 0; i < B * S; ++i) {
        KILN_CHECK(id[i] >= 0 && id[i] < c.vocab_size, cls(), ": token id ", id[i], " outside the vocabulary of ",
                   c.vocab_size);
        tok.data<int32_t>()[i] = (int32_t)id[i];
    }
    for (int64_t s = 0; s < S; ++s) pos.data<int32_t>()[s] = (int32_t)s;  // position_ids[:, :S]
    // Pooled row: the legacy eos_token_id 2 pools at argmax(input_ids) (the EOS has the highest id in CLIP's
    // vocabulary); otherwise at the first input_ids == eos_token_id, position 0 when there is none (argmax of
    // an all-zero row). Ties resolve to the first position, as torch.argmax.
    for (int64_t b = 0; b < B; ++b) {
        const int64_t* row = id + b * S;
        int64_t best = 0;
        for (int64_t s = 1; s < S; ++s)
            if (c.eos_token_id == 2 ? row[s] > row[best] : (row[s] == c.eos_token_id && row[best] != c.eos_token_id))
                best = s;
        eos.data<int32_t>()[b] = (int32_t)(b * S + best);
    }
    // attention_bias: causal finfo.min above the diagonal; with attention_mask, (1 - mask) * finfo.min on the
    // masked keys added to it in f32 (a masked key above the diagonal sums to -inf, as in transformers).
    const float lowest = std::numeric_limits<float>::lowest();
    Tensor bias(DType::f32, {attention_mask ? B : 1, S, S});
    Tensor mask;
    if (attention_mask) {
        mask = attention_mask->astype(DType::f32);
        KILN_CHECK(mask.numel() == B * S, cls(), ": attention_mask must be [B, S] = [", B, ", ", S, "], got ",
                   shape_str(mask.shape));
    }
    for (int64_t b = 0; b < bias.shape[0]; ++b)
        for (int64_t i = 0; i < S; ++i)
            for (int64_t j = 0; j < S; ++j) {
                float v = j > i ? lowest : 0.f;
                if (attention_mask) v += (1.f - mask.data<float>()[b * S + j]) * lowest;
                bias.data<float>()[(b * S + i) * S + j] = v;
            }
    in["input_ids"] = tok;
    in["position_ids"] = pos;
    in["attention_bias"] = bias;
    in["eos_index"] = eos;
    return in;
}

namespace {
// CLIPMLP: fc1 -> activation -> fc2. quick_gelu(x) = x * sigmoid(1.702 x) = silu(1.702 x) / 1.702: two extra
// f32 roundings (the scales) against torch's x * sigmoid(1.702 x), ~1e-7 relative.
ir::Val mlp(Builder& b, const CLIPTextConfig& c, const std::string& name, ir::Val x) {
    auto& g = b.g();
    ir::Val h = linear(b, name + ".fc1", x, c.hidden_size, c.intermediate_size);  // [B, S, F]
    if (c.hidden_act == "quick_gelu")
        h = g.scale(g.silu(g.scale(h, 1.702f)), 1.f / 1.702f);
    else
        h = g.gelu(h, c.hidden_act == "gelu_new");
    return linear(b, name + ".fc2", h, c.intermediate_size, c.hidden_size);  // [B, S, D]
}

// CLIPEncoderLayer (pre-LN): h += self_attn(layer_norm1(h)); h += mlp(layer_norm2(h)).
ir::Val encoder_layer(Builder& b, const CLIPTextConfig& c, int i, ir::Val h, ir::Val bias) {
    auto& g = b.g();
    const int D = c.hidden_size;
    const std::string pre = "text_model.encoder.layers." + std::to_string(i) + ".";
    auto ln = [&](const std::string& n, ir::Val x) {
        return g.layer_norm(x, b.vec(pre + n + ".weight", {D}), b.vec(pre + n + ".bias", {D}), c.layer_norm_eps);
    };
    ir::Val x = ln("layer_norm1", h);                               // [B, S, D]
    ir::Val q = linear(b, pre + "self_attn.q_proj", x, D, D);       // [B, S, H*hd]
    ir::Val k = linear(b, pre + "self_attn.k_proj", x, D, D);       // [B, S, H*hd]
    ir::Val v = linear(b, pre + "self_attn.v_proj", x, D, D);       // [B, S, H*hd]
    ir::Val o = g.attention(q, k, v, c.heads, bias);                // softmax(q k^T / sqrt(hd) + bias) v
    h = g.add(h, linear(b, pre + "self_attn.out_proj", o, D, D));   // [B, S, D]
    return g.add(h, mlp(b, c, pre + "mlp", ln("layer_norm2", h)));  // [B, S, D]
}
}  // namespace

void build_clip_text(Builder& b, const CLIPTextConfig& c, int B, int S, bool batch_mask, int clip_skip) {
    KILN_CHECK(clip_skip >= 0 && clip_skip <= c.layers - 1, "clip_skip ", clip_skip, " for a CLIP text model of ",
               c.layers, " layers (0..", c.layers - 1, ": hidden_states[-(clip_skip + 2)])");
    auto& g = b.g();
    const int D = c.hidden_size;
    ir::Val tok = g.input("inputs_embeds", {(int64_t)B * S, D});  // token_embedding rows, gathered on the host
    ir::Val pos_ids = g.input("position_ids", {S}, DType::i32);
    ir::Val bias = g.input("attention_bias", {batch_mask ? B : 1, S, S});
    ir::Val eos = g.input("eos_index", {B}, DType::i32);

    // embeddings: token_embedding(input_ids) + position_embedding(position_ids).
    ir::Val pos = g.embedding(b.matrix("text_model.embeddings.position_embedding.weight", {c.max_positions, D}),
                              pos_ids);                                       // [S, D]
    ir::Val h = g.add(g.reshape(tok, {B, S, D}), g.reshape(pos, {1, S, D}));  // [B, S, D]

    // Layers 0..N-2 replay as one kind; the last runs inline, so its input (hidden_states[-2]) is the
    // carried residual of the last replayed layer, which the regional JIT may read after the blocks.
    // With clip_skip k, the regions stop k layers earlier: their carried residual is hidden_states[-(k + 2)].
    const int replayed = c.layers - 1 - clip_skip;
    for (int i = 0; i < replayed; ++i) {
        g.begin_region("clip_layers", i);
        h = encoder_layer(b, c, i, h, bias);
        g.end_region();
    }
    if (clip_skip > 0) {
        g.output(h, "clip_skip_hidden_state");
        for (int i = replayed; i < c.layers - 1; ++i) h = encoder_layer(b, c, i, h, bias);
    }
    g.output(h, "penultimate_hidden_state");
    h = encoder_layer(b, c, c.layers - 1, h, bias);
    ir::Val last = g.layer_norm(h, b.vec("text_model.final_layer_norm.weight", {D}),
                                b.vec("text_model.final_layer_norm.bias", {D}), c.layer_norm_eps);  // [B, S, D]
    g.output(last, "last_hidden_state");

    // pooled_output = last_hidden_state[b, eos_position(b)]: a gather of rows b*S + pos of [B*S, D].
    ir::Val pooled = g.embedding(g.reshape(last, {(int64_t)B * S, D}), eos);  // [B, D]
    if (c.projection)
        g.output(g.linear(pooled, b.matrix("text_projection.weight", {c.projection_dim, D}), {}), "text_embeds");
    else
        g.output(pooled, "pooler_output");
}

}  // namespace kiln::models
