#include "models/core/common.h"

#include <cmath>

namespace kiln::models {

Tensor sincos_pos_embed_2d(int D, int h, int w, double base_size, double interp) {
    // grid_h/grid_w: torch f32 arange / (size / base_size) / interpolation_scale; the 1-D tables are
    // computed in f64 (omega = 1 / 10000^(k / (D/4))) and cast to f32, as diffusers does.
    Tensor t(DType::f32, {1, (int64_t)h * w, D});
    float* out = t.data<float>();
    int quarter = D / 4;
    auto coord = [&](int i, int size) { return (double)((float)i / (float)(size / base_size) / (float)interp); };
    for (int i = 0; i < h; ++i)
        for (int j = 0; j < w; ++j) {
            float* row = out + ((size_t)i * w + j) * D;
            // First half from grid[0] (the w coordinate), second half from grid[1] (the h coordinate).
            double pos[2] = {coord(j, w), coord(i, h)};
            for (int half = 0; half < 2; ++half)
                for (int k = 0; k < quarter; ++k) {
                    double omega = 1.0 / std::pow(10000.0, (double)k / (D / 4.0));
                    double a = pos[half] * omega;
                    row[half * D / 2 + k] = (float)std::sin(a);
                    row[half * D / 2 + quarter + k] = (float)std::cos(a);
                }
        }
    return t;
}

ir::Val linear(Builder& b, const std::string& name, ir::Val x, int in, int out) {
    ir::Val w = b.matrix(name + ".weight", {out, in});
    ir::Val bias = b.opt_vec(name + ".bias", {out});
    return b.lora_side(name, x, b.g().linear(x, w, bias), in, out);  // + B (A x) where a runtime LoRA targets it
}

ir::Val timestep_embedding_mlp(Builder& b, const std::string& name, ir::Val t_proj, int in, int dim) {
    ir::Val h = linear(b, name + ".linear_1", t_proj, in, dim);
    return linear(b, name + ".linear_2", b.g().silu(h), dim, dim);
}

ir::Val self_attention(Builder& b, const std::string& name, ir::Val x, int dim, int heads) {
    auto& g = b.g();
    ir::Val q = linear(b, name + ".to_q", x, dim, dim);  // [B, S, H*D]
    ir::Val k = linear(b, name + ".to_k", x, dim, dim);
    ir::Val v = linear(b, name + ".to_v", x, dim, dim);
    ir::Val o = g.attention(q, k, v, heads);
    return linear(b, name + ".to_out.0", o, dim, dim);
}

ir::Val feed_forward(Builder& b, const std::string& name, ir::Val x, int dim, int inner, bool tanh) {
    ir::Val h = linear(b, name + ".net.0.proj", x, dim, inner);
    return linear(b, name + ".net.2", b.g().gelu(h, tanh), inner, dim);
}

}  // namespace kiln::models
