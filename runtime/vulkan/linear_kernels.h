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
//   coopmat  linear_coopmat.comp: VK_KHR_cooperative_matrix at the device's f16 shape, 2 x 2 subgroups of 2 x 2
//            fragments (64 x 64 at 16 x 16 x 16); f16, bf16 and ggml-block weights (dequantized into its f16 shared
//            tile).
//   coopmat128  the same kernel with 4 x 2 subgroups of 2 x 4 fragments (128 x 128 at 16 x 16 x 16), its K slice and
//            buffering chosen by the shared memory they take (gemm_config).
//   tex      reg's tiles with x and W read through uniform texel buffers (bitwise equal to reg).
//   gemm     linear_gemm.comp: coopmat's kernel (linear_gemm.glsl) with scalar inner products, on any device: the
//            GPU path's tiling, loads, scaling and epilogue where lavapipe 22.3 runs them.
//   gemm128  the same with coopmat128's tile.
//   coopmat_sk, gemm_sk  coopmat's and gemm's kernels split along K (linear_splitk.glsl): where the node's 64 x 64
//            tiles are fewer than the device's compute units can keep busy, S workgroups per tile each sum a
//            contiguous range of whole K slices into an f32 scratch [S, M, N], and a reduce dispatch adds the S
//            partials in a fixed order and applies the epilogue (splitk_factor); where S would be 1, the unsplit
//            kernel's one dispatch.
//   gemv     linear_gemv.comp: few rows (M = batch: adaLN, timestep and modulation linears), a workgroup per 4 output
//            columns and up to 8 rows, its lanes splitting K; every weight dtype.
//   coopmat2  linear_cm2.comp: VK_NV_cooperative_matrix2, one workgroup-scope accumulator per block tile of the
//            device's flexible dimensions, x and W loaded by clamped tensor loads; f16 W and x stored f16 only (exact
//            products, f32 sums: no split), K % 8 == 0.
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

// One workgroup-scope f16 x f16 + f32 -> f32 entry of
// vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV: M, N, K granularities and the workgroup size it
// needs.
struct Cm2Flex {
    uint32_t mg = 0, ng = 0, kg = 0, invocations = 0;
};
// linear_cm2.comp's block tile: bm x bn, K slices of bk, `invocations` per workgroup.
struct Cm2Tile {
    uint32_t bm = 0, bn = 0, bk = 0, invocations = 0;
};
// The tile linear_cm2.comp runs among those listed: the entry with the most invocations up to 256 (and up to
// max_workgroup where that is not 0), 128 x 128 x 32 rounded up to its granularities, each at most max_dim;
// nullopt where none fits.
std::optional<Cm2Tile> choose_cm2_tile(const std::vector<Cm2Flex>& listed, uint32_t max_dim, uint32_t max_workgroup);

// What a kernel declares it runs.
struct LinearCaps {
    bool f32_w = true, f16_w = true, bf16_w = true, quant_w = true;  // weight dtypes
    int k_multiple = 1;                                              // K % k_multiple == 0
    bool f16_x = true, f16_y = true;                                 // f16 activation storage (ir::store_f16)
    bool f32_x = true;                                               // x stored f32 (coopmat2: f16 only)
    bool act = true;                                                 // fused activations (ir::Act)
    // coopmat: VK_KHR_cooperative_matrix and its tile's shared memory; gemm_tile: the shared memory of
    // linear_gemm.glsl's tile at its smallest shape.
    // coopmat2: VK_NV_cooperative_matrix2 as DeviceInfo::cm2_bm describes it.
    enum class Needs { nothing, texel_formats, coopmat, gemm_tile, coopmat2 } needs = Needs::nothing;
    // The tiled GEMM (coopmat, gemm: Needs::coopmat / gemm_tile): its block tile, subgroups and fragments
    // (linear_gemm.glsl). x is split into two f16 parts there (linear_splits).
    uint32_t wm = 0, wn = 0, fm = 0, fn = 0;
    bool split = false;  // split-K (coopmat_sk, gemm_sk): splitk_factor
    // Timed by the kernel table on a CPU device (lavapipe). false: GPU-shaped kernels (the scalar GEMM twins, gemv)
    // whose timing there costs minutes of compilation for a pick a CPU never makes, and whose other summation order
    // would change lavapipe's bits; tests force them.
    bool cpu_table = true;
};

struct LinearKernel {
    std::string name;
    LinearCaps caps;
    // The dispatch of linear node n on device d (the bindings and push constants of lower_linear, so the
    // "_ptr"/"_off" block-weight suffixes apply unchanged). Throws where it cannot run n.
    Dispatch (*lower)(const DeviceInfo& d, const ir::Graph& g, const ir::Node& n);
};

