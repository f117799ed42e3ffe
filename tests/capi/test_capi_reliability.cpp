// Faults an app meets in the field, through the C API: out of device memory, a lost device, a model file truncated
// or rewritten after kiln_model_open. Each must come back as its status with a message, no crash and no hang; the
// context stays usable (memory, files) or is cleanly dead (a lost device). The faults are injected through the
// device's test hooks (vk::Context::faults(), also KILN_TEST_DEVICE_MEMORY_LIMIT / KILN_TEST_DEVICE_LOST_AFTER).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lib/capi_internal.h"
#include "runtime/vulkan/memory.h"
#include "tests/capi/capi_test.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;
namespace fs = std::filesystem;

namespace {
kiln::vk::Context& vk_of(kiln_context* c) { return *c->device->vk; }

void expect(kiln_status got, kiln_status want, const std::string& needle) {
    INFO("got " << kiln_status_name(got) << " (" << kiln_last_error() << "), want " << kiln_status_name(want));
    CHECK(got == want);
    CHECK(std::string(kiln_last_error()).find(needle) != std::string::npos);
}

size_t diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    size_t n = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
    return n;
}

struct TmpDir {
    fs::path path = fs::temp_directory_path() / ("kiln_rel_" + std::to_string(::getpid()));
    TmpDir() { fs::create_directories(path); }
    ~TmpDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

// The PixArt fixture from a prompt (4 steps, 32x32, RGBA8); its text encoder runs before the transformer.
kiln_status generate_text(kiln_model* m, std::vector<uint8_t>* px, kiln_progress_fn progress = nullptr,
                          void* user = nullptr) {
    const char* prompts[1] = {"a red fox in the snow"};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.prompts = prompts;
    p.prompt_count = 1;
    p.steps = 4;
    p.width = p.height = 32;
    p.progress = progress;
    p.progress_user = user;
    kiln_image img = KILN_IMAGE_INIT;
    px->assign(32 * 32 * 4, 0);
    img.data = px->data();
    img.capacity = px->size();
    return kiln_generate(m, &p, &img);
}
}  // namespace

TEST_CASE("C API: out of device memory is KILN_OUT_OF_MEMORY and the context stays usable", "[capi][vulkan][faults]") {
    auto ctx = make_context();
    auto& vk = vk_of(ctx.get());
    const uint64_t before = kiln::vk::Allocator::process_bytes();
    auto digits = open_model(ctx.get(), digits_model());
    auto pixart = open_model(ctx.get(), kiln::test::data_path("fixtures/pixart_pipeline"));
    std::vector<uint8_t> ref_digits, ref_text, px;
    REQUIRE(generate_digits(digits.get(), {3, 7}, 5, &ref_digits) == KILN_OK);
    kiln::vk::Allocator::reset_process_peak();
    REQUIRE(generate_text(pixart.get(), &ref_text) == KILN_OK);
    const uint64_t text_peak = kiln::vk::Allocator::process_peak_bytes() - before;  // what that call needs at most
    // More than one first unreserved block (1 MiB, memory.cpp): the call makes several blocks (each executor's
    // reserved plan, its tables), so the limit below fails partway.
    REQUIRE(text_peak > (1u << 20));

    // Nothing fits: the first allocation fails.
    vk.faults().memory_limit = 1 << 20;
    expect(generate_digits(digits.get(), {3, 7}, 5, &px), KILN_OUT_OF_MEMORY, "out of GPU memory");
    CHECK(kiln::vk::Allocator::process_bytes() == before);  // every block of the failed call was freed
    // One byte short of the call's peak: its first blocks are allocated (the text encoder runs), a later one fails.
    vk.faults().memory_limit = text_peak - 1;
    expect(generate_text(pixart.get(), &px), KILN_OUT_OF_MEMORY, "out of GPU memory");
    CHECK(kiln::vk::Allocator::process_bytes() == before);

    // The limit lifted, the same context and models generate the same images as before.
    vk.faults().memory_limit = 0;
    REQUIRE(generate_digits(digits.get(), {3, 7}, 5, &px) == KILN_OK);
    CHECK(diff(px, ref_digits) == 0);
    REQUIRE(generate_text(pixart.get(), &px) == KILN_OK);
    CHECK(diff(px, ref_text) == 0);
    CHECK(kiln::vk::Context::validation_errors() == 0);
}

