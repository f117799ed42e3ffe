// Qwen3 text encoders (Z-Image's and FLUX.2 [klein]'s): transformers' names (ComfyUI's qwen_3_4b.safetensors, under
// "model." or bare) and llama.cpp's names (Qwen3-4B-Q4_K_M.gguf, GGUF architecture qwen3). Both are presented under
// Qwen3Model's names (embed_tokens, layers.N.*, norm); a Qwen3ForCausalLM part gets "model." put back by the caller
// (converter/assemble.cpp open_part). The LM head (lm_head / output) is unused by an encoder and dropped.
//
// llama.cpp's names, as gguf-py's tensor_mapping.py maps Qwen3 (MODEL_ARCH.QWEN3) and ComfyUI-GGUF's loader maps
// them back. llama.cpp permutes q/k rows only for the LLaMA architecture (its rotary pairs); Qwen's rotary is the
// NeoX half split in both projects, so Qwen3's q_proj / k_proj are stored as transformers has them.
#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"

namespace kiln::layouts::detail {

namespace {

bool qwen3_layer_rest(const std::string& rest) {
    static const char* const known[] = {
        "input_layernorm.",  "post_attention_layernorm.", "self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
        "self_attn.o_proj.", "self_attn.q_norm.",         "self_attn.k_norm.", "mlp.gate_proj.",    "mlp.up_proj.",
        "mlp.down_proj."};
    for (const char* p : known)
        if (starts_with(rest, p)) return true;
    return false;
}

// blk.N.<name> -> layers.N.<name'>
const std::vector<Rename> kLlamaBlock = {
    {"attn_norm", "input_layernorm"},    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"}, {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

}  // namespace

void map_qwen3(const Group& g, MapOut& out) {
    for (const auto& [k, i] : g.keys) {
        int n;
        std::string rest;
        if (k == "embed_tokens.weight" || k == "norm.weight" ||
            (block_key(k, "layers.", n, rest) && qwen3_layer_rest(rest)))
            out.copy(i, k);
        else if (!starts_with(k, "lm_head."))
            out.unexplained.push_back(out.src(i).name);
    }
}

void map_qwen3_llama(const Group& g, MapOut& out) {
    for (const auto& [k, i] : g.keys) {
        int n;
        std::string rest, name;
        if (k == "token_embd.weight")
            out.copy(i, "embed_tokens.weight");
        else if (k == "output_norm.weight")
            out.copy(i, "norm.weight");
        else if (block_key(k, "blk.", n, rest) && rename(kLlamaBlock, rest, name))
            out.copy(i, "layers." + std::to_string(n) + "." + name);
        else if (k != "output.weight")  // the LM head (absent when tied to token_embd)
            out.unexplained.push_back(out.src(i).name);
    }
}

}  // namespace kiln::layouts::detail
