// The C API end to end on the built-in dit-digits model: model info, determinism, pixel formats, cancel from the
// progress callback, forward, and threads (two contexts in parallel; one context from two threads).
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <thread>

#include "runtime/core/tensor.h"
#include "runtime/vulkan/context.h"
#include "tests/capi/capi_test.h"

using namespace kiln::capi_test;

namespace {
// Sum of |a - b| over bytes: 0 when identical.
long diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    REQUIRE(a.size() == b.size());
    long d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += std::abs((int)a[i] - (int)b[i]);
    return d;
}

// The digits model's images of `labels` after `steps` steps on a context made with `o`, in `format`.
std::vector<uint8_t> digits_on(const kiln_context_options& o, std::vector<int> labels, int steps,
                               kiln_pixel_format format, kiln_generate_stats* st = nullptr) {
    kiln_context* c = nullptr;
    REQUIRE(kiln_context_create(&o, &c) == KILN_OK);
    Context ctx(c);
    auto m = open_model(ctx.get(), digits_model());
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = labels.data();
    p.class_label_count = (int)labels.size();
    p.steps = steps;
    p.stats = st;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = format;
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    std::vector<uint8_t> px(img.required_bytes);
    img.data = px.data();
    img.capacity = px.size();
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    return px;
}
}  // namespace

TEST_CASE("C API: devices and model info", "[capi]") {
    int n = 0;
    REQUIRE(kiln_device_count(&n) == KILN_OK);
    REQUIRE(n >= 1);
    kiln_device_info d = KILN_DEVICE_INFO_INIT;
    REQUIRE(kiln_device_get_info(0, &d) == KILN_OK);
    CHECK(std::strlen(d.name) > 0);
    CHECK(std::strlen(d.type) > 0);
    auto ctx = make_context();
    kiln_device_info cd = KILN_DEVICE_INFO_INIT;
    REQUIRE(kiln_context_get_device(ctx.get(), &cd) == KILN_OK);
    CHECK(cd.usable == 1);
    // The feature fields (what `kiln devices` prints) agree with the summary.
    CHECK(cd.fp16_storage == 1);
    CHECK(cd.subgroup_arithmetic == 1);
    CHECK(cd.subgroup_size > 0);
    CHECK(cd.max_storage_buffer_range >= (1u << 27));  // Vulkan requires at least 128 MiB
    CHECK(cd.max_allocation_bytes > 0);
    if (cd.texel_buffers) CHECK(cd.max_texel_buffer_elements >= 65536);  // Vulkan's minimum
    // Subgroup size control: lavapipe and NVIDIA have it; the default size lies in the range a pipeline may require.
    if (cd.subgroup_size_control) {
        CHECK(cd.subgroup_size_min <= cd.subgroup_size);
        CHECK(cd.subgroup_size <= cd.subgroup_size_max);
    } else {
        CHECK(cd.subgroup_size_max == 0);
    }
    // An older caller's struct (the fields before the feature fields) is filled up to its size only.
    kiln_device_info old{};
    old.struct_size = offsetof(kiln_device_info, fp16_storage);
    old.fp16_storage = 7;
    REQUIRE(kiln_context_get_device(ctx.get(), &old) == KILN_OK);
    CHECK(old.usable == 1);
    CHECK(old.fp16_storage == 7);

    auto m = open_model(ctx.get(), digits_model());
    kiln_model_info info = KILN_MODEL_INFO_INIT;
    REQUIRE(kiln_model_get_info(m.get(), &info) == KILN_OK);
    CHECK(info.kind == KILN_MODEL_CLASS_LABELS);
    CHECK(std::string(info.pipeline) == "DiTPipeline");
    CHECK(info.class_count == 10);
    CHECK(info.default_width == 32);
    CHECK(info.default_height == 32);
    std::vector<std::string> comps;
    for (int i = 0; i < info.component_count; ++i) {
        const char *name = nullptr, *cls = nullptr;
        REQUIRE(kiln_model_component(m.get(), i, &name, &cls) == KILN_OK);
        comps.push_back(std::string(name) + ":" + cls);
    }
    CHECK(std::find(comps.begin(), comps.end(), "transformer:DiTTransformer2DModel") != comps.end());
    CHECK(std::find(comps.begin(), comps.end(), "vae:AutoencoderKL") != comps.end());
    for (int i = 0; i < info.class_count; ++i) {
        int id = -1;
        const char* name = nullptr;
        REQUIRE(kiln_model_class_label(m.get(), i, &id, &name) == KILN_OK);
        CHECK(id == i);
        CHECK(std::string(name) == std::to_string(i));
    }
    // The model outlives its context handle (the device stays until the model goes).
    ctx.reset();
    std::vector<uint8_t> px;
    CHECK(generate_digits(m.get(), {7}, 1, &px, 2) == KILN_OK);
}

