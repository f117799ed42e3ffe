#pragma once
// libkiln's side of the C API: what the opaque handles hold, the per-thread error, and `guarded`, which runs a
// call's body and turns every exception into a kiln_status (nothing crosses the API).
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "include/kiln.h"
#include "models/core/source.h"
#include "models/pipelines/t2i_pipeline.h"
#include "models/pipelines/t2i_transformers.h"
#include "models/pipelines/text_encode.h"
#include "runtime/core/error.h"
#include "runtime/exec/executor.h"
#include "runtime/vulkan/context.h"

namespace kiln::capi {

// The device and its lock. Shared by the context handle and its models: the last one to go destroys it.
struct Device {
    std::mutex mutex;  // serializes every call on this context and its models
    std::unique_ptr<vk::Context> vk;
};

// An error with its status, thrown inside the library and caught by guarded().
struct StatusError : Error {
    kiln_status status;
    StatusError(kiln_status s, const std::string& msg) : Error(msg), status(s) {}
};
// Thrown by the progress callback wrapper when the user's callback returns non-zero.
struct Cancelled {};

template <class... A>
[[noreturn]] void fail(kiln_status s, A&&... a) {
    throw StatusError(s, detail::concat(std::forward<A>(a)...));
}
#define KILN_ARG(cond, ...) \
    if (!(cond)) ::kiln::capi::fail(KILN_INVALID_ARGUMENT, __VA_ARGS__)

// Stores the calling thread's message; returns s.
kiln_status set_error(kiln_status s, const std::string& msg);
// Maps a caught exception to a status (kiln::Error: `fallback`, unless its message names a Vulkan out-of-memory
// or device-lost result) and records its message.
kiln_status status_of_current_exception(kiln_status fallback);

// Runs body() (returning void); any exception becomes a status, with `fallback` for a plain kiln::Error.
template <class F>
kiln_status guarded(kiln_status fallback, F&& body) noexcept {
    try {
        set_error(KILN_OK, "");
        body();
        return KILN_OK;
    } catch (...) {
        return status_of_current_exception(fallback);
    }
}

// Copies a caller's struct that begins with size_t struct_size into a zeroed T: a smaller (older) struct leaves
// the newer fields zero (their defaults); a larger (newer) one is accepted when its unknown tail is zero.
template <class T>
T read_struct(const T* p, const char* what) {
    KILN_ARG(p, what, " is NULL");
    const size_t n = p->struct_size;
    KILN_ARG(n >= sizeof(size_t), what, "->struct_size is ", n, " (set it to sizeof(", what, "))");
    T out;
    std::memset(&out, 0, sizeof out);
    std::memcpy(&out, p, std::min(n, sizeof(T)));
    for (size_t i = sizeof(T); i < n; ++i)
        if (reinterpret_cast<const unsigned char*>(p)[i] != 0)
            fail(KILN_UNSUPPORTED, what, " has fields this libkiln ", kiln_version(), " does not know (struct_size ", n,
                 " > ", sizeof(T), ") set");
    out.struct_size = sizeof(T);
    return out;
}
// Writes `v` back into the caller's struct, as many bytes as the caller's struct_size holds.
template <class T>
void write_struct(T* p, const T& v) {
    const size_t n = p->struct_size;
    std::memcpy(reinterpret_cast<unsigned char*>(p) + sizeof(size_t),
                reinterpret_cast<const unsigned char*>(&v) + sizeof(size_t), std::min(n, sizeof(T)) - sizeof(size_t));
}

// kiln_jit_mode -> exec::Mode (KILN_INVALID_ARGUMENT for other values).
// The value a caller stored in a C enum field, as an int. A value outside the enumerators is a caller error to
// report, but loading it through the enum type is undefined behaviour in C++ (UBSan: "not a valid value for type").
template <class E>
int raw_enum(const E& e) {
    static_assert(sizeof(E) == sizeof(int));
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}
// kiln_jit_mode (read with raw_enum) -> executor mode; anything else is KILN_INVALID_ARGUMENT.
exec::Mode jit_mode(int m);
// A caller's tensor view (list[i]: "inputs", "prompt_embeds"), checked and copied.
Tensor read_tensor(const kiln_tensor& t, int i, const char* list = "inputs");

void fill_device_info(const vk::DeviceInfo& d, kiln_device_info& out);

// A context whose device was lost is dead: every call on it or its models but destroy is KILN_DEVICE_LOST.
void check_alive(const Device& d);

}  // namespace kiln::capi

struct kiln_context {
    std::shared_ptr<kiln::capi::Device> device;
};

struct kiln_model {
    std::shared_ptr<kiln::capi::Device> device;
    kiln::models::ModelSource src;
    kiln_model_kind kind = KILN_MODEL_COMPONENT;
    std::string pipeline;
    const kiln::models::Family* family = nullptr;  // the registry family of its transformer (nullptr: a component)
    int default_width = 0, default_height = 0;
    std::vector<std::pair<std::string, std::string>> components;  // name, class
    std::vector<std::pair<int, std::string>> labels;              // id, name
    // kiln_generate_params.keep_encoders: text encoders resident between calls (under device->mutex; declared
    // after device so it is destroyed first).
    std::unique_ptr<kiln::models::EncoderCache> encoders;
    // kiln_generate_params.keep_transformer: the text-to-image transformer resident between calls (likewise).
    std::unique_ptr<kiln::models::TransformerCache> transformer;
    // With keep_transformer: the LoRA files last read, reused while unchanged on disk (its own lock: calls resolve
    // outside device->mutex).
    std::unique_ptr<kiln::models::LoraFileCache> lora_files = std::make_unique<kiln::models::LoraFileCache>();
};

struct kiln_result {
    struct Out {
        std::string name;
        kiln::Tensor tensor;
    };
    std::vector<Out> outputs;
};
