#pragma once
// transformers' CLIP text model, with or without projection (models/clip/modeling_clip.py, 4.47): token +
// learned position embeddings, pre-LN encoder layers with a causal self-attention mask, final layer norm,
// the pooled row at the EOS token and (WithProjection) the bias-free text_projection.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "models/core/weights.h"

namespace kiln::models {

struct CLIPTextConfig {
    int vocab_size = 49408, hidden_size = 512, intermediate_size = 2048, heads = 8, layers = 12;
    int max_positions = 77, projection_dim = 512, eos_token_id = 2;
    std::string hidden_act = "quick_gelu";  // quick_gelu | gelu | gelu_new (tanh)
    float layer_norm_eps = 1e-5f;
    bool projection = false;  // the text model with projection (ComponentKind::clip_text_projection)
    // transformers' config.json keys; rejects activations Kiln does not implement.
    static CLIPTextConfig from_json(const nlohmann::json& j, bool with_projection);
};

// The graph inputs for input_ids [B, S] (any integer dtype) and an optional 0/1 attention_mask [B, S]:
// "input_ids" i32 [B*S] (build_component turns them into "inputs_embeds" f32 [B*S, D], the token_embedding rows
// gathered on the host, which is what the graph takes), "position_ids" i32 [S], "attention_bias" f32 [1|B, S, S]
// (causal, plus (1 - mask) * finfo(f32).min added in f32 as transformers does), "eos_index" i32 [B] (row b*S + EOS
// position).
std::map<std::string, Tensor> clip_text_inputs(const CLIPTextConfig& c, const Tensor& input_ids,
                                               const Tensor* attention_mask);

// Forward graph for B sequences of S tokens (inputs as above; batch_mask: attention_bias is [B, S, S]).
// Outputs: last_hidden_state [B, S, D], penultimate_hidden_state (hidden_states[-2]: the input of the last
// layer) [B, S, D], and pooler_output [B, D] or, with projection, text_embeds [B, projection_dim].
// Layers 0..N-2 are regions of kind "clip_layers"; the last runs inline so the penultimate state is the
// carried residual.
// clip_skip k > 0 (diffusers' clip_skip, 1..N-1): also clip_skip_hidden_state, hidden_states[-(k + 2)] (the input
// of layer N-1-k); layers 0..N-2-k are then the regions, and the k layers after them run inline.
void build_clip_text(Builder& b, const CLIPTextConfig& c, int B, int S, bool batch_mask, int clip_skip = 0);

}  // namespace kiln::models
