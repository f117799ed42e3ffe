// keep_transformer as `kiln serve` uses it: requests of the same shapes reuse the resident transformer; another size
// replaces it (one at a time: the device memory after A, B, A equals that after A); a cancelled call leaves it
// usable; LoRA files are read once while unchanged on disk and read again (and the transformer rebuilt) when a file
// changes. Images are compared bit for bit with a fresh model's: the same graph, plan, weights and inputs.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lib/capi_internal.h"
#include "runtime/core/safetensors.h"
#include "runtime/vulkan/memory.h"
#include "tests/capi/capi_test.h"
#include "tests/support/test_support.h"

using namespace kiln::capi_test;
namespace fs = std::filesystem;

namespace {
struct Call {
    int size = 32, steps = 2, keep = 1;
    std::vector<kiln_lora> loras;
    kiln_progress_fn progress = nullptr;
    void* user = nullptr;
};

// A Flux fixture call (seeded noise); the status, the pixels (RGB f32) and whether the transformer was reused.
kiln_status flux_image(kiln_model* m, const Call& c, std::vector<float>& px, int& reused) {
    const char* prompts[1] = {"a castle on a hill at sunset"};
    kiln_generate_params q = KILN_GENERATE_PARAMS_INIT;
    q.prompts = prompts;
    q.prompt_count = 1;
    q.steps = c.steps;
    q.width = q.height = c.size;
    q.seed = 11;
    q.keep_transformer = c.keep;
    q.loras = c.loras.empty() ? nullptr : c.loras.data();
    q.lora_count = (int)c.loras.size();
    q.progress = c.progress, q.progress_user = c.user;
    kiln_generate_stats st = KILN_GENERATE_STATS_INIT;
    q.stats = &st;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGB_F32;
    px.assign((size_t)c.size * c.size * 3, 0.f);
    img.data = px.data();
    img.capacity = px.size() * sizeof(float);
    const kiln_status s = kiln_generate(m, &q, &img);
    reused = st.transformer_reused;
    return s;
}

std::vector<float> ok_image(kiln_model* m, const Call& c, int* reused = nullptr) {
    std::vector<float> px;
    int r = -1;
    INFO(kiln_last_error());
    REQUIRE(flux_image(m, c, px, r) == KILN_OK);
    if (reused) *reused = r;
    return px;
}

// Negates every lora_B value in place (the sign bit of each f32/f16/bf16): the same size, another delta (-B A).
void negate_lora_b(const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), (std::streamsize)n);
    const auto j = nlohmann::json::parse(header);
    int negated = 0;
    for (const auto& [name, t] : j.items()) {
        if (name == "__metadata__" || name.find("lora_B") == std::string::npos) continue;
        const std::string dt = t["dtype"];
        const size_t width = dt == "F32" ? 4 : 2, b = t["data_offsets"][0], e = t["data_offsets"][1];
        std::vector<char> bytes(e - b);
        f.seekg((std::streamoff)(8 + n + b));
        f.read(bytes.data(), (std::streamsize)bytes.size());
        for (size_t i = width - 1; i < bytes.size(); i += width) bytes[i] = (char)(bytes[i] ^ 0x80);
        f.seekp((std::streamoff)(8 + n + b));
        f.write(bytes.data(), (std::streamsize)bytes.size());
        ++negated;
    }
    REQUIRE(negated > 0);
}

int cancel_at_step_1(int step, int, void*) { return step >= 1 ? 1 : 0; }
}  // namespace

