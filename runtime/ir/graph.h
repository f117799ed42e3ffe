#pragma once
// The tensor IR: values (shape, dtype, role) and nodes (op, inputs, attrs), built by model code
// through the builder methods below. Building is pure: it records ops and infers shapes (throwing
// kiln::Error that names the op and shapes on mismatch); nothing is computed.
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/ir/attrs.h"
#include "runtime/ir/ops.h"

namespace kiln::ir {

enum class Role : uint8_t { input, weight, activation };

struct Val {
    int id = -1;
    explicit operator bool() const { return id >= 0; }
    bool operator==(const Val&) const = default;
};

struct Value {
    Shape shape;
    DType dtype = DType::f32;  // storage dtype; compute is f32
    Role role = Role::activation;
    std::string name;   // inputs: argument name; weights: tensor name in the model file
    int producer = -1;  // node index, -1 for inputs and weights
    int region = -1;    // region index of the producing node
};

// A fused read (ir::fuse): input `input` of a node is columns [start, start + shape.back()) of each width-wide row
// of the value the node lists there (the source of a last-axis slice), read as a value of `shape` (the slice's
// shape, or a reshape of it with the same last dim). The slice is not materialised.
struct InputView {
    int input = -1;
    int64_t start = 0, width = 0;
    Shape shape;
    bool operator==(const InputView&) const = default;
};

struct Node {
    Op op;
    std::vector<int> in;  // value ids; -1 marks an absent optional input (e.g. no bias)
    int out = -1;
    std::vector<int> extra_out;  // linear_multi: its outputs after the first (-1: slot unused)
    Attrs attrs;
    int region = -1;               // index into Graph::regions(), -1 outside repeated blocks
    std::vector<InputView> views;  // fused reads of slices (ir::fuse); empty in graphs as built
};

// The shape input i of n is read as: its view's, else its value's.
inline const Shape& input_shape(const std::vector<Value>& values, const Node& n, size_t i) {
    for (const InputView& v : n.views)
        if (v.input == (int)i) return v.shape;
    return values.at((size_t)n.in[i]).shape;
}
inline const InputView* input_view(const Node& n, size_t i) {
    for (const InputView& v : n.views)
        if (v.input == (int)i) return &v;
    return nullptr;
}

// A repeated block instance: nodes [first, end) belong to block `index` of kind `kind`.
struct Region {
    std::string kind;
    int index = 0;
    int first = 0, end = 0;
};

struct FuseStats;
struct FuseOptions;
struct LevelOrderStats;

class Graph {
public:
    Val input(const std::string& name, Shape shape, DType dtype = DType::f32);
    Val weight(const std::string& name, Shape shape, DType dtype = DType::f32);
    void output(Val v, const std::string& name);

    // Elementwise with numpy broadcasting.
    Val add(Val a, Val b);
    Val sub(Val a, Val b);
    Val mul(Val a, Val b);
    Val div(Val a, Val b);                            // a / b, IEEE division (b = 0 gives inf/nan as in torch)
    Val scale(Val x, float alpha, float beta = 0.f);  // alpha*x + beta
    Val silu(Val x);
    Val relu(Val x);
    Val tanh(Val x);
    Val gelu(Val x, bool tanh_approx);
    Val softmax(Val x);  // last dim
    // Norms; weight/bias may be Val{} (absent).
    Val layer_norm(Val x, Val weight, Val bias, float eps);
    Val group_norm(Val x, int groups, Val weight, Val bias, float eps);
    Val rms_norm(Val x, Val weight, float eps);
    Val linear(Val x, Val w, Val b, Act act = Act::none);  // x [.., K], w [N, K], b [N] or absent -> [.., N]
    Val matmul(Val a, Val b);                              // [B, M, K] @ [B|1, K, N] -> [B, M, N]
    // q [B, Sq, H*D], k/v [B, Sk, H*D], mask additive [B|1, Sq|1, Sk] or absent -> [B, Sq, H*D]
    Val attention(Val q, Val k, Val v, int heads, Val mask = {}, float scale = 0.f);
    // The same with every option of AttentionAttrs (grouped-query: k/v [B, Sk, kv_heads*D]; causal; softcap). q/k/v
    // may be stored f16 (set_storage); the mask is f32.
    Val attention(Val q, Val k, Val v, const AttentionAttrs& a, Val mask = {});
    Val modulate(Val x, Val shift, Val scale);  // x [B, N, C], shift/scale [B, C]
    // Rotary embedding, interleaved pairs (diffusers apply_rotary_emb, use_real_unbind_dim=-1): x [B, S, H*D],
    // cos/sin [S, D/2] (D = 2 * cos.shape[1]); y[2i] = x[2i] cos - x[2i+1] sin, y[2i+1] = x[2i+1] cos + x[2i] sin.
    Val rope(Val x, Val cos, Val sin);
    Val embedding(Val table, Val ids);                      // table [V, D], ids i32 [N] -> [N, D]
    Val timestep_embedding(Val t, const TimestepAttrs& a);  // t f32 [N] -> [N, dim]
    Val conv2d(Val x, Val w, Val b, const Conv2dAttrs& a);  // x [B,C,H,W], w [O,C/groups,kh,kw]
    Val upsample_nearest2x(Val x);
    Val permute(Val x, const std::vector<int>& perm);
    Val transpose(Val x, int a, int b);
    Val concat(Val a, Val b, int axis);
    Val slice(Val x, int axis, int64_t start, int64_t length);
    std::vector<Val> split(Val x, int axis, const std::vector<int64_t>& sizes);
    std::vector<Val> chunk(Val x, int axis, int n);
    Val reshape(Val x, Shape shape);  // one dim may be -1
    // Compositions (reshape + permute), as diffusers' PatchEmbed / DiT unpatchify lay data out.
    Val patchify(Val x, int p);  // [B, C, H, W] -> [B, (H/p)*(W/p), C*p*p], features ordered (c, py, px)
    Val unpatchify(Val x, int p, int channels, int h, int w);  // [B, h*w, p*p*C] (py,px,c) -> [B, C, h*p, w*p]

