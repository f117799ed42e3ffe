// The C API's version, errors, devices, contexts and models.
#include <algorithm>
#include <filesystem>
#include <new>
#include <optional>
#include <sstream>

#include "converter/info.h"
#include "lib/capi_internal.h"
#include "models/core/forward.h"
#include "models/pipelines/t2i_pipeline.h"

namespace kiln::capi {

namespace {
thread_local std::string t_message;
thread_local const char* t_fixed = nullptr;  // when the message itself could not be stored (out of memory)

void copy_str(char* dst, size_t cap, const std::string& s) {
    const size_t n = std::min(cap - 1, s.size());
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
}
}  // namespace

kiln_status set_error(kiln_status s, const std::string& msg) {
    try {
        t_message = msg;
        t_fixed = nullptr;
    } catch (...) {
        t_fixed = "out of host memory (while storing the error message)";
    }
    return s;
}

kiln_status status_of_current_exception(kiln_status fallback) {
    try {
        throw;
    } catch (const StatusError& e) {
        return set_error(e.status, e.what());
    } catch (const Cancelled&) {
        return set_error(KILN_CANCELLED, "cancelled by the progress callback");
    } catch (const vk::Unavailable& e) {  // no Vulkan loader, or no device
        return set_error(KILN_NOT_FOUND, e.what());
    } catch (const Error& e) {
        kiln_status s = fallback;
        switch (e.kind()) {
            case ErrorKind::io:
                s = KILN_IO;
                break;
            case ErrorKind::out_of_memory:
                s = KILN_OUT_OF_MEMORY;
                break;
            case ErrorKind::device_lost:
                s = KILN_DEVICE_LOST;
                break;
            case ErrorKind::generic:
                break;
        }
        return set_error(s, e.what());
    } catch (const std::bad_alloc&) {
        return set_error(KILN_OUT_OF_MEMORY, "out of host memory");
    } catch (const std::exception& e) {
        return set_error(KILN_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
        return set_error(KILN_INTERNAL, "internal error: unknown exception");
    }
}

void fill_device_info(const vk::DeviceInfo& d, kiln_device_info& out) {
    out.index = d.index;
    copy_str(out.name, sizeof out.name, d.name);
    copy_str(out.type, sizeof out.type, d.type);
    copy_str(out.driver, sizeof out.driver, d.driver);
    copy_str(out.api_version, sizeof out.api_version, d.api_version);
    out.device_local_bytes = d.device_local_bytes;
    out.unified_memory = d.unified_memory;
    out.usable = d.fp16_storage && d.subgroup_arithmetic;
    out.fp16_storage = d.fp16_storage;
    out.fp16_arithmetic = d.fp16_arith;
    out.int8_arithmetic = d.int8_arith;
    out.int64 = d.int64;
    out.subgroup_arithmetic = d.subgroup_arithmetic;
    out.cooperative_matrix = d.cooperative_matrix;
    out.buffer_device_address = d.buffer_device_address;
    out.timestamps = d.timestamps;
    out.subgroup_size = d.subgroup_size;
    out.max_shared_memory_bytes = d.max_shared_memory;
    out.max_storage_buffer_range = d.max_storage_buffer_range;
    out.max_allocation_bytes = d.max_allocation;
    out.memory_budget = d.memory_budget;
    out.transfer_queue = d.transfer_family >= 0;
    out.max_storage_buffers_per_stage = d.max_storage_buffers_per_stage;
    out.texel_buffers = d.texel_formats;
    out.max_texel_buffer_elements = d.max_texel_elements;
    out.subgroup_size_control = d.subgroup_control;
    out.subgroup_size_min = d.subgroup_control ? d.subgroup_min : 0;
    out.subgroup_size_max = d.subgroup_control ? d.subgroup_max : 0;
}

void check_alive(const Device& d) {
    if (d.vk->lost())
        fail(KILN_DEVICE_LOST, "the Vulkan device '", d.vk->info().name,
             "' was lost: this context is dead (destroy it and its models, then create a new one)");
}

namespace {
// What kiln_model_info reports, resolved once at open.
void describe(kiln_model& m) {
    const auto& src = m.src;
    for (auto& c : src.components()) m.components.push_back({c, src.class_of(c)});
    m.family = models::model_family(src);
    if (m.family && m.family->id == models::FamilyId::dit) {
        m.kind = KILN_MODEL_CLASS_LABELS;
        m.pipeline = models::pipeline_for(*m.family).name;
        const auto& tc = src.config("transformer");
        const int sample = tc.value("sample_size", 0);
        int vsf = 1;
        if (src.has("vae") && src.config("vae").contains("block_out_channels"))
            vsf = 1 << std::max(0, (int)src.config("vae")["block_out_channels"].size() - 1);
        m.default_width = m.default_height = sample * vsf;
        const auto& mi = src.model_index();
        if (mi.is_object() && mi.contains("id2label") && mi["id2label"].is_object()) {
            for (auto& [id, name] : mi["id2label"].items())
                m.labels.push_back({std::stoi(id), name.is_string() ? name.get<std::string>() : ""});
            std::sort(m.labels.begin(), m.labels.end());
        } else {
            for (int i = 0; i < tc.value("num_embeds_ada_norm", 0); ++i) m.labels.push_back({i, ""});
        }
        return;
    }
    m.pipeline = models::t2i_pipeline_class(src);
    if (m.pipeline.empty()) return;
    m.kind = KILN_MODEL_TEXT;
    try {
        auto plan = models::plan_t2i(src, {});
        m.default_width = plan.width, m.default_height = plan.height;
    } catch (const Error&) {  // an incomplete pipeline: open works (forward may), generate will say why
    }
}
}  // namespace

}  // namespace kiln::capi

using namespace kiln;
using namespace kiln::capi;

extern "C" {

KILN_API const char* kiln_version(void) { return KILN_VERSION_STRING; }
KILN_API int kiln_version_number(void) {
    return KILN_VERSION_MAJOR * 10000 + KILN_VERSION_MINOR * 100 + KILN_VERSION_PATCH;
}
KILN_API const char* kiln_last_error(void) { return t_fixed ? t_fixed : t_message.c_str(); }

KILN_API const char* kiln_status_name(kiln_status s) {
    switch (s) {
#define KILN_NAME(x) \
    case x:          \
        return #x;
        KILN_NAME(KILN_OK)
        KILN_NAME(KILN_INVALID_ARGUMENT)
        KILN_NAME(KILN_NOT_FOUND)
        KILN_NAME(KILN_IO)
        KILN_NAME(KILN_UNSUPPORTED)
        KILN_NAME(KILN_OUT_OF_MEMORY)
        KILN_NAME(KILN_DEVICE_LOST)
        KILN_NAME(KILN_CANCELLED)
        KILN_NAME(KILN_BUFFER_TOO_SMALL)
        KILN_NAME(KILN_INTERNAL)
#undef KILN_NAME
    }
    return "KILN_UNKNOWN_STATUS";
}

KILN_API kiln_status kiln_device_count(int* count) {
    return guarded(KILN_INTERNAL, [&] {
        KILN_ARG(count, "count is NULL");
        *count = 0;
        try {
            *count = (int)vk::list_devices(settings_from_env().context).size();
        } catch (const Error&) {  // no Vulkan loader or driver: no devices (kiln_device_get_info says why)
        }
    });
}

KILN_API kiln_status kiln_device_get_info(int index, kiln_device_info* info) {
    return guarded(KILN_INTERNAL, [&] {
        auto v = read_struct(info, "info");
        auto devs = vk::list_devices(settings_from_env().context);
        if (index < 0 || index >= (int)devs.size())
            fail(KILN_NOT_FOUND, "device ", index, " does not exist (", devs.size(), " Vulkan devices)");
        fill_device_info(devs[(size_t)index], v);
        write_struct(info, v);
    });
}

KILN_API kiln_status kiln_context_create(const kiln_context_options* options, kiln_context** out) {
    return guarded(KILN_UNSUPPORTED, [&] {
        KILN_ARG(out, "out is NULL");
        *out = nullptr;
        kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
        if (options) o = read_struct(options, "options");
        KILN_ARG(o.device >= -1, "options->device is ", o.device, " (a device index, or -1 for the best)");
        KILN_ARG(o.validation >= -1 && o.validation <= 1, "options->validation is ", o.validation,
                 " (0 = environment, 1 = on, -1 = off)");
        KILN_ARG(o.transfer_queue >= -1 && o.transfer_queue <= 2, "options->transfer_queue is ", o.transfer_queue,
                 " (0 = environment, -1 = in the step, 1 = transfer queue, 2 = split)");
        KILN_ARG(o.f16_activations >= -1 && o.f16_activations <= 1, "options->f16_activations is ", o.f16_activations,
                 " (0 = environment, 1 = on, -1 = off)");
        KILN_ARG(o.fast_precision >= -1 && o.fast_precision <= 1, "options->fast_precision is ", o.fast_precision,
                 " (0 = environment, 1 = fast, -1 = exact)");
        // The environment is read here, once per context, from the one table (runtime/core/settings.h); the
        // options given win over it.
        Settings settings;
        try {
            settings = settings_from_env();
        } catch (const Error& e) {
            fail(KILN_INVALID_ARGUMENT, e.what());
        }
        if (o.device >= 0) {
            const int n = (int)vk::list_devices(settings.context).size();
            if (o.device >= n) fail(KILN_NOT_FOUND, "device ", o.device, " does not exist (", n, " Vulkan devices)");
        }
        if (o.device >= 0) settings.context.device = o.device;
        if (o.validation != 0) settings.context.validation = o.validation == 1;
        if (o.transfer_queue != 0)
            settings.context.transfer_queue = o.transfer_queue == -1 ? "0" : o.transfer_queue == 1 ? "1" : "split";
        if (o.f16_activations != 0) settings.exec.act_f16 = o.f16_activations == 1;
        if (o.fast_precision != 0) settings.exec.precision = o.fast_precision == 1 ? "fast" : "exact";
        auto dev = std::make_shared<Device>();
        dev->vk = std::make_unique<vk::Context>(settings);
        if (o.vram_budget_bytes) dev->vk->set_vram_budget(o.vram_budget_bytes);
        auto ctx = std::make_unique<kiln_context>();
        ctx->device = std::move(dev);
        *out = ctx.release();
    });
}

KILN_API void kiln_context_destroy(kiln_context* ctx) {
    // The device's destructor does not throw (Vulkan destroy calls); the shared_ptr keeps it for live models.
    delete ctx;
}

KILN_API kiln_status kiln_context_get_device(const kiln_context* ctx, kiln_device_info* info) {
    return guarded(KILN_INTERNAL, [&] {
        KILN_ARG(ctx, "ctx is NULL");
        check_alive(*ctx->device);
        auto v = read_struct(info, "info");
        fill_device_info(ctx->device->vk->info(), v);
        write_struct(info, v);
    });
}

KILN_API kiln_status kiln_model_open(kiln_context* ctx, const char* path, kiln_model** out) {
    return guarded(KILN_IO, [&] {
        KILN_ARG(out, "out is NULL");
        *out = nullptr;
        KILN_ARG(ctx, "ctx is NULL");
        KILN_ARG(path && *path, "path is NULL or empty");
        check_alive(*ctx->device);
        const std::string p = path;
        // Reads files only: no device work, so no lock.
        std::optional<models::ModelSource> src;
        if (p.rfind("synthetic:", 0) == 0) {
            const std::string arch = p.substr(10);
            if (!models::synthetic_archs().count(arch)) fail(KILN_NOT_FOUND, "no synthetic architecture '", arch, "'");
            try {
                src = models::ModelSource::synthetic(arch);
            } catch (const Error& e) {
                fail(KILN_UNSUPPORTED, e.what());
            }
        } else {
            std::error_code ec;
            if (!std::filesystem::exists(p, ec)) fail(KILN_NOT_FOUND, p, ": no such file or folder");
            src = models::ModelSource::open(p);
        }
        auto m = std::make_unique<kiln_model>(kiln_model{ctx->device, std::move(*src)});
        describe(*m);
        *out = m.release();
    });
}

KILN_API kiln_status kiln_model_open_files(kiln_context* ctx, const kiln_model_files* files, kiln_model** out) {
    return guarded(KILN_INVALID_ARGUMENT, [&] {
        KILN_ARG(out, "out is NULL");
        *out = nullptr;
        KILN_ARG(ctx, "ctx is NULL");
        const kiln_model_files f = read_struct(files, "files");
        check_alive(*ctx->device);
        auto str = [](const char* p) { return std::string(p ? p : ""); };
        converter::ComponentFiles c;
        c.model = str(f.model);
        c.diffusion_model = str(f.diffusion_model);
        c.vae = str(f.vae);
        c.clip_l = str(f.clip_l);
        c.clip_g = str(f.clip_g);
        c.t5xxl = str(f.t5xxl);
        c.llm = str(f.llm);
        c.config = str(f.config);
        c.tokenizers = str(f.tokenizers);
        c.hf_home = ctx->device->vk->settings().hf_home;
        KILN_ARG(c.any(), "files names no file");
        for (const std::string* p :
             {&c.model, &c.diffusion_model, &c.vae, &c.clip_l, &c.clip_g, &c.t5xxl, &c.llm, &c.config, &c.tokenizers}) {
            std::error_code ec;
            if (!p->empty() && !std::filesystem::exists(*p, ec)) fail(KILN_NOT_FOUND, *p, ": no such file or folder");
        }
        // Reads file headers only: no device work, so no lock.
        auto m = std::make_unique<kiln_model>(
            kiln_model{ctx->device, models::ModelSource::assemble(converter::assemble(c))});
        describe(*m);
        *out = m.release();
    });
}

KILN_API void kiln_model_destroy(kiln_model* model) {
    if (model && (model->encoders || model->transformer)) {      // resident encoders and transformer hold device
        std::lock_guard<std::mutex> lock(model->device->mutex);  // memory: freed under the context's lock
        model->transformer.reset();
        model->encoders.reset();
    }
    delete model;
}

KILN_API kiln_status kiln_model_get_info(const kiln_model* model, kiln_model_info* info) {
    return guarded(KILN_INTERNAL, [&] {
        KILN_ARG(model, "model is NULL");
        check_alive(*model->device);
        auto v = read_struct(info, "info");
        v.kind = model->kind;
        v.pipeline = model->pipeline.c_str();
        v.component_count = (int)model->components.size();
        v.class_count = (int)model->labels.size();
        v.default_width = model->default_width;
        v.default_height = model->default_height;
        write_struct(info, v);
    });
}

KILN_API kiln_status kiln_model_component(const kiln_model* model, int i, const char** name, const char** cls) {
    return guarded(KILN_INTERNAL, [&] {
        KILN_ARG(model, "model is NULL");
        check_alive(*model->device);
        KILN_ARG(name, "name is NULL");
        if (i < 0 || i >= (int)model->components.size())
            fail(KILN_NOT_FOUND, "component index ", i, " out of range (", model->components.size(), " components)");
        *name = model->components[(size_t)i].first.c_str();
        if (cls) *cls = model->components[(size_t)i].second.c_str();
    });
}

KILN_API kiln_status kiln_describe_model_file(const char* path, char* buf, size_t capacity, size_t* length) {
    return guarded(KILN_IO, [&] {
        KILN_ARG(path && *path, "path is NULL or empty");
        KILN_ARG(length, "length is NULL");
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) fail(KILN_NOT_FOUND, path, ": no such file");
        std::ostringstream os;
        print_model_info(path, os, settings_from_env().hf_home);
        const std::string text = os.str();
        *length = text.size();
        if (!buf) return;
        if (capacity <= text.size())
            fail(KILN_BUFFER_TOO_SMALL, "capacity is ", capacity, " bytes, ", text.size() + 1, " needed");
        std::memcpy(buf, text.c_str(), text.size() + 1);
    });
}

KILN_API kiln_status kiln_model_class_label(const kiln_model* model, int i, int* id, const char** name) {
    return guarded(KILN_INTERNAL, [&] {
        KILN_ARG(model, "model is NULL");
        check_alive(*model->device);
        KILN_ARG(id || name, "id and name are both NULL");
        if (i < 0 || i >= (int)model->labels.size())
            fail(KILN_NOT_FOUND, "class index ", i, " out of range (", model->labels.size(), " classes)");
        if (id) *id = model->labels[(size_t)i].first;
        if (name) *name = model->labels[(size_t)i].second.c_str();
    });
}

}  // extern "C"