TEST_CASE("C API: identical seeds give identical images; formats agree", "[capi][vulkan]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    std::vector<uint8_t> a, b, c;
    REQUIRE(generate_digits(m.get(), {0, 5}, 42, &a) == KILN_OK);
    REQUIRE(generate_digits(m.get(), {0, 5}, 42, &b) == KILN_OK);
    REQUIRE(generate_digits(m.get(), {0, 5}, 43, &c) == KILN_OK);
    REQUIRE(a.size() == 2 * 32 * 32 * 4);
    CHECK(diff(a, b) == 0);
    CHECK(diff(a, c) > 0);
    for (size_t i = 3; i < a.size(); i += 4) REQUIRE(a[i] == 255);  // opaque alpha
    // Not a flat image.
    CHECK(*std::max_element(a.begin(), a.end()) - *std::min_element(a.begin(), a.end()) > 100);

    // RGB float32 of the same call rounds to the RGBA8 pixels.
    int labels[2] = {0, 5};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = labels;
    p.class_label_count = 2;
    p.seed = 42;
    p.steps = 4;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    REQUIRE(img.required_bytes == 2 * 32 * 32 * 3 * sizeof(float));
    std::vector<float> f(img.required_bytes / sizeof(float));
    img.data = f.data();
    img.capacity = img.required_bytes;
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    for (size_t i = 0; i < 2 * 32 * 32; ++i)
        for (int k = 0; k < 3; ++k) {
            INFO("pixel " << i << " channel " << k);
            REQUIRE(a[i * 4 + k] == (uint8_t)std::nearbyint(std::clamp(f[i * 3 + k], 0.f, 1.f) * 255.f));
        }
    // noise_dtype: the seed's noise as torch.randn draws it in that dtype (f16: other noise, another image);
    // "f32" is the default; anything else is named.
    std::vector<float> h(f.size());
    img.data = h.data();
    p.noise_dtype = "f16";
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    CHECK(h != f);
    p.noise_dtype = "f32";
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    CHECK(h == f);
    p.noise_dtype = "f8";
    CHECK(kiln_generate(m.get(), &p, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("noise_dtype 'f8' (f32, f16 or bf16)") != std::string::npos);
    CHECK(kiln::vk::Context::validation_errors() == 0);
}

TEST_CASE("C API: the progress callback sees every step and cancels at a step boundary", "[capi][vulkan]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    struct Seen {
        std::vector<int> steps;
        int total = 0, cancel_at = -1;
    };
    auto cb = [](int step, int total, void* user) -> int {
        auto* s = static_cast<Seen*>(user);
        s->steps.push_back(step);
        s->total = total;
        return step == s->cancel_at;
    };
    Seen all;
    std::vector<uint8_t> px;
    REQUIRE(generate_digits(m.get(), {1}, 0, &px, 5, cb, &all) == KILN_OK);
    CHECK(all.total == 5);
    CHECK(all.steps == std::vector<int>{0, 1, 2, 3, 4, 5});
    for (int cancel_at : {0, 2}) {
        Seen s;
        s.cancel_at = cancel_at;
        std::vector<uint8_t> none(7, 9);
        kiln_status st = generate_digits(m.get(), {1}, 0, &none, 5, cb, &s);
        INFO(kiln_last_error());
        CHECK(st == KILN_CANCELLED);
        CHECK(s.steps.back() == cancel_at);  // no step ran after the one that cancelled
        CHECK(std::string(kiln_last_error()).find("cancel") != std::string::npos);
    }
    // The context and model are still usable, and give the same image as before.
    std::vector<uint8_t> again;
    REQUIRE(generate_digits(m.get(), {1}, 0, &again, 5) == KILN_OK);
    CHECK(diff(px, again) == 0);
    CHECK(kiln::vk::Context::validation_errors() == 0);
}

