// Every error path of the C API: NULL arguments, missing and truncated model files, bad enums, struct sizes,
// components and inputs. Each must return its status with a message, never throw or abort.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/capi/capi_test.h"

using namespace kiln::capi_test;
namespace fs = std::filesystem;

namespace {
// The status, and a non-empty message naming `needle`.
void expect(kiln_status got, kiln_status want, const std::string& needle = "") {
    INFO("got " << kiln_status_name(got) << " (" << kiln_last_error() << "), want " << kiln_status_name(want));
    CHECK(got == want);
    CHECK(std::strlen(kiln_last_error()) > 0);
    if (!needle.empty()) CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
}

struct TmpDir {
    fs::path path = fs::temp_directory_path() / ("kiln_capi_" + std::to_string(::getpid()));
    TmpDir() { fs::create_directories(path); }
    ~TmpDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
}  // namespace

TEST_CASE("C API: version, status names, last error", "[capi]") {
    CHECK(std::string(kiln_version()) == std::to_string(KILN_VERSION_MAJOR) + "." + std::to_string(KILN_VERSION_MINOR) +
                                             "." + std::to_string(KILN_VERSION_PATCH));
    CHECK(kiln_version_number() == KILN_VERSION_MAJOR * 10000 + KILN_VERSION_MINOR * 100 + KILN_VERSION_PATCH);
    CHECK(std::string(kiln_status_name(KILN_CANCELLED)) == "KILN_CANCELLED");
    CHECK(std::string(kiln_status_name((kiln_status)1234)) == "KILN_UNKNOWN_STATUS");
    // An error is per thread and cleared by the next successful call.
    expect(kiln_device_count(nullptr), KILN_INVALID_ARGUMENT, "count");
    int n = -1;
    REQUIRE(kiln_device_count(&n) == KILN_OK);
    CHECK(n >= 1);
    CHECK(std::string(kiln_last_error()).empty());
}

TEST_CASE("C API: NULL arguments are KILN_INVALID_ARGUMENT", "[capi]") {
    kiln_device_info di = KILN_DEVICE_INFO_INIT;
    expect(kiln_device_get_info(0, nullptr), KILN_INVALID_ARGUMENT);
    expect(kiln_device_get_info(99999, &di), KILN_NOT_FOUND, "99999");
    expect(kiln_context_create(nullptr, nullptr), KILN_INVALID_ARGUMENT);
    expect(kiln_context_get_device(nullptr, &di), KILN_INVALID_ARGUMENT);
    kiln_model* m = reinterpret_cast<kiln_model*>(1);
    expect(kiln_model_open(nullptr, digits_model().c_str(), &m), KILN_INVALID_ARGUMENT, "ctx");
    CHECK(m == nullptr);  // *out is cleared on failure
    expect(kiln_model_get_info(nullptr, nullptr), KILN_INVALID_ARGUMENT);
    const char* name = nullptr;
    int id = 0;
    expect(kiln_model_component(nullptr, 0, &name, nullptr), KILN_INVALID_ARGUMENT);
    expect(kiln_model_class_label(nullptr, 0, &id, &name), KILN_INVALID_ARGUMENT);
    kiln_generate_params gp = KILN_GENERATE_PARAMS_INIT;
    kiln_image img = KILN_IMAGE_INIT;
    expect(kiln_generate(nullptr, &gp, &img), KILN_INVALID_ARGUMENT, "model");
    kiln_forward_params fp = KILN_FORWARD_PARAMS_INIT;
    kiln_result* r = nullptr;
    expect(kiln_forward(nullptr, &fp, &r), KILN_INVALID_ARGUMENT, "model");
    CHECK(kiln_result_count(nullptr) == 0);
    kiln_tensor t;
    expect(kiln_result_get(nullptr, 0, &t), KILN_INVALID_ARGUMENT);
    expect(kiln_result_find(nullptr, "sample", &t), KILN_INVALID_ARGUMENT);
    // Destroying NULL is fine.
    kiln_context_destroy(nullptr);
    kiln_model_destroy(nullptr);
    kiln_result_destroy(nullptr);

    auto ctx = make_context();
    expect(kiln_model_open(ctx.get(), nullptr, &m), KILN_INVALID_ARGUMENT, "path");
    expect(kiln_model_open(ctx.get(), digits_model().c_str(), nullptr), KILN_INVALID_ARGUMENT);
    expect(kiln_context_get_device(ctx.get(), nullptr), KILN_INVALID_ARGUMENT);
    auto model = open_model(ctx.get(), digits_model());
    expect(kiln_generate(model.get(), nullptr, &img), KILN_INVALID_ARGUMENT, "params");
    expect(kiln_generate(model.get(), &gp, nullptr), KILN_INVALID_ARGUMENT, "out");
    expect(kiln_forward(model.get(), nullptr, &r), KILN_INVALID_ARGUMENT, "params");
    expect(kiln_forward(model.get(), &fp, nullptr), KILN_INVALID_ARGUMENT, "out");
    expect(kiln_model_get_info(model.get(), nullptr), KILN_INVALID_ARGUMENT);
    expect(kiln_model_component(model.get(), 0, nullptr, nullptr), KILN_INVALID_ARGUMENT);
    expect(kiln_model_component(model.get(), 99, &name, nullptr), KILN_NOT_FOUND);
    expect(kiln_model_class_label(model.get(), 10, &id, &name), KILN_NOT_FOUND);
    expect(kiln_model_class_label(model.get(), -1, &id, &name), KILN_NOT_FOUND);
}

TEST_CASE("C API: bad context options", "[capi]") {
    kiln_context* c = nullptr;
    kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
    o.device = 4096;
    expect(kiln_context_create(&o, &c), KILN_NOT_FOUND, "4096");
    o.device = -7;
    expect(kiln_context_create(&o, &c), KILN_INVALID_ARGUMENT, "device");
    o = KILN_CONTEXT_OPTIONS_INIT;
    o.validation = 3;
    expect(kiln_context_create(&o, &c), KILN_INVALID_ARGUMENT, "validation");
    o = KILN_CONTEXT_OPTIONS_INIT;
    o.struct_size = 0;
    expect(kiln_context_create(&o, &c), KILN_INVALID_ARGUMENT, "struct_size");
    CHECK(c == nullptr);
}

TEST_CASE("C API: struct_size: older (smaller) structs get defaults, newer ones need their new fields zero", "[capi]") {
    auto ctx = make_context();
    auto model = open_model(ctx.get(), digits_model());
    // A caller that knew only struct_size and format.
    kiln_image small = KILN_IMAGE_INIT;
    small.struct_size = offsetof(kiln_image, data);
    small.width = -5;  // beyond its struct: never read nor written
    int labels[1] = {3};
    kiln_generate_params gp = KILN_GENERATE_PARAMS_INIT;
    gp.class_labels = labels;
    gp.class_label_count = 1;
    REQUIRE(kiln_generate(model.get(), &gp, &small) == KILN_OK);  // data beyond its size: NULL, a size query
    CHECK(small.width == -5);
    // A caller from the future: a larger struct whose extra bytes are zero is fine; set ones are refused.
    struct Future {
        kiln_image img;
        uint64_t extra;
    } f{};
    f.img = KILN_IMAGE_INIT;
    f.img.struct_size = sizeof(Future);
    REQUIRE(kiln_generate(model.get(), &gp, &f.img) == KILN_OK);
    CHECK(f.img.width == 32);
    CHECK(f.img.count == 1);
    CHECK(f.img.required_bytes == 32 * 32 * 4);
    f.extra = 1;
    expect(kiln_generate(model.get(), &gp, &f.img), KILN_UNSUPPORTED, "struct_size");
}

TEST_CASE("C API: missing, truncated and foreign model files", "[capi]") {
    TmpDir tmp;
    auto ctx = make_context();
    kiln_model* m = nullptr;
    expect(kiln_model_open(ctx.get(), (tmp.path / "nope.kiln").c_str(), &m), KILN_NOT_FOUND, "nope.kiln");
    expect(kiln_model_open(ctx.get(), "synthetic:no-such-arch", &m), KILN_NOT_FOUND, "no-such-arch");
    const auto size = fs::file_size(digits_model());
    // Truncated in the header, in the tensor infos and in the tensor data: each is refused at open.
    for (uintmax_t keep : {(uintmax_t)0, (uintmax_t)16, (uintmax_t)600, size / 2, size - 1}) {
        const fs::path p = tmp.path / ("cut_" + std::to_string(keep) + ".kiln");
        fs::copy_file(digits_model(), p);
        fs::resize_file(p, keep);
        INFO("truncated to " << keep << " of " << size << " bytes");
        expect(kiln_model_open(ctx.get(), p.c_str(), &m), KILN_IO, p.filename().string());
        CHECK(m == nullptr);
    }
    // Not a model at all.
    const fs::path txt = tmp.path / "notes.txt";
    std::ofstream(txt) << "hello";
    expect(kiln_model_open(ctx.get(), txt.c_str(), &m), KILN_IO);
    // An empty folder.
    fs::create_directories(tmp.path / "empty");
    expect(kiln_model_open(ctx.get(), (tmp.path / "empty").c_str(), &m), KILN_IO);
    // The context still works.
    auto model = open_model(ctx.get(), digits_model());
    std::vector<uint8_t> px;
    CHECK(generate_digits(model.get(), {1}, 0, &px, 2) == KILN_OK);
}

TEST_CASE("C API: bad generate parameters", "[capi]") {
    auto ctx = make_context();
    auto model = open_model(ctx.get(), digits_model());
    int labels[2] = {1, 2};
    auto base = [&] {
        kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
        p.class_labels = labels;
        p.class_label_count = 2;
        return p;
    };
    kiln_image img = KILN_IMAGE_INIT;
    auto gen = [&](const kiln_generate_params& p) {
        img = KILN_IMAGE_INIT;
        return kiln_generate(model.get(), &p, &img);
    };
    auto p = base();
    REQUIRE(gen(p) == KILN_OK);
    CHECK(img.count == 2);
    p.images_per_prompt = 3;  // each label three times
    REQUIRE(gen(p) == KILN_OK);
    CHECK(img.count == 6);
    CHECK(img.required_bytes == 6 * 32 * 32 * 4);
    p.images_per_prompt = -1;
    expect(gen(p), KILN_INVALID_ARGUMENT, "images_per_prompt is -1");
    p.images_per_prompt = 1001;
    expect(gen(p), KILN_INVALID_ARGUMENT, "images_per_prompt is 1001");
    p = base();
    p.class_label_count = 0;
    expect(gen(p), KILN_INVALID_ARGUMENT, "class_labels");
    p = base();
    labels[1] = 10;  // the digits model has classes 0..9
    expect(gen(p), KILN_INVALID_ARGUMENT, "class_labels[1] = 10");
    labels[1] = -1;
    expect(gen(p), KILN_INVALID_ARGUMENT, "class_labels[1] = -1");
    labels[1] = 2;
    const char* prompts[1] = {"a cat"};
    p.prompts = prompts;
    p.prompt_count = 1;
    expect(gen(p), KILN_INVALID_ARGUMENT, "prompts do not apply");
    p = base();
    p.negative_prompt = "blurry";
    expect(gen(p), KILN_INVALID_ARGUMENT, "prompts do not apply");
    p = base();
    const double ts[2] = {999, 500};
    p.timesteps = ts;
    p.timestep_count = 2;
    expect(gen(p), KILN_INVALID_ARGUMENT, "custom sigmas and timesteps apply to the text pipelines");
    p = base();
    p.eta = 1;
    expect(gen(p), KILN_INVALID_ARGUMENT, "eta applies to the PixArt pipelines");
    p = base();
    p.scheduler_config = "{\"use_karras_sigmas\": tru}";
    expect(gen(p), KILN_INVALID_ARGUMENT, "scheduler_config is not JSON");
    p.scheduler_config = "[1]";
    expect(gen(p), KILN_INVALID_ARGUMENT, "scheduler_config must be a JSON object");
    p.scheduler_config = "{\"use_karas_sigmas\": true}";
    expect(gen(p), KILN_INVALID_ARGUMENT, "'use_karas_sigmas' is not a field");
    p.scheduler_config = "{\"use_karras_sigmas\": true}";
    REQUIRE(gen(p) == KILN_OK);
    p = base();
    p.width = 64;
    expect(gen(p), KILN_INVALID_ARGUMENT, "32x32");
    p = base();
    p.steps = -1;
    expect(gen(p), KILN_INVALID_ARGUMENT, "steps");
    p.steps = 1001;
    expect(gen(p), KILN_INVALID_ARGUMENT, "steps");
    p = base();
    p.guidance = -2;
    expect(gen(p), KILN_INVALID_ARGUMENT, "guidance");
    p = base();
    p.jit_mode = (kiln_jit_mode)17;
    expect(gen(p), KILN_INVALID_ARGUMENT, "jit_mode");
    p = base();
    p.scheduler = "no-such-scheduler";
    expect(gen(p), KILN_UNSUPPORTED, "no-such-scheduler");
    p = base();
    std::vector<float> lat(2 * 4 * 8 * 8);
    int64_t bad_shape[4] = {2, 4, 8, 7};
    p.latents = lat.data();
    p.latents_shape = bad_shape;
    p.latents_ndim = 4;
    expect(gen(p), KILN_INVALID_ARGUMENT, "latents");
    p.latents_shape = nullptr;
    expect(gen(p), KILN_INVALID_ARGUMENT, "latents_shape");
    // Output buffer: a bad format, and a buffer too small (nothing generated).
    p = base();
    img = KILN_IMAGE_INIT;
    img.format = (kiln_pixel_format)9;
    expect(kiln_generate(model.get(), &p, &img), KILN_INVALID_ARGUMENT, "format");
    std::vector<uint8_t> buf(100);
    img = KILN_IMAGE_INIT;
    img.data = buf.data();
    img.capacity = buf.size();
    expect(kiln_generate(model.get(), &p, &img), KILN_BUFFER_TOO_SMALL, "8192");
    CHECK(img.required_bytes == 2 * 32 * 32 * 4);
}

TEST_CASE("C API: bad forward components and inputs", "[capi]") {
    auto ctx = make_context();
    auto model = open_model(ctx.get(), digits_model());
    kiln_result* r = nullptr;
    kiln_forward_params fp = KILN_FORWARD_PARAMS_INIT;
    fp.component = "unet";
    expect(kiln_forward(model.get(), &fp, &r), KILN_NOT_FOUND, "unet");
    fp.component = "scheduler";
    expect(kiln_forward(model.get(), &fp, &r), KILN_UNSUPPORTED, "scheduler");
    // The DiT transformer's inputs: hidden_states [1, 4, 8, 8], timestep [1], class_labels [1].
    std::vector<float> x(4 * 8 * 8, 0.1f);
    float t = 500;
    int64_t l = 3;
    int64_t xs[4] = {1, 4, 8, 8}, one[1] = {1};
    kiln_tensor in[3] = {{"hidden_states", KILN_F32, 4, xs, x.data()},
                         {"timestep", KILN_F32, 1, one, &t},
                         {"class_labels", KILN_I64, 1, one, &l}};
    fp = KILN_FORWARD_PARAMS_INIT;
    fp.inputs = in;
    fp.input_count = 3;
    in[1].dtype = (kiln_dtype)42;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "dtype 42");
    in[1].dtype = KILN_F32;
    in[0].ndim = 9;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "ndim");
    in[0].ndim = 4;
    in[0].data = nullptr;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "data is NULL");
    in[0].data = x.data();
    in[0].name = nullptr;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "name");
    in[0].name = "hidden_states";
    in[2].name = "hidden_states";
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "twice");
    in[2].name = "class_labels";
    fp.input_count = 2;  // class_labels missing
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "class_labels");
    fp.input_count = -1;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "input_count");
    fp.input_count = 3;
    // The VAE options on the transformer, and a tile size without tiling.
    fp.vae_sliced = 1;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "AutoencoderKL");
    fp.vae_sliced = 0;
    fp.vae_tile_size = 64;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "vae_tiled");
    fp.vae_tile_size = 0;
    fp.jit_mode = (kiln_jit_mode)-3;
    expect(kiln_forward(model.get(), &fp, &r), KILN_INVALID_ARGUMENT, "jit_mode");
    CHECK(r == nullptr);
    // And the valid call works after all of that.
    fp.jit_mode = KILN_JIT_DEFAULT;
    REQUIRE(kiln_forward(model.get(), &fp, &r) == KILN_OK);
    Result res(r);
    kiln_tensor out;
    REQUIRE(kiln_result_find(r, "sample", &out) == KILN_OK);
    expect(kiln_result_find(r, "nope", &out), KILN_NOT_FOUND, "sample");
    expect(kiln_result_get(r, 5, &out), KILN_NOT_FOUND);
}
