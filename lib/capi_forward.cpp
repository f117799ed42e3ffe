// kiln_forward (one component on named inputs, as `kiln forward`) and the result handle it returns.
#include <set>

#include "lib/capi_internal.h"
#include "models/core/forward.h"
#include "models/vae/dc_ae_runner.h"
#include "models/vae/vae_runner.h"

namespace kiln::capi {
namespace {

DType dtype_of(int d, const std::string& name) {
    switch (d) {
        case KILN_F32:
            return DType::f32;
        case KILN_F16:
            return DType::f16;
        case KILN_BF16:
            return DType::bf16;
        case KILN_I32:
            return DType::i32;
        case KILN_I64:
            return DType::i64;
        case KILN_U8:
            return DType::u8;
    }
    fail(KILN_INVALID_ARGUMENT, "input '", name, "': dtype ", d, " is not a kiln_dtype");
}

kiln_dtype c_dtype(DType d) {
    switch (d) {
        case DType::f32:
            return KILN_F32;
        case DType::f16:
            return KILN_F16;
        case DType::bf16:
            return KILN_BF16;
        case DType::i32:
            return KILN_I32;
        case DType::i64:
            return KILN_I64;
        case DType::u8:
            return KILN_U8;
        default:  // block-quantized dtypes are storage only: no output has one
            break;
    }
    fail(KILN_INTERNAL, "output dtype ", (int)d, " has no kiln_dtype");
}

// The transformer, else the only model component (a VAE or a text-encoder folder), as `kiln forward` picks.
std::string default_component(const models::ModelSource& src) {
    std::vector<std::string> comps;
    for (auto& c : src.components()) {
        const std::string role = models::component_role(src.class_of(c));
        if (role != "scheduler" && role != "tokenizer") comps.push_back(c);
    }
    return src.has("transformer") || comps.size() != 1 ? "transformer" : comps[0];
}

kiln_tensor view(const kiln_result::Out& o) {
    kiln_tensor t;
    t.name = o.name.c_str();
    t.dtype = c_dtype(o.tensor.dtype);
    t.ndim = (int)o.tensor.shape.size();
    t.shape = o.tensor.shape.data();
    t.data = o.tensor.bytes.data();
    return t;
}

}  // namespace

Tensor read_tensor(const kiln_tensor& t, int i, const char* list) {
    KILN_ARG(t.name && *t.name, list, "[", i, "].name is NULL or empty");
    const std::string name = t.name;
    const DType dt = dtype_of(raw_enum(t.dtype), name);
    KILN_ARG(t.ndim >= 0 && t.ndim <= 8, "input '", name, "': ndim ", t.ndim, " (0..8)");
    KILN_ARG(t.ndim == 0 || t.shape, "input '", name, "': shape is NULL");
    Shape s(t.shape, t.shape + t.ndim);
    int64_t n = 1;
    for (int64_t d : s) {
        KILN_ARG(d >= 0 && d <= (int64_t(1) << 40), "input '", name, "': shape ", shape_str(s), " is invalid");
        n *= d;
        KILN_ARG(n <= (int64_t(1) << 40), "input '", name, "': shape ", shape_str(s), " is too large");
    }
    KILN_ARG(n == 0 || t.data, "input '", name, "': data is NULL");
    Tensor out(dt, s);
    if (n) std::memcpy(out.bytes.data(), t.data, out.nbytes());
    return out;
}
}  // namespace kiln::capi

using namespace kiln;
using namespace kiln::capi;