TEST_CASE("C API: kiln_forward on the device matches the CPU reference", "[capi][vulkan]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    std::vector<float> x(2 * 4 * 8 * 8);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * (float)i);
    float t[2] = {999, 10};
    int64_t labels[2] = {3, 8};
    int64_t xs[4] = {2, 4, 8, 8}, two[1] = {2};
    kiln_tensor in[3] = {{"hidden_states", KILN_F32, 4, xs, x.data()},
                         {"timestep", KILN_F32, 1, two, t},
                         {"class_labels", KILN_I64, 1, two, labels}};
    std::vector<float> outs[2];
    for (int cpu : {0, 1}) {
        kiln_forward_params fp = KILN_FORWARD_PARAMS_INIT;
        fp.inputs = in;
        fp.input_count = 3;
        fp.cpu_reference = cpu;
        kiln_result* r = nullptr;
        INFO(kiln_last_error());
        REQUIRE(kiln_forward(m.get(), &fp, &r) == KILN_OK);
        Result res(r);
        REQUIRE(kiln_result_count(r) >= 1);
        kiln_tensor o;
        REQUIRE(kiln_result_find(r, "sample", &o) == KILN_OK);
        REQUIRE(o.dtype == KILN_F32);
        REQUIRE(o.ndim == 4);
        CHECK(o.shape[0] == 2);
        CHECK(o.shape[1] == 8);  // learned sigma: 2 x in_channels
        const float* d = static_cast<const float*>(o.data);
        outs[cpu].assign(d, d + 2 * 8 * 8 * 8);
    }
    // f16 weights, f32 activations: summation order differs between the device and the reference: 1e-3 relative.
    CHECK(kiln::rel_l2(outs[0], outs[1]) < 1e-3);
    CHECK(kiln::vk::Context::validation_errors() == 0);
}

TEST_CASE("C API: two contexts generate concurrently on two threads", "[capi][vulkan][threads]") {
    std::vector<uint8_t> ref;
    {
        auto ctx = make_context();
        auto m = open_model(ctx.get(), digits_model());
        REQUIRE(generate_digits(m.get(), {2, 9}, 7, &ref) == KILN_OK);
    }
    std::vector<uint8_t> got[2];
    kiln_status st[2] = {KILN_INTERNAL, KILN_INTERNAL};
    std::thread th[2];
    for (int i = 0; i < 2; ++i)
        th[i] = std::thread([&, i] {
            kiln_context* c = nullptr;
            kiln_model* m = nullptr;
            st[i] = kiln_context_create(nullptr, &c);
            if (st[i] == KILN_OK) st[i] = kiln_model_open(c, digits_model().c_str(), &m);
            for (int rep = 0; rep < 2 && st[i] == KILN_OK; ++rep) st[i] = generate_digits(m, {2, 9}, 7, &got[i]);
            kiln_model_destroy(m);
            kiln_context_destroy(c);
        });
    for (auto& t : th) t.join();
    for (int i = 0; i < 2; ++i) {
        CHECK(st[i] == KILN_OK);
        CHECK(diff(got[i], ref) == 0);
    }
    CHECK(kiln::vk::Context::validation_errors() == 0);
}

