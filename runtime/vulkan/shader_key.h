#pragma once
// A shader variant as a key, not a string edit: the op's shader family, the kernel (tile / load path), the weight
// dtype it was compiled for, the linear epilogue (plain or gated) and how it selects block weights. name() forms the
// kShaderTable name (shaders/CMakeLists.txt): op[_kernel][_variant][_gated][_off|_ptr], e.g. {linear, tex, f16, off}
// -> "linear_tex_f16_off".
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/dtype.h"

namespace kiln::vk {

// How a dispatch inside a replayed block finds that instance's weights (block_weights.cpp): none (bound ranges),
// off (an offset per weight, from a uniform slot: -DKILN_OFF) or ptr (device addresses from a slot: -DKILN_PTR).
enum class Selection { none, off, ptr };

struct ShaderKey {
    std::string op;       // the shader family: "linear", "attention", "add", "loop_prepare"
    std::string kernel;   // "" (the plain shader) or one of shader_kernels(): "vec4", "tex", "vec4_tex", "smem", ...
    std::string variant;  // the build variant: a weight dtype ("f16", "q4_k"), or "f64" / "i64" (loop_*); "" none
    bool gated = false;   // a linear with the gated residual of ir::fuse (-DLINEAR_GATED, shaders/linear_gate.glsl)
    Selection selection = Selection::none;

    ShaderKey() = default;
    explicit ShaderKey(std::string op_, std::string kernel_ = "", std::string variant_ = "")
        : op(std::move(op_)), kernel(std::move(kernel_)), variant(std::move(variant_)) {}
    // The shader compiled for weights of dtype dt (checked: the dtypes a "// variants:" line may name).
    static ShaderKey weights(std::string op, std::string kernel, DType dt);

    std::string name() const;
    bool operator==(const ShaderKey& o) const = default;
};

// The kernels and build variants a name may end with, longest first within each list.
const std::vector<std::string>& shader_kernels();
const std::vector<std::string>& shader_variants();
// The key a kShaderTable name stands for (the inverse of name()); nullopt where an op part would be empty.
std::optional<ShaderKey> parse_shader_name(const std::string& name);

// The texel-buffer form of a storage-buffer shader (and back): linear vec4 <-> tex (x, W as 4-vectors), conv2d
// plain <-> tex (x, W as scalars), attention plain <-> tex and vec4 <-> vec4_tex (q, k, v as scalars / 4-vectors).
struct TexelForm {
    std::string op, storage_kernel, texel_kernel;
    unsigned inputs;  // its first `inputs` bindings are uniform texel buffers
    bool rgba;        // viewed as 4-vectors, else scalars
};
const std::vector<TexelForm>& texel_forms();
// The form whose texel kernel k has (nullopt: k reads no texel buffers); and k with its texel kernel, where it has one.
std::optional<TexelForm> texel_form_of(const ShaderKey& k);
std::optional<ShaderKey> texel_variant(const ShaderKey& k);

}  // namespace kiln::vk
