#pragma once
// The linear kernels, each declared once: its name, what it runs (weights, K, activation storage, epilogue, device
// features) and its lowering. Which one a node gets is decided after lowering, where the device is known
// (runtime/exec/linear_select.h): the selector ranks only kernels whose declaration admits the node on the device,
// and each lowering checks the same conditions itself and throws where they fail. tests/ops/test_linear_caps.cpp
// holds the two to agreement for every node kind, dtype and epilogue on every device profile Kiln knows, and runs
// every admitted kernel against the CPU on the present device.
//   reg      linear.glsl: register tiles, no shared memory. Runs every linear; the fallback.
//   smem64   linear_smem.comp: 64 x 64 shared-memory tiles, double-buffered (GPUs).
//   smem128  the same with 128 x 64 tiles.
//   coopmat  linear_coopmat.comp: VK_KHR_cooperative_matrix at the device's f16 shape, the same tiling; f16, bf16 and
//            ggml-block weights (dequantized into its f16 shared tile).
//   tex      reg's tiles with x and W read through uniform texel buffers (bitwise equal to reg).
//   gemm     linear_gemm.comp: coopmat's kernel (linear_gemm.glsl) with scalar inner products, on any device: the
//            GPU path's tiling, loads, scaling and epilogue where lavapipe 22.3 runs them.
// Every kernel applies the same epilogue (bias, ir::Act activation, the gated residual of a gated linear: its
// "_gated" shaders, linear_gate.glsl; f16 or f32 y; linear_io.glsl / linear.glsl).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/vulkan/context.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {

// A cooperative-matrix shape M x N x K (f16 A, B; f32 C).
struct CoopmatShape {
    uint32_t m = 0, n = 0, k = 0;
};
// The shape linear_coopmat.comp runs among those a device lists (f16 x f16 + f32 -> f32, subgroup scope) with
// subgroups of `subgroup` lanes: 16 x 16 x 16 where listed, else the largest with M, N in {8, 16}, 32 % K == 0 and
// 8 M, 8 N multiples of the subgroup size (its staging map); nullopt where none fits.
std::optional<CoopmatShape> choose_coopmat_shape(const std::vector<CoopmatShape>& listed, uint32_t subgroup);

// What a kernel declares it runs.
struct LinearCaps {
    bool f32_w = true, f16_w = true, bf16_w = true, quant_w = true;  // weight dtypes
    int k_multiple = 1;                                              // K % k_multiple == 0
    bool f16_x = true, f16_y = true;                                 // f16 activation storage (ir::store_f16)
    bool act = true;                                                 // fused activations (ir::Act)
    // coopmat: VK_KHR_cooperative_matrix and its tile's shared memory; gemm_tile: the shared memory of
    // linear_gemm.glsl's tile at its smallest shape.
    enum class Needs { nothing, texel_formats, coopmat, gemm_tile } needs = Needs::nothing;
};

struct LinearKernel {
    std::string name;
    LinearCaps caps;
    // The dispatch of linear node n on device d (the bindings and push constants of lower_linear, so the
    // "_ptr"/"_off" block-weight suffixes apply unchanged). Throws where it cannot run n.
    Dispatch (*lower)(const DeviceInfo& d, const ir::Graph& g, const ir::Node& n);
};

// reg first (the reference of the probes and the fallback), then smem64, smem128, coopmat, tex, gemm.
const std::vector<LinearKernel>& linear_kernels();
// nullptr for an unknown name.
const LinearKernel* find_linear_kernel(const std::string& name);

// "" when k's declaration admits weights of dtype dt on device d (dtype and device features), else why not.
std::string linear_kernel_unavailable(const LinearKernel& k, const DeviceInfo& d, DType dt);
// "" when k's declaration admits linear node n on device d, else why not (one line).
std::string linear_kernel_unsupported(const LinearKernel& k, const DeviceInfo& d, const ir::Graph& g,
                                      const ir::Node& n);

// The shared-memory tiled kernels' output tile: (16 tm) x (16 tn), tm, tn in {4, 8}.
struct SmemTile {
    uint32_t tm = 4, tn = 4;
};
Dispatch lower_linear_smem(const ir::Graph& g, const ir::Node& n, SmemTile t);
// linear_coopmat.comp's workgroup output tile on d: (4 M) x (4 N) of its shape.
Dispatch lower_linear_coopmat(const DeviceInfo& d, const ir::Graph& g, const ir::Node& n);
// The shape linear_gemm.comp runs on d for weights of dtype dt: 16 x 16 x 16 where its shared memory fits, else
// 8 x 8 x 8; nullopt where neither does.
std::optional<CoopmatShape> gemm_scalar_shape(const DeviceInfo& d, DType dt);
Dispatch lower_linear_gemm(const DeviceInfo& d, const ir::Graph& g, const ir::Node& n);

}  // namespace kiln::vk