TEST_CASE("C API: keep_transformer reuses the transformer for the same shapes, one resident at a time",
          "[capi][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/flux_pipeline");
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    int reused = -1;
    Call a, b;
    b.size = 48;
    const auto a1 = ok_image(m.get(), a, &reused);
    CHECK(reused == 0);
    const uint64_t bytes_a = kiln::vk::Allocator::process_bytes();
    CHECK(ok_image(m.get(), a, &reused) == a1);
    CHECK(reused == 1);
    // Another size replaces it (the old one is freed before the new one is planned), then A is planned again: the
    // same device memory as after the first A, so nothing of B's, nor of A's first plan, stays.
    ok_image(m.get(), b, &reused);
    CHECK(reused == 0);
    CHECK(ok_image(m.get(), a, &reused) == a1);
    CHECK(reused == 0);
    CHECK(kiln::vk::Allocator::process_bytes() == bytes_a);
    // Many reuses leave the device memory as it was. (The device loop's buffers are the call's own; this fixture's
    // are a few KiB, inside the executor's block slack, so tests/models/test_step_program.cpp checks that directly.)
    for (int i = 0; i < 3; ++i) ok_image(m.get(), a, &reused);
    CHECK(reused == 1);
    CHECK(kiln::vk::Allocator::process_bytes() == bytes_a);

    // A call cancelled at its first step boundary leaves the resident transformer usable: the next call reuses it
    // and gives the same image.
    Call c = a;
    c.progress = cancel_at_step_1;
    std::vector<float> px;
    CHECK(flux_image(m.get(), c, px, reused) == KILN_CANCELLED);
    CHECK(ok_image(m.get(), a, &reused) == a1);
    CHECK(reused == 1);
    // A refused call (a bad LoRA path) changes nothing either.
    Call bad = a;
    bad.loras = {{"/nonexistent/lora.safetensors", 1.0}};
    CHECK(flux_image(m.get(), bad, px, reused) != KILN_OK);
    CHECK(ok_image(m.get(), a, &reused) == a1);
    CHECK(reused == 1);

    auto fresh = open_model(ctx.get(), dir);
    Call once = a;
    once.keep = 0;
    CHECK(ok_image(fresh.get(), once) == a1);  // bit for bit
}

TEST_CASE("C API: a resident transformer reads its LoRA files again only when they change", "[capi][lora][vulkan]") {
    const std::string dir = kiln::test::data_path("fixtures/flux_pipeline");
    kiln::test::TempDir tmp("kiln_resident_lora");
    const std::string lora = tmp / "peft.safetensors";
    fs::copy_file(kiln::test::data_path("fixtures/flux_lora/lora_peft.safetensors"), lora);
    auto ctx = make_context();
    auto m = open_model(ctx.get(), dir);
    auto reads = [&] { return m->lora_files->reads(); };
    int reused = -1;
    Call a;
    a.loras = {{lora.c_str(), 0.7}};
    const auto a1 = ok_image(m.get(), a, &reused);
    CHECK(reused == 0);
    CHECK(reads() == 1);
    CHECK(ok_image(m.get(), a, &reused) == a1);
    CHECK(reused == 1);
    CHECK(reads() == 1);
    // Other runtime scales: no read, the same transformer, and a fresh model's image at those scales.
    Call a2 = a;
    a2.loras[0].scale = -0.5;
    const auto s2 = ok_image(m.get(), a2, &reused);
    CHECK(reused == 1);
    CHECK(reads() == 1);
    CHECK(s2 != a1);
    auto fresh = open_model(ctx.get(), dir);
    Call once = a2;
    once.keep = 0;
    CHECK(ok_image(fresh.get(), once) == s2);

    // The file changes on disk (same size; its mtime moved on, so a coarse clock cannot hide it): read again, the
    // transformer built again, and the image a fresh model's with the new file.
    const auto mtime = fs::last_write_time(lora);
    negate_lora_b(lora);
    fs::last_write_time(lora, mtime + std::chrono::seconds(2));
    const auto b1 = ok_image(m.get(), a, &reused);
    CHECK(reused == 0);
    CHECK(reads() == 2);
    CHECK(b1 != a1);
    auto fresh2 = open_model(ctx.get(), dir);
    once = a;
    once.keep = 0;
    CHECK(ok_image(fresh2.get(), once) == b1);
    CHECK(ok_image(m.get(), a, &reused) == b1);
    CHECK(reused == 1);
    CHECK(reads() == 2);
}
