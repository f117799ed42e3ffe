#pragma once
// Lowering of attention to the flash kernel (shaders/attention_flash.comp): Q tiles against K/V tiles staged
// through shared memory with an online softmax. lower_attention (the "rows" kernel: each invocation owns query
// rows and reads every K/V row itself) stays the default of vk::lower, except for q/k/v stored f16 (flash with 16
// KiB of shared memory); which one a node gets is decided after lowering, where the device is known
// (runtime/exec/attention_select.h).
#include <cstdint>
#include <string>

#include "runtime/vulkan/context.h"
#include "runtime/vulkan/lower.h"

namespace kiln::vk {

// Tile of one flash workgroup (64 invocations): br query rows against bc keys per K/V tile.
struct FlashTile {
    uint32_t br = 16, bc = 32;
};

// The largest tile whose shared memory (q tile, one K/V tile, the scores) fits max_shared bytes for head_dim d;
// br = 0 when none does.
FlashTile flash_tile(int64_t d, uint32_t max_shared);

// "" when node n (attention) can take the flash kernel on a device with max_shared bytes of shared memory per
// workgroup, else why not (head_dim over 512, or no tile fits).
std::string attention_flash_unsupported(const ir::Graph& g, const ir::Node& n, uint32_t max_shared);

// The dispatch of attention node n on the flash kernel (the same bindings and push constants as lower_attention).
// Throws where unsupported.
Dispatch lower_attention_flash(const ir::Graph& g, const ir::Node& n, uint32_t max_shared);

// The cooperative-matrix variant (shaders/attention_coopmat.comp: the flash kernel with S = Q K^T and O += P V on
// the device's f16 x f16 + f32 matrices, DeviceInfo::coopmat_m/n/k). Its tile: the largest of 16 x 32, 16 x 16,
// 8 x 16, 8 x 8 whose rows and keys are whole fragments and whose shared memory fits max_shared; br = 0 when none.
FlashTile flash_coopmat_tile(int64_t d, const DeviceInfo& dev, uint32_t max_shared);

// "" when dev can run the cooperative-matrix variant at all, else why not: no cooperative matrices, not in this build,
// or a subgroup size that does not divide 64.
std::string attention_coopmat_unavailable(const DeviceInfo& dev);

// "" when node n can take the cooperative-matrix variant on dev (with max_shared bytes of shared memory), else why
// not: attention_coopmat_unavailable's reasons, head_dim over 256, or no tile fits.
std::string attention_coopmat_unsupported(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n,
                                          uint32_t max_shared);

// The dispatch of attention node n on the cooperative-matrix variant. Throws where unsupported.
// fast (KILN_PRECISION=fast): q, k, v and P each rounded to one f16 (F16 bit 8), a third of the matrix operations.
Dispatch lower_attention_coopmat(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n, uint32_t max_shared,
                                 bool fast = false);

// The variant with the query rows split over subgroups (shaders/attention_coopmat4.comp): nsg subgroups of rs query
// rows each (br = nsg * rs rows per workgroup, one K/V staging for all of them) against bc keys per tile.
struct Coopmat4Tile {
    uint32_t nsg = 0, rs = 0, bc = 0;
    uint32_t br() const { return nsg * rs; }
};

// Its tile: the first of nsg 4, 2, 1 (at most 128 invocations), rs 16 then one fragment, bc 32, 16, 8 whose rows and
// keys are whole fragments and whose shared memory fits max_shared; nsg = 0 when none does. lanes: the softmax's
// lanes per row (0: max(1, subgroup / rs); another, KILN_TEST_ATTENTION_LANES, must divide the subgroup and bc, and
// rs lanes must be a multiple of the subgroup).
Coopmat4Tile flash_coopmat4_tile(int64_t d, const DeviceInfo& dev, uint32_t max_shared, uint32_t lanes = 0);

// "" when dev can run it at all, else why not: no cooperative matrices, not in this build, or a subgroup size that
// is not a power of two up to 128.
std::string attention_coopmat4_unavailable(const DeviceInfo& dev);

// "" when node n can take it on dev with max_shared bytes of shared memory, else why not (also head_dim over 256, or
// no tile fits).
std::string attention_coopmat4_unsupported(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n,
                                           uint32_t max_shared, uint32_t lanes = 0);

// Its dispatch (the same bindings, push constants and precision scheme as lower_attention_coopmat). Throws where
// unsupported.
Dispatch lower_attention_coopmat4(const DeviceInfo& dev, const ir::Graph& g, const ir::Node& n, uint32_t max_shared,
                                  bool fast = false, uint32_t lanes = 0);

}  // namespace kiln::vk