    // Fused forms, made by ir::fuse (fuse.h) for the Vulkan executor; each computes what its parts compute.
    // linear_multi: parts[i] = linear(x, w[i], b[i], act[i]) for up to kMultiLinear weights of one K.
    std::vector<Val> linear_multi(Val x, const std::vector<Val>& w, const std::vector<Val>& b,
                                  const std::vector<Act>& act);
    // modulate(layer_norm(x, no weight, no bias, eps), shift, scale): x [B, N, C], shift/scale [B, C].
    Val norm_modulate(Val x, Val shift, Val scale, float eps);
    // add(mul(a, b), c), numpy broadcasting of all three (a gated residual: gate * h + x). The product is rounded
    // to f32 before the sum, as the two ops do (no fused multiply-add).
    Val mul_add(Val a, Val b, Val c);
    // Fused (ir::fuse): x [B, S, H*D], each head's D values RMS-normalised over D (then * weight [D], optional),
    // then rotated by rope with cos/sin [S, D/2]: rope(reshape(rms_norm(reshape(x, [B, S, H, D])))).
    Val rms_norm_rope(Val x, Val weight, Val cos, Val sin, float eps);

    // Repeated blocks: nodes added between begin and end belong to block `index` of `kind`.
    // Activation storage (ir::store_f16): activation v is stored as `dt` (f32 or f16); compute stays f32.
    void set_storage(Val v, DType dt);

    void begin_region(const std::string& kind, int index);
    void end_region();

    const Value& value(Val v) const { return values_.at((size_t)v.id); }
    const Value& value(int id) const { return values_.at((size_t)id); }
    const Shape& shape(Val v) const { return value(v).shape; }
    const std::vector<Value>& values() const { return values_; }
    const std::vector<Node>& nodes() const { return nodes_; }
    const std::vector<Region>& regions() const { return regions_; }
    const std::vector<std::pair<std::string, int>>& outputs() const { return outputs_; }
    std::vector<int> inputs() const;   // value ids of role input
    std::vector<int> weights() const;  // value ids of role weight

private:
    friend Graph fuse(const Graph& g, FuseStats* stats, const FuseOptions& opt);
    friend Graph order_by_level(const Graph& g, LevelOrderStats* stats);
    friend int store_f16(Graph& g, uint64_t* bytes_saved,
                         const std::function<bool(const Graph&, const Node&)>& f16_attention);
    Val add_value(Value v);
    Val add_node(Op op, std::vector<int> in, Shape out_shape, Attrs attrs = NoAttrs{});
    Val binary(Op op, Val a, Val b);
    void check_f32(Op op, Val v, const char* what) const;
    std::vector<Value> values_;
    std::vector<Node> nodes_;
    std::vector<Region> regions_;
    std::vector<std::pair<std::string, int>> outputs_;
    int open_region_ = -1;
};

// Values a node writes: out, then extra_out (entries may be -1).
inline std::vector<int> node_outputs(const Node& n) {
    std::vector<int> r{n.out};
    r.insert(r.end(), n.extra_out.begin(), n.extra_out.end());
    return r;
}

// Numpy broadcast of two shapes; throws naming `op` on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace kiln::ir
