#include "runtime/vulkan/shader_key.h"

#include "runtime/core/error.h"

namespace kiln::vk {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
// Removes "_" + one of `options` from the end of s, returning it ("" when none ends s).
std::string strip_suffix(std::string& s, const std::vector<std::string>& options) {
    for (const std::string& o : options)
        if (ends_with(s, "_" + o)) {
            s.resize(s.size() - o.size() - 1);
            return o;
        }
    return "";
}
}  // namespace

ShaderKey ShaderKey::weights(std::string op, std::string kernel, DType dt) {
    KILN_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16 || dtype_is_quant(dt),
               "weights must be f32, f16, bf16 or quantized, got ", dtype_name(dt));
    return ShaderKey(std::move(op), std::move(kernel), dtype_name(dt));
}

std::string ShaderKey::name() const {
    std::string s = op;
    if (!kernel.empty()) s += "_" + kernel;
    if (!variant.empty()) s += "_" + variant;
    if (gated) s += "_gated";
    if (selection == Selection::off) s += "_off";
    if (selection == Selection::ptr) s += "_ptr";
    return s;
}

const std::vector<std::string>& shader_kernels() {
    static const std::vector<std::string> k = {"vec4_tex", "coopmat4", "coopmat", "multi",
                                               "flash",    "smem",     "vec4",    "tex"};
    return k;
}

const std::vector<std::string>& shader_variants() {
    static const std::vector<std::string> v = {"bf16", "f32",  "f16",  "f64",  "i64",  "q8_0", "q4_0", "q4_1",
                                               "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
    return v;
}

std::optional<ShaderKey> parse_shader_name(const std::string& name) {
    ShaderKey k;
    std::string rest = name;
    const std::string sel = strip_suffix(rest, {"off", "ptr"});
    k.selection = sel == "off" ? Selection::off : sel == "ptr" ? Selection::ptr : Selection::none;
    k.gated = !strip_suffix(rest, {"gated"}).empty();
    k.variant = strip_suffix(rest, shader_variants());
    k.kernel = strip_suffix(rest, shader_kernels());
    k.op = rest;
    if (k.op.empty()) return std::nullopt;
    return k;
}

const std::vector<TexelForm>& texel_forms() {
    static const std::vector<TexelForm> f = {{"linear", "vec4", "tex", 2, true},
                                             {"conv2d", "", "tex", 2, false},
                                             {"attention", "", "tex", 3, false},
                                             {"attention", "vec4", "vec4_tex", 3, true}};
    return f;
}

std::optional<TexelForm> texel_form_of(const ShaderKey& k) {
    for (const TexelForm& f : texel_forms())
        if (f.op == k.op && f.texel_kernel == k.kernel) return f;
    return std::nullopt;
}

std::optional<ShaderKey> texel_variant(const ShaderKey& k) {
    for (const TexelForm& f : texel_forms())
        if (f.op == k.op && f.storage_kernel == k.kernel) {
            ShaderKey t = k;
            t.kernel = f.texel_kernel;
            return t;
        }
    return std::nullopt;
}

}  // namespace kiln::vk
