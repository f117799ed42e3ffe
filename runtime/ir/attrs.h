#pragma once
// Typed attributes of the ops that have any. Node::attrs holds exactly one of these.
#include <array>
#include <cstdint>
#include <variant>

namespace kiln::ir {

struct NoAttrs {
    bool operator==(const NoAttrs&) const = default;
};
struct ScaleAttrs {
    float alpha = 1.f, beta = 0.f;
    bool operator==(const ScaleAttrs&) const = default;
};
struct GeluAttrs {
    bool tanh = false;  // "gelu-approximate" / gelu(approximate="tanh")
    bool operator==(const GeluAttrs&) const = default;
};
// The activation a fused linear applies to each output (ir::fuse): linear(+bias) then gelu / gelu-tanh / silu.
enum class Act : uint8_t { none, gelu, gelu_tanh, silu };
struct LinearAttrs {
    Act act = Act::none;
    bool operator==(const LinearAttrs&) const = default;
};
// The activation a fused elementwise binary op (add, sub, mul, div) applies to its result (ir::fuse: the op, then
// gelu / gelu-tanh / silu).
struct ActAttrs {
    Act act = Act::none;
    bool operator==(const ActAttrs&) const = default;
};
// linear_multi: up to kMultiLinear linears on one x, each with its activation.
inline constexpr int kMultiLinear = 4;
struct LinearMultiAttrs {
    std::array<Act, kMultiLinear> act{};
    bool operator==(const LinearMultiAttrs&) const = default;
};
struct NormAttrs {
    float eps = 1e-5f;
    int groups = 1;  // group_norm only
    bool operator==(const NormAttrs&) const = default;
};
// Attention's options (Graph::attention). scores s = q.k * scale (0 -> 1/sqrt(head_dim)); softcap > 0: s = softcap *
// tanh(s / softcap) (Gemma-2's attn_logit_softcapping), then + mask; causal: query i of Sq sees key j of Sk iff
// j <= i + Sk - Sq (bottom-right aligned, as flash-attn and a KV cache; Sq == Sk: j <= i), and a query row that sees
// no key gives 0. kv_heads (0 -> heads) divides heads: query head h reads key/value head h / (heads / kv_heads)
// (grouped-query attention, transformers' repeat_kv).
struct AttentionAttrs {
    int heads = 1;
    float scale = 0.f;  // 0 -> 1/sqrt(head_dim)
    int kv_heads = 0;   // 0 -> heads
    bool causal = false;
    float softcap = 0.f;  // 0: none
    bool operator==(const AttentionAttrs&) const = default;
};
struct TimestepAttrs {
    int dim = 256;
    bool flip_sin_to_cos = true;
    float downscale_freq_shift = 0.f;
    float scale = 1.f;
    float max_period = 10000.f;
    bool operator==(const TimestepAttrs&) const = default;
};
struct Conv2dAttrs {
    int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
    int groups = 1;  // torch's groups: C and O split into `groups` blocks, weight [O, C / groups, kh, kw]
    bool operator==(const Conv2dAttrs&) const = default;
};
struct PermuteAttrs {
    std::array<int, 6> perm{};  // out dim i = in dim perm[i]
    bool operator==(const PermuteAttrs&) const = default;
};
struct AxisAttrs {
    int axis = 0;
    int64_t start = 0, length = 0;  // slice only
    bool operator==(const AxisAttrs&) const = default;
};

using Attrs = std::variant<NoAttrs, ScaleAttrs, GeluAttrs, NormAttrs, AttentionAttrs, TimestepAttrs, Conv2dAttrs,
                           PermuteAttrs, AxisAttrs, LinearAttrs, LinearMultiAttrs, ActAttrs>;

}  // namespace kiln::ir