TEST_CASE("C API: one context hammered from two threads is serialized", "[capi][vulkan][threads]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    std::vector<uint8_t> ref[2];
    REQUIRE(generate_digits(m.get(), {4}, 11, &ref[0], 3) == KILN_OK);
    REQUIRE(generate_digits(m.get(), {6}, 12, &ref[1], 3) == KILN_OK);
    std::atomic<int> failures{0}, mismatches{0}, forwards{0};
    std::thread th[2];
    for (int i = 0; i < 2; ++i)
        th[i] = std::thread([&, i] {
            for (int rep = 0; rep < 3; ++rep) {
                std::vector<uint8_t> px;
                if (generate_digits(m.get(), {i == 0 ? 4 : 6}, i == 0 ? 11 : 12, &px, 3) != KILN_OK)
                    failures++;
                else if (px != ref[i])
                    mismatches++;
                // Interleave a forward and model queries on the same context.
                kiln_model_info info = KILN_MODEL_INFO_INIT;
                if (kiln_model_get_info(m.get(), &info) != KILN_OK) failures++;
                std::vector<float> x(4 * 8 * 8, 0.25f);
                float t = 100;
                int64_t l = i, xs[4] = {1, 4, 8, 8}, one[1] = {1};
                kiln_tensor in[3] = {{"hidden_states", KILN_F32, 4, xs, x.data()},
                                     {"timestep", KILN_F32, 1, one, &t},
                                     {"class_labels", KILN_I64, 1, one, &l}};
                kiln_forward_params fp = KILN_FORWARD_PARAMS_INIT;
                fp.inputs = in;
                fp.input_count = 3;
                kiln_result* r = nullptr;
                if (kiln_forward(m.get(), &fp, &r) == KILN_OK && kiln_result_count(r) >= 1)
                    forwards++;
                else
                    failures++;
                kiln_result_destroy(r);
            }
        });
    for (auto& t : th) t.join();
    CHECK(failures == 0);
    CHECK(mismatches == 0);
    CHECK(forwards == 6);
    CHECK(kiln::vk::Context::validation_errors() == 0);
}

TEST_CASE("C API: generate stats, intermediates and VAE tiling", "[capi][vulkan]") {
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    int labels[2] = {2, 9};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = labels;
    p.class_label_count = 2;
    p.steps = 3;
    kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
    p.stats = &st;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    // The size query resolves the defaults.
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    CHECK(st.steps == 3);
    CHECK(st.guidance == 4.0);  // DiT's default
    CHECK(st.width == 32);
    CHECK(st.denoise_ms == 0);
    std::vector<float> px(img.required_bytes / sizeof(float)), tiled(px.size());
    img.data = px.data();
    img.capacity = img.required_bytes;
    kiln_result* inter = nullptr;
    p.intermediates = &inter;
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    Result owned(inter);
    CHECK(st.denoise_ms > 0);
    CHECK(st.decode_ms > 0);
    CHECK(st.transformer_weight_bytes > 0);
    CHECK(st.transformer_device_bytes >= st.transformer_weight_bytes + st.transformer_activation_bytes);
    kiln_tensor t;
    for (const char* name : {"step0_noise_pred", "step2_latents", "decoded", "image"}) {
        INFO(name);
        CHECK(kiln_result_find(inter, name, &t) == KILN_OK);
    }
    REQUIRE(kiln_result_find(inter, "image", &t) == KILN_OK);
    REQUIRE(t.dtype == KILN_F32);
    CHECK(std::memcmp(t.data, px.data(), px.size() * sizeof(float)) == 0);  // the pixels the call wrote
    // Tiled decode of a one-tile image is the plain decode; a tile size needs tiling.
    p.intermediates = nullptr;
    p.vae_tiling = 1;
    img.data = tiled.data();
    REQUIRE(kiln_generate(m.get(), &p, &img) == KILN_OK);
    CHECK(tiled == px);
    p.vae_tiling = 0;
    p.vae_tile_size = 16;
    CHECK(kiln_generate(m.get(), &p, &img) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("vae_tiling") != std::string::npos);
}