TEST_CASE("C API: a lost device is KILN_DEVICE_LOST on every call; the context is destroyed cleanly",
          "[capi][vulkan][faults]") {
    const uint64_t before = kiln::vk::Allocator::process_bytes();
    for (int64_t after : {0, 3}) {  // at the first submission, and in the middle of the denoising loop
        INFO("device lost after " << after << " submissions");
        auto ctx = make_context();
        auto m = open_model(ctx.get(), digits_model());
        kiln_model* m2 = nullptr;
        REQUIRE(kiln_model_open(ctx.get(), digits_model().c_str(), &m2) == KILN_OK);
        Model second(m2);
        vk_of(ctx.get()).faults().lose_device_after = after;
        std::vector<uint8_t> px;
        expect(generate_digits(m.get(), {1, 2}, 0, &px), KILN_DEVICE_LOST, "VK_ERROR_DEVICE_LOST");
        CHECK(vk_of(ctx.get()).lost());

        // Dead from now on: every call on the context or its models says so, none touches the device.
        expect(generate_digits(m.get(), {1}, 0, &px), KILN_DEVICE_LOST, "was lost");
        expect(generate_digits(second.get(), {1}, 0, &px), KILN_DEVICE_LOST, "was lost");
        kiln_model* m3 = nullptr;
        expect(kiln_model_open(ctx.get(), digits_model().c_str(), &m3), KILN_DEVICE_LOST, "was lost");
        CHECK(m3 == nullptr);
        kiln_device_info di = KILN_DEVICE_INFO_INIT;
        expect(kiln_context_get_device(ctx.get(), &di), KILN_DEVICE_LOST, "was lost");
        kiln_model_info mi = KILN_MODEL_INFO_INIT;
        expect(kiln_model_get_info(m.get(), &mi), KILN_DEVICE_LOST, "was lost");
        kiln_forward_params fp = KILN_FORWARD_PARAMS_INIT;
        kiln_result* r = nullptr;
        expect(kiln_forward(m.get(), &fp, &r), KILN_DEVICE_LOST, "was lost");
        CHECK(r == nullptr);
        // Destroyed in any order, without a hang; the device memory is all given back.
        ctx.reset();
        m.reset();
        second.reset();
        CHECK(kiln::vk::Allocator::process_bytes() == before);
    }
    // A new context works.
    auto ctx = make_context();
    auto m = open_model(ctx.get(), digits_model());
    std::vector<uint8_t> px;
    CHECK(generate_digits(m.get(), {1}, 0, &px, 2) == KILN_OK);
    CHECK(kiln::vk::Context::validation_errors() == 0);
}

TEST_CASE("C API: a model file truncated or rewritten after kiln_model_open is KILN_IO", "[capi][vulkan][faults]") {
    TmpDir tmp;
    auto ctx = make_context();
    const fs::path copy = tmp.path / "digits.kiln";
    fs::copy_file(digits_model(), copy);
    auto good = open_model(ctx.get(), digits_model());
    std::vector<uint8_t> ref, px;
    REQUIRE(generate_digits(good.get(), {4}, 9, &ref) == KILN_OK);

    {  // Truncated: generate and forward refuse before reading a weight.
        auto m = open_model(ctx.get(), copy.string());
        fs::resize_file(copy, fs::file_size(copy) / 2);
        expect(generate_digits(m.get(), {4}, 9, &px), KILN_IO, "changed on disk");
        CHECK(std::string(kiln_last_error()).find("digits.kiln") != std::string::npos);
        kiln_forward_params fp = KILN_FORWARD_PARAMS_INIT;
        kiln_result* r = nullptr;
        expect(kiln_forward(m.get(), &fp, &r), KILN_IO, "changed on disk");
        // Restoring the file does not revive the handle (it may differ from what was opened); reopening does.
        fs::remove(copy);
        fs::copy_file(digits_model(), copy);
        expect(generate_digits(m.get(), {4}, 9, &px), KILN_IO, "changed on disk");
    }
    {  // Same size, other bytes: rewritten in place.
        auto m = open_model(ctx.get(), copy.string());
        {
            std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp((std::streamoff)fs::file_size(copy) - 8);
            f.write("\x7f\x7f\x7f\x7f", 4);
        }
        fs::last_write_time(copy, fs::last_write_time(copy) + std::chrono::seconds(2));  // coarse-mtime file systems
        expect(generate_digits(m.get(), {4}, 9, &px), KILN_IO, "rewritten");
    }
    {  // A diffusers folder: one of its weight files truncated while a text generation runs (at step 0, after
       // the parameters are checked and before the text encoder reads its weights).
        fs::copy(kiln::test::data_path("fixtures/pixart_pipeline"), tmp.path / "pixart", fs::copy_options::recursive);
        auto m = open_model(ctx.get(), (tmp.path / "pixart").string());
        fs::path weights;
        for (auto& e : fs::directory_iterator(tmp.path / "pixart/text_encoder"))
            if (e.path().extension() == ".safetensors") weights = e.path();
        REQUIRE(!weights.empty());
        auto truncate = [](int step, int, void* user) {
            if (step == 0) fs::resize_file(*static_cast<fs::path*>(user), 100);
            return 0;
        };
        expect(generate_text(m.get(), &px, truncate, &weights), KILN_IO, weights.filename().string());
    }
    // The context, and the models whose files did not change, are unaffected.
    REQUIRE(generate_digits(good.get(), {4}, 9, &px) == KILN_OK);
    CHECK(diff(px, ref) == 0);
    fs::remove(copy);
    fs::copy_file(digits_model(), copy);
    auto reopened = open_model(ctx.get(), copy.string());  // the restored file, opened anew
    REQUIRE(generate_digits(reopened.get(), {4}, 9, &px) == KILN_OK);
    CHECK(diff(px, ref) == 0);
    CHECK(kiln::vk::Context::validation_errors() == 0);
}
