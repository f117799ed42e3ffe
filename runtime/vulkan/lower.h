#pragma once
// Lowering of one IR node to one compute dispatch: which shader, its push constants and the
// workgroup count. Binding convention for every shader: bindings 0..k-1 are node.in in order
// (an absent optional input is bound to a small dummy buffer), binding k is the output.
// Shapes travel in push constants, so one pipeline serves every resolution.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/ir/graph.h"
#include "runtime/ir/params.h"
#include "runtime/vulkan/shader_key.h"

namespace kiln::vk {

struct Dispatch {
    ShaderKey shader;  // {add}, {linear, vec4, f16}, ...
    std::vector<uint8_t> push;
    uint32_t groups[3] = {1, 1, 1};
    std::vector<uint32_t> spec;  // specialization constants, ids 0..n-1
    // Split-K (the linear kernels coopmat_sk, gemm_sk; shaders/linear_splitk.glsl): `scratch` bytes of f32 partial
    // sums the shader binds after its outputs (the executor plans them with the activations), and a second dispatch
    // of the same shader, bindings and push constants, run after this one with `then_spec` and `then_groups` (the
    // reduce). 0: one dispatch, no scratch.
    uint64_t scratch = 0;
    std::vector<uint32_t> then_spec;
    uint32_t then_groups[3] = {1, 1, 1};
    // A tiled linear's grouped workgroup order: row tiles per band (its push constant tile_group, which the traffic
    // model reads from here; linear_tile_group). 1 for every other dispatch.
    uint32_t tile_group = 1;

    template <class P>
    void set_push(const P& p) {
        push.resize(sizeof(P));
        std::memcpy(push.data(), &p, sizeof(P));
    }
};

// Group counts for a 1-D dispatch of n invocations with local size `local` (spread over y past 65535).
void groups_1d(Dispatch& d, uint64_t n, uint32_t local = 256);
// modulate / norm_modulate: where row b of shift (input 1) and scale (input 2) starts, element off + b stride:
// off 0, stride C, or the slice's start and its source's width where one is read as a slice (ir::InputView).
void modulate_rows(const ir::Node& n, int64_t C, uint32_t& sh_off, uint32_t& sh_stride, uint32_t& sc_off,
                   uint32_t& sc_stride);

// The grouped workgroup order of the tiled linears (tile_xy, shaders/common.glsl; docs/jit.md, "Workgroup order"): a
// band of row tiles walks the column tiles with its x row panels held in the cache, so it takes as many row tiles as
// their panels fit kTileGroupBytes (a share of a GPU's last-level cache: 8 MiB, a sixth of an H100's 50 MB L2, a
// ninth of an RTX 4090's 72 MB), at most kTileGroupMax (cuBLAS's and Triton's usual 8), at least 1: x [M, K] of
// x_bytes in row_tiles panels.
constexpr double kTileGroupBytes = 8.0 * 1024 * 1024;
constexpr uint32_t kTileGroupMax = 8;
uint32_t linear_tile_group(double x_bytes, uint32_t row_tiles);
// Sets a linear dispatch's tile_group (Dispatch and LinearParams' push constant) from its groups[1] row tiles: every
// linear kernel's lowering ends with it.
void set_linear_tile_group(Dispatch& d, const ir::Graph& g, const ir::Node& n);

// One lowering per op (views excluded: reshape has no dispatch).
#define KILN_X(name, kind) Dispatch lower_##name(const ir::Graph& g, const ir::Node& n);
KILN_OPS(KILN_X)
#undef KILN_X

Dispatch lower(const ir::Graph& g, const ir::Node& n);

}  // namespace kiln::vk
