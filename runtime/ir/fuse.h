#pragma once
// Fusion: a graph rewrite that cuts dispatches, applied by the Vulkan executor before it plans (the CPU
// reference runs graphs as built: it is the oracle). Every fused op computes each output element by the
// same arithmetic as its parts, so results are bitwise equal:
//  - linear (+bias) then gelu / gelu-tanh / silu, the linear's output read by nothing else -> linear with act;
//  - layer_norm without affine then modulate, the norm read by nothing else -> norm_modulate;
//  - linears of one input x (same weight dtype, K % 4 == 0, same region), e.g. attention's q, k, v -> groups of
//    up to 4 in one linear_multi, at the first one's place (each weight, bias and output stays its own value).
//    Optional (FuseOptions): on lavapipe it showed no gain (see exec::Executor); FuseOptions::multi_member can keep
//    a linear out (one the device runs faster on another kernel);
//  - add(mul(a, b), c), the product read by nothing else -> mul_add (a gated residual: gate * h + x);
//  - add / sub / mul / div then gelu / gelu-tanh / silu, the result read by nothing else -> the binary op with the
//    activation (ir::ActAttrs; DiT's silu(timestep + class embedding) per block); not where a row chunk would be
//    needed;
//  - a slice along the last axis (possibly reshaped, same last dim) read only by add/sub/mul/mul_add, or as
//    modulate's / norm_modulate's shift or scale -> that op reads the slice's source in place (ir::InputView):
//    the chunks of an adaLN embedding are never copied out.
//  - rope of a per-head rms_norm (reshape to [B, S, H, D], rms_norm over D, reshape back), the intermediates read
//    by nothing else -> rms_norm_rope (Flux's qk-norm and rotary embedding); not where a row chunk would be needed.
//  - mul_add(gate, h, res) (either product operand) with h a linear's output read by nothing else -> a gated linear
//    (linear_gated) where the mul_add was: y = res + gate * act(x W^T + b), the product rounded to f32 before the
//    sum as mul_add rounds it. The adaLN-Zero residual of DiT / SD3 / Flux / PixArt / Sana blocks (attention
//    out-proj, MLP fc2). h and res (f32, no view) have the output's shape; gate (f32, possibly a slice read in place)
//    is broadcast over whole rows (gate_row_span); neither is a weight; not where a row chunk would be needed.
//    Never in a linear_multi.
// Value ids are kept (a fused-away intermediate stays in values() with no producer); nodes and regions are
// renumbered.
#include <functional>

#include "runtime/ir/graph.h"

namespace kiln::ir {

struct FuseStats {
    int linear_act = 0;       // activations folded into their linear
    int norm_modulate = 0;    // layer_norm + modulate pairs
    int linear_multi = 0;     // linear_multi nodes made
    int linears_grouped = 0;  // linears they replace
    int mul_add = 0;          // mul + add pairs
    int views = 0;            // slices read in place
    int rms_norm_rope = 0;    // per-head rms_norm + rope pairs
    int linear_gated = 0;     // mul_adds folded into the linear making their h
    int binary_act = 0;       // activations folded into the add / sub / mul / div before them
    int nodes_removed = 0;
};

struct FuseOptions {
    bool linear_multi = true;
    // Where set, a linear joins a linear_multi group only if this says so for it (node n of the graph being fused):
    // the executor keeps linears whose device kernel is not linear_multi's register tiling out of groups.
    std::function<bool(const Graph& g, const Node& n)> multi_member;
    // Slices are read in place only by nodes whose activations (inputs and outputs) are no larger (0: any size).
    uint64_t view_max_bytes = 0;
};

Graph fuse(const Graph& g, FuseStats* stats = nullptr, const FuseOptions& opt = {});

// A gated linear (fuse): a linear with inputs {x, w, b, gate, res}, y = res + gate * act(x W^T + b).
inline bool linear_gated(const Node& n) { return n.op == Op::linear && n.in.size() == 5; }
// Output rows per row of a gate of shape gs broadcast over whole rows of out [.., N]: gs is out's shape (left-padded
// with 1s) with every dim from some axis on, the last excepted, 1 ([B, 1, D] against [B, S, D]: S; [D]: all rows).
// 0 where gs is not such a shape or its last dim is not N.
int64_t gate_row_span(const Shape& gs, const Shape& out);

// f16 activation storage (KILN_ACT_F16=1): every activation written by a linear (fused activation included), a
// concat or slice, an adaLN modulation (modulate, norm_modulate) or attention (where f16_attention says, below) and
// read only by linears as their x, by attention as q, k or v, or by concats or slices stored f16 themselves (not a
// gated linear's y: the mul_add it replaces stores f32), e.g. a transformer MLP's hidden [tokens, 4 D] between
// fc1(+GELU) and fc2, the modulated norm before the q/k/v and fc1 linears, q, k and v themselves, attention's
// output before the out-projection (SD3's and Flux's joint ones through their per-stream slices), or Flux's
// single-block concat of attention and GELU'd MLP hidden before proj_out, is stored as f16: each value is rounded
// once, at the store of the op that computed it in f32 (a concat or slice copies f16 inputs unchanged and rounds
// f32 ones), and the readers convert back and accumulate in f32. Graph outputs and values read by anything else
// stay f32.
// Returns how many values; *bytes_saved: the bytes those values no longer take (an upper bound on the arena's saving).
// Applied after fuse. f16_attention(g, n): whether attention node n may read f16 q, k and v and write f16 (the
// device's kernels for f16 take its shape: exec passes the flash kernel's limits); without it attention is f32 only.
int store_f16(Graph& g, uint64_t* bytes_saved = nullptr,
              const std::function<bool(const Graph&, const Node&)>& f16_attention = {});

}  // namespace kiln::ir
