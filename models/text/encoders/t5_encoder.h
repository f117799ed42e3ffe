#pragma once
// transformers' T5 encoder (models/t5/modeling_t5.py, 4.47): shared token embedding, N pre-RMS-norm
// blocks of unscaled self-attention with a relative position bias (bidirectional buckets, table of block 0,
// shared by every block) and a (gated) feed-forward, final RMS norm. No position embeddings.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "models/core/weights.h"

namespace kiln::models {

struct T5Config {
    int vocab_size = 32128, d_model = 512, d_kv = 64, d_ff = 2048, heads = 8, layers = 6;
    int num_buckets = 32, max_distance = 128;
    float eps = 1e-6f;
    std::string act = "gelu_new";  // of the gated FFN: gelu_new (tanh approximation) or silu
    int inner() const { return heads * d_kv; }
    // transformers' config.json keys; feed_forward_proj "gated-gelu" or "gated-silu", others rejected.
    static T5Config from_json(const nlohmann::json& j);
};

// transformers T5Attention._relative_position_bucket(memory - context, bidirectional=True) for every
// (query i, key j) of S tokens: i32 [S*S], row-major over (i, j). The log-spaced buckets are computed in
// f32 as torch does, so a distance on a bucket boundary truncates as it does there.
Tensor t5_relative_buckets(const T5Config& c, int S);

// The graph inputs for input_ids [B, S] and an optional 0/1 attention_mask [B, S]: "input_ids" i32 [B*S] (the
// graph takes "inputs_embeds" f32 [B*S, d_model] instead: build_component gathers the rows on the host),
// "position_buckets" i32 [S*S], "attention_bias" f32 [B, 1, 1, S] ((1 - mask) * finfo(f32).min; zeros without
// a mask).
std::map<std::string, Tensor> t5_encoder_inputs(const T5Config& c, const Tensor& input_ids,
                                                const Tensor* attention_mask);

// Forward graph for B sequences of S tokens. Output: last_hidden_state [B, S, d_model]. Every block is a
// region of kind "t5_blocks" (the position bias is computed before them, so all are identical).
void build_t5_encoder(Builder& b, const T5Config& c, int B, int S);

}  // namespace kiln::models
