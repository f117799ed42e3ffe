// T5 encoders: transformers' names (ComfyUI / Stability files) and llama.cpp's names (T5 GGUF files, as
// ComfyUI-GGUF's loader maps them back). Kiln's T5 reads the vocabulary table as `shared.weight`
// (converter/arch.cpp t5_encoder), so it is presented under that name whichever name the file uses.
#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

void map_t5(const Group& g, MapOut& out) {
    bool has_shared = false;
    for (const auto& [k, i] : g.keys) has_shared |= k == "shared.weight";
    for (const auto& [k, i] : g.keys) {
        if (k == "encoder.embed_tokens.weight") {
            // transformers ties it to shared.weight; some files store both, some only one of them.
            if (!has_shared) out.copy(i, "shared.weight");
        } else if (k == "shared.weight" || starts_with(k, "encoder.")) {
            out.copy(i, k);
        } else if (starts_with(k, "decoder.") || starts_with(k, "lm_head.") || k == "spiece_model") {
            // The encoder-only T5 ignores the decoder and LM head; spiece_model is the tokenizer ComfyUI saves as a
            // tensor.
        } else {
            out.unexplained.push_back(out.src(i).name);
        }
    }
}

namespace {

// enc.blk.N.<module> -> encoder.block.N.<module'> (llama.cpp's llm_tensor names for T5).
const std::vector<Rename> kLlamaBlock = {
    {"attn_q", "layer.0.SelfAttention.q"},
    {"attn_k", "layer.0.SelfAttention.k"},
    {"attn_v", "layer.0.SelfAttention.v"},
    {"attn_o", "layer.0.SelfAttention.o"},
    {"attn_rel_b", "layer.0.SelfAttention.relative_attention_bias"},  // [buckets, heads] as nn.Embedding's
    {"attn_norm", "layer.0.layer_norm"},
    {"ffn_gate", "layer.1.DenseReluDense.wi_0"},
    {"ffn_down", "layer.1.DenseReluDense.wo"},
    {"ffn_norm", "layer.1.layer_norm"},
};

}  // namespace

void map_t5_llama(const Group& g, MapOut& out) {
    // Gated T5 (v1.1, the one Flux/SD3 use): ffn_gate = wi_0, ffn_up = wi_1. Plain T5: ffn_up = wi.
    bool gated = false;
    for (const auto& [k, i] : g.keys) gated |= k.find(".ffn_gate.") != std::string::npos;
    for (const auto& [k, i] : g.keys) {
        std::string name, rest;
        int n;
        if (k == "token_embd.weight") {
            out.copy(i, "shared.weight");
        } else if (starts_with(k, "enc.output_norm.")) {
            out.copy(i, "encoder.final_layer_norm." + k.substr(16));
        } else if (block_key(k, "enc.blk.", n, rest) && starts_with(rest, "ffn_up.")) {
            out.copy(i, "encoder.block." + std::to_string(n) + ".layer.1.DenseReluDense." + (gated ? "wi_1" : "wi") +
                            rest.substr(6));
        } else if (block_key(k, "enc.blk.", n, rest) && rename(kLlamaBlock, rest, name)) {
            out.copy(i, "encoder.block." + std::to_string(n) + "." + name);
        } else if (!starts_with(k, "dec.") && k != "output.weight") {  // the decoder and LM head: unused
            out.unexplained.push_back(out.src(i).name);
        }
    }
}

}  // namespace kiln::layouts::detail