// reg first (the reference of the probes and the fallback), then smem64, smem128, coopmat, coopmat128, tex, gemm,
// gemm128, coopmat_sk, gemm_sk, gemv, coopmat2.
const std::vector<LinearKernel>& linear_kernels();
// nullptr for an unknown name.
const LinearKernel* find_linear_kernel(const std::string& name);

// How many f16 splits kernel k's products carry beyond f32 accumulation, for its error bound: 0 (every kernel but
// the tiled GEMM), 1 (the GEMM: x split hi + lo, 2^-22 relative per product; W f16 or bf16 exact), 3 (the GEMM with
// ggml-block W, split too, one of four products left out: <= 3 2^-22). Bounds add splits 2 K / 4 2^-22 (|x|, |W| <= 1).
int linear_splits(const LinearKernel& k, DType dt);

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
// linear_gemv.comp for node n: spec {R, C, ACT, -, XF16, YF16, NT}, R = min(M, 8) rows and C = 4 columns per
// workgroup of NT = 128 invocations; groups (N / C, M / R, 1), rounded up.
Dispatch lower_linear_gemv(const ir::Graph& g, const ir::Node& n);
// One configuration of the tiled GEMM (linear_gemm.glsl's specialization constants): the matrix shape, a wm x wn grid
// of subgroups of fm x fn fragments each (a (wm fm M) x (wn fn N) block tile), K slices of bk (16 or 32) values in
// nbuf (1 or 2) shared buffers, `invocations` per workgroup; coopmat: the cooperative form (else the scalar one).
struct GemmConfig {
    CoopmatShape shape;
    uint32_t wm = 2, wn = 2, fm = 2, fn = 2, bk = 32, nbuf = 2, invocations = 0;
    bool coopmat = true;
    uint32_t bm() const { return wm * fm * shape.m; }
    uint32_t bn() const { return wn * fn * shape.n; }
};
// Shared memory of configuration c for weights of dtype dt (bytes): x hi and lo and W (and W lo for ggml blocks)
// slices, nbuf each, f16 rows of bk + 8; the cooperative form's f32 accumulator stage, one per subgroup (the scalar
// form stores from its registers); the slices' maxima.
uint32_t gemm_shared_bytes(const GemmConfig& c, DType dt);
// The configuration kernel k (a tiled GEMM: coopmat, coopmat128, gemm, gemm128) runs for weights of dtype dt on d:
// the first shape (coopmat: the device's; scalar: 16 x 16 x 16, then 8 x 8 x 8: the tile first) and within it the
// first (bk, nbuf) of (32, 2), (16, 2), (32, 1), (16, 1) (largest first) whose shared memory fits
// d.max_shared_memory and whose staging divides evenly among its invocations (coopmat: subgroups of d's size; scalar:
// of M N / 8). nullopt where none does.
std::optional<GemmConfig> gemm_config(const LinearKernel& k, const DeviceInfo& d, DType dt);
// The tiled GEMM kernel k (Needs::coopmat: linear_coopmat.comp; gemm_tile: linear_gemm.comp; split: their "_sk"
// forms) for node n on d, at gemm_config's configuration: spec {M, N, ACT, K, XF16, YF16, invocations, wm, wn, fm,
// fn, bk, nbuf}; split in S > 1: + {FAST 0, PHASE 0}, groups (column tiles, row tiles, S), Dispatch::scratch and the
// reduce (PHASE 1, the same groups).
Dispatch lower_linear_gemm(const LinearKernel& k, const DeviceInfo& d, const ir::Graph& g, const ir::Node& n);
// linear_cm2.comp for node n on d (kernel "coopmat2"): spec {BM, BN, ACT, BK, XF16, YF16, invocations} from d's
// cm2_* tile; groups (column tiles, row tiles, 1).
Dispatch lower_linear_cm2(const DeviceInfo& d, const ir::Graph& g, const ir::Node& n);

// Split-K: the workgroups the device should be given (kSplitWaves per compute unit, kDefaultComputeUnits where it
// reports none), and the number S of workgroups per output tile for an M x N x K linear at configuration c: enough
// that tiles x S reaches that target, at most T / kSplitMinSlices (each split sums at least that many of the T =
// ceil(K / bk) K slices) and S M N f32 within one binding; then S = ceil(T / ceil(T / S)), so no split is empty. 1:
// not split.
constexpr uint32_t kSplitWaves = 4, kDefaultComputeUnits = 128, kSplitMinSlices = 4;
uint32_t splitk_factor(const GemmConfig& c, const DeviceInfo& d, uint32_t M, uint32_t N, uint32_t K);

}  // namespace kiln::vk