extern "C" {

KILN_API kiln_status kiln_forward(kiln_model* model, const kiln_forward_params* params, kiln_result** out) {
    return guarded(KILN_INVALID_ARGUMENT, [&] {
        KILN_ARG(out, "out is NULL");
        *out = nullptr;
        KILN_ARG(model, "model is NULL");
        check_alive(*model->device);
        model->src.check_unchanged();  // a model file changed on disk since kiln_model_open: KILN_IO, before any work
        const auto p = read_struct(params, "params");
        const auto& src = model->src;
        const std::string comp = p.component ? p.component : default_component(src);
        if (!src.has(comp)) {
            std::string names;
            for (auto& c : src.components()) names += (names.empty() ? "" : ", ") + c;
            fail(KILN_NOT_FOUND, src.path(), " has no component '", comp, "' (it has: ", names, ")");
        }
        const std::string role = models::component_role(src.class_of(comp));
        if (role == "scheduler" || role == "tokenizer" || role.empty())
            fail(KILN_UNSUPPORTED, "component '", comp, "' (", src.class_of(comp), ") has no forward");
        KILN_ARG(p.input_count >= 0 && (p.input_count == 0 || p.inputs), "inputs/input_count (", p.input_count,
                 ") do not describe an array");
        const exec::Mode mode = jit_mode(raw_enum(p.jit_mode));
        std::map<std::string, Tensor> in;
        for (int i = 0; i < p.input_count; ++i) {
            Tensor t = read_tensor(p.inputs[i], i);
            KILN_ARG(in.emplace(p.inputs[i].name, std::move(t)).second, "input '", p.inputs[i].name,
                     "' is given twice");
        }
        KILN_ARG(p.vae_tile_size >= 0 && (p.vae_tile_size == 0 || p.vae_tiled), "vae_tile_size is ", p.vae_tile_size,
                 " (it needs vae_tiled)");
        const bool vae_options = p.vae_tiled || p.vae_sliced;
        if (vae_options) {
            const models::ComponentClass* c = models::find_component_class(src.class_of(comp));
            KILN_ARG(c && c->role == models::Role::vae, "vae_tiled and vae_sliced are for the VAE (",
                     models::class_list({models::Role::vae}), "), not ", src.class_of(comp));
            KILN_ARG(in.count("latents") || in.count("image"), "the VAE takes `latents` (decode) or `image` (encode)");
        }
        auto res = std::make_unique<kiln_result>();
        std::lock_guard<std::mutex> lock(model->device->mutex);
        vk::Context* ctx = p.cpu_reference ? nullptr : model->device->vk.get();
        std::map<std::string, Tensor> outs;
        if (vae_options && models::find_component_class(src.class_of(comp))->kind == models::ComponentKind::dc_ae) {
            models::DcAeRunner vae(ctx, src, comp, {p.vae_tiled != 0, p.vae_sliced != 0, p.vae_tile_size, mode});
            if (in.count("latents")) outs["decoded"] = vae.decode(in.at("latents"));
            if (in.count("image")) outs["latent"] = vae.encode(in.at("image"));
        } else if (vae_options) {
            models::VaeRunner vae(ctx, src, comp, {p.vae_tiled != 0, p.vae_sliced != 0, p.vae_tile_size, mode});
            if (in.count("latents")) outs["decoded"] = vae.decode(in.at("latents"));
            if (in.count("image"))
                for (auto& [name, t] : vae.encode(in.at("image"))) outs[name] = t;
        } else {
            outs = models::forward_component(ctx, src, comp, in, mode);
        }
        for (auto& [name, t] : outs) res->outputs.push_back({name, std::move(t)});
        *out = res.release();
    });
}

KILN_API int kiln_result_count(const kiln_result* result) { return result ? (int)result->outputs.size() : 0; }

KILN_API kiln_status kiln_result_get(const kiln_result* result, int i, kiln_tensor* tensor) {
    return guarded(KILN_INTERNAL, [&] {
        KILN_ARG(result, "result is NULL");
        KILN_ARG(tensor, "tensor is NULL");
        if (i < 0 || i >= (int)result->outputs.size())
            fail(KILN_NOT_FOUND, "output index ", i, " out of range (", result->outputs.size(), " outputs)");
        *tensor = view(result->outputs[(size_t)i]);
    });
}

KILN_API kiln_status kiln_result_find(const kiln_result* result, const char* name, kiln_tensor* tensor) {
    return guarded(KILN_INTERNAL, [&] {
        KILN_ARG(result, "result is NULL");
        KILN_ARG(name, "name is NULL");
        KILN_ARG(tensor, "tensor is NULL");
        for (auto& o : result->outputs)
            if (o.name == name) {
                *tensor = view(o);
                return;
            }
        std::string names;
        for (auto& o : result->outputs) names += (names.empty() ? "" : ", ") + o.name;
        fail(KILN_NOT_FOUND, "no output '", name, "' (outputs: ", names, ")");
    });
}

KILN_API void kiln_result_destroy(kiln_result* result) { delete result; }

}  // extern "C"
