// What the subcommands share: the C API handles and conversions.
#include <cstring>
#include <filesystem>

#include "apps/kiln/commands.h"
#include "models/layouts/layouts.h"
#include "runtime/core/error.h"

namespace kiln::app {

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
        default:
            KILN_FAIL("a ", dtype_name(d), " tensor cannot be a forward input");
    }
}
Tensor tensor_of(const kiln_tensor& t) {
    DType dt = DType::f32;
    switch (t.dtype) {
        case KILN_F32:
            dt = DType::f32;
            break;
        case KILN_F16:
            dt = DType::f16;
            break;
        case KILN_BF16:
            dt = DType::bf16;
            break;
        case KILN_I32:
            dt = DType::i32;
            break;
        case KILN_I64:
            dt = DType::i64;
            break;
        case KILN_U8:
            dt = DType::u8;
            break;
        default:
            KILN_FAIL("tensor '", t.name, "' has kiln_dtype ", (int)t.dtype);
    }
    Tensor out(dt, Shape(t.shape, t.shape + t.ndim));
    std::memcpy(out.bytes.data(), t.data, out.nbytes());
    return out;
}

void capi_check(kiln_status s) {
    if (s != KILN_OK) KILN_FAIL(kiln_last_error());
}

ContextPtr open_context(int device, uint64_t vram_budget) {
    kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
    o.device = device;
    o.vram_budget_bytes = vram_budget;
    if (device_flags().f16_activations) o.f16_activations = 1;
    const std::string& q = device_flags().transfer_queue;
    if (!q.empty()) o.transfer_queue = q == "0" ? -1 : q == "1" ? 1 : 2;
    if (!device_flags().precision.empty()) o.fast_precision = device_flags().precision == "fast" ? 1 : -1;
    kiln_context* c = nullptr;
    capi_check(kiln_context_create(&o, &c));
    return ContextPtr(c);
}

ModelPtr open_model(kiln_context* ctx, const std::string& path) {
    kiln_model* m = nullptr;
    capi_check(kiln_model_open(ctx, path.c_str(), &m));
    return ModelPtr(m);
}

namespace {
// --model FILE that is neither a Kiln file nor a folder: a single file in another layout.
bool is_layout_file(const std::string& path) {
    std::error_code ec;
    return !path.empty() && std::filesystem::is_regular_file(path, ec) && !layouts::is_kiln_file(path);
}
}  // namespace

bool ModelSpec::assembled() const { return parts.any() || is_layout_file(model); }

std::string ModelSpec::display() const {
    if (!assembled()) return model;
    std::string s;
    for (const std::string* f :
         {&model, &parts.diffusion_model, &parts.vae, &parts.clip_l, &parts.clip_g, &parts.t5xxl, &parts.llm})
        if (!f->empty()) s += (s.empty() ? "" : " + ") + std::filesystem::path(*f).filename().string();
    return s;
}

converter::ComponentFiles component_files(const ModelSpec& spec) {
    converter::ComponentFiles f = spec.parts;
    f.model = is_layout_file(spec.model) ? spec.model : "";
    f.hf_home = settings_from_env().hf_home;
    KILN_CHECK(spec.model.empty() || !f.model.empty(), spec.model,
               ": --model beside component files must be a single file (a folder or a Kiln file is a whole model: "
               "give it alone)");
    return f;
}

ModelPtr open_model(kiln_context* ctx, const ModelSpec& spec) {
    if (!spec.assembled()) return open_model(ctx, spec.model);
    const converter::ComponentFiles files = component_files(spec);
    kiln_model_files f = KILN_MODEL_FILES_INIT;
    auto c = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
    f.model = c(files.model);
    f.diffusion_model = c(files.diffusion_model);
    f.vae = c(files.vae);
    f.clip_l = c(files.clip_l);
    f.clip_g = c(files.clip_g);
    f.t5xxl = c(files.t5xxl);
    f.llm = c(files.llm);
    f.config = c(files.config);
    f.tokenizers = c(files.tokenizers);
    kiln_model* m = nullptr;
    capi_check(kiln_model_open_files(ctx, &f, &m));
    return ModelPtr(m);
}

}  // namespace kiln::app
