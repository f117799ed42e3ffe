#pragma once
// Building blocks shared by the transformer models, each written like its diffusers counterpart.
#include <string>

#include "models/core/weights.h"
#include "runtime/core/error.h"

namespace kiln::models {

// config.json's `key`, or `def` when it is absent or null (diffusers' default). A value of the wrong
// type is a kiln::Error naming the key.
template <class T>
T config_value(const nlohmann::json& j, const char* key, T def) {
    if (!j.contains(key) || j[key].is_null()) return def;
    try {
        return j[key].get<T>();
    } catch (const nlohmann::json::exception&) {
        KILN_FAIL("config.json: '", key, "' has the wrong type (", j[key].dump(), ")");
    }
}

// diffusers get_2d_sincos_pos_embed(embed_dim, (h, w), base_size, interpolation_scale), as [1, h*w, D].
Tensor sincos_pos_embed_2d(int embed_dim, int h, int w, double base_size, double interpolation_scale);

// nn.Linear: "<name>.weight" [out, in], optional "<name>.bias" [out].
ir::Val linear(Builder& b, const std::string& name, ir::Val x, int in, int out);
// diffusers TimestepEmbedding: linear_1 -> silu -> linear_2.
ir::Val timestep_embedding_mlp(Builder& b, const std::string& name, ir::Val t_proj, int in, int dim);
// diffusers Attention self-attention (to_q/k/v, to_out.0), q/k/v [B, S, H*D].
ir::Val self_attention(Builder& b, const std::string& name, ir::Val x, int dim, int heads);
// diffusers FeedForward with GELU ("gelu" or "gelu-approximate"): net.0.proj -> gelu -> net.2.
ir::Val feed_forward(Builder& b, const std::string& name, ir::Val x, int dim, int inner, bool tanh);

}  // namespace kiln::models