TEST_CASE("C API: kiln_describe_model_file gives the `kiln info` text", "[capi]") {
    size_t n = 0;
    REQUIRE(kiln_describe_model_file(digits_model().c_str(), nullptr, 0, &n) == KILN_OK);
    REQUIRE(n > 100);
    std::string text(n + 1, 'x');
    CHECK(kiln_describe_model_file(digits_model().c_str(), text.data(), n, &n) == KILN_BUFFER_TOO_SMALL);
    CHECK(text[0] == 'x');  // nothing written
    REQUIRE(kiln_describe_model_file(digits_model().c_str(), text.data(), text.size(), &n) == KILN_OK);
    CHECK(text[n] == '\0');
    text.resize(n);
    CHECK(text.find("DiTTransformer2DModel") != std::string::npos);
    CHECK(text.find("AutoencoderKL") != std::string::npos);
    CHECK(kiln_describe_model_file("/no/such/file.kiln", nullptr, 0, &n) == KILN_NOT_FOUND);
    CHECK(kiln_describe_model_file(KILN_BUILD_DIR, nullptr, 0, &n) == KILN_IO);
    CHECK(kiln_describe_model_file(digits_model().c_str(), nullptr, 0, nullptr) == KILN_INVALID_ARGUMENT);
}

TEST_CASE("C API: a budget streams the blocks; transfer_queue 2 puts ring copies in batches; same pixels",
          "[capi][vulkan][stream]") {
    // The digits model's six blocks stream through two ring slots at the minimum budget (address selection and
    // no in-place reads, so that the ring is used on lavapipe too). transfer_queue 2 (split) gives every ring copy
    // a batch of its own, ordered by timeline semaphores as on a transfer queue. The pixels never change.
    setenv("KILN_BLOCK_WEIGHTS", "device", 1);
    setenv("KILN_STREAM_IN_PLACE", "0", 1);
    auto gen = [](int transfer_queue, uint64_t budget, kiln_generate_stats* st) {
        kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
        o.vram_budget_bytes = budget;
        o.transfer_queue = transfer_queue;
        return digits_on(o, {3, 8}, 3, KILN_PIXELS_RGBA8, st);
    };
    kiln_generate_stats all = KILN_GENERATE_STATS_INIT, in_step = KILN_GENERATE_STATS_INIT,
                        split = KILN_GENERATE_STATS_INIT;
    const auto ref = gen(-1, 0, &all);
    const auto a = gen(-1, 1, &in_step);
    const auto b = gen(2, 1, &split);
    unsetenv("KILN_BLOCK_WEIGHTS");
    unsetenv("KILN_STREAM_IN_PLACE");
    CHECK(all.blocks_streamed == 0);
    CHECK(all.streamed_bytes_per_step == 0);
    CHECK(in_step.blocks_streamed == 6);
    CHECK(in_step.streamed_bytes_per_step > 0);
    CHECK(in_step.copy_batches_per_step == 0);
    CHECK(split.blocks_streamed == 6);
    CHECK(split.streamed_bytes_per_step == in_step.streamed_bytes_per_step);
    CHECK(split.copy_batches_per_step == 6);
    CHECK(a == ref);
    CHECK(b == ref);

    kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
    o.transfer_queue = 3;
    kiln_context* c = nullptr;
    CHECK(kiln_context_create(&o, &c) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("transfer_queue") != std::string::npos);
    CHECK(c == nullptr);
}

TEST_CASE("C API: f16_activations option: 1 and -1 win over KILN_ACT_F16, 0 leaves it to the variable",
          "[capi][vulkan]") {
    // f16 activations round the linear-to-linear buffers (about 1e-4 relative), so the f32 image differs from the
    // f32-activation one; the option must give exactly the variable's image, whatever the variable says.
    auto gen = [](int f16_activations) {
        kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
        o.f16_activations = f16_activations;
        return digits_on(o, {5}, 2, KILN_PIXELS_RGB_F32);
    };
    unsetenv("KILN_ACT_F16");
    const auto f32 = gen(0), f16 = gen(1);
    CHECK(f16 != f32);
    CHECK(gen(-1) == f32);
    setenv("KILN_ACT_F16", "1", 1);
    CHECK(gen(0) == f16);
    CHECK(gen(-1) == f32);
    unsetenv("KILN_ACT_F16");

    kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
    o.f16_activations = 2;
    kiln_context* c = nullptr;
    CHECK(kiln_context_create(&o, &c) == KILN_INVALID_ARGUMENT);
    CHECK(std::string(kiln_last_error()).find("f16_activations") != std::string::npos);
    CHECK(c == nullptr);
}
