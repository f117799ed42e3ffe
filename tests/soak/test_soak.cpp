// Soak test (opt-in: -DKILN_SOAK=ON, then ctest -L soak): 200 generations in one process with the built-in digits
// model through the C API, with mixed labels, steps, guidance, seeds, schedulers and JIT modes. After a warm-up that
// runs every parameter set once (so every pipeline, JIT recording and cache exists), host RSS and device memory
// must not grow (device memory: none left between generations, and the same peak each time a parameter set
// repeats), and a repeated parameter set must give the same bytes.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "runtime/vulkan/memory.h"
#include "tests/capi/capi_test.h"

using namespace kiln::capi_test;

namespace {

struct ParamSet {
    std::vector<int> labels;
    int steps;
    double guidance;
    uint64_t seed;
    const char* scheduler;
    kiln_jit_mode mode;
};

uint64_t rss_bytes() {
    std::ifstream f("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    f >> size >> resident;
    return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

constexpr int kGenerations = 200;
constexpr int kSets = 40;  // each set runs 5 times: the first 40 generations are the warm-up
// Host slack after the warm-up: malloc arenas and the driver's (lavapipe's) pools settle in steps of a few pages to
// a MiB; 4 MiB over 160 generations still catches any leak of 26 KiB or more per generation (one 32x32 RGBA image
// and its latents). Device memory is allocated in whole blocks (>= 32 MiB), so any growth is a block: no slack.
constexpr uint64_t kRssSlack = 4ull << 20;

// Device memory is freed between generations, so it is sampled in the progress callback (after each step).
int sample_device(int, int, void* user) {
    auto* peak = static_cast<uint64_t*>(user);
    *peak = std::max(*peak, kiln::vk::Allocator::process_bytes());
    return 0;
}

}  // namespace

TEST_CASE("soak: 200 generations, memory flat, same seed same bytes", "[soak]") {
    auto ctx = make_context();
    auto model = open_model(ctx.get(), digits_model());
    kiln_model_info info = KILN_MODEL_INFO_INIT;
    REQUIRE(kiln_model_get_info(model.get(), &info) == KILN_OK);
    REQUIRE(info.class_count > 0);

    std::mt19937_64 rng(20261122);
    const char* schedulers[] = {"ddim", "dpm", "euler"};
    const kiln_jit_mode modes[] = {KILN_JIT_EAGER, KILN_JIT_FULL, KILN_JIT_REGIONAL};
    const double guidances[] = {1.0, 2.5, 4.0};
    std::vector<ParamSet> sets;
    for (int i = 0; i < kSets; ++i) {
        ParamSet p;
        const int n = 1 + (int)(rng() % 3);
        for (int k = 0; k < n; ++k) p.labels.push_back((int)(rng() % (uint64_t)info.class_count));
        p.steps = 5 + (int)(rng() % 21);  // 5 .. 25
        p.guidance = guidances[rng() % 3];
        p.seed = rng();
        p.scheduler = schedulers[i % 3];
        p.mode = modes[(i / 3) % 3];
        sets.push_back(p);
    }

    std::vector<std::vector<uint8_t>> first(kSets);
    std::vector<uint64_t> first_peak(kSets);
    uint64_t rss_warm = 0, dev_warm = 0, rss_max = 0, dev_max = 0, dev_peak_max = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int g = 0; g < kGenerations; ++g) {
        const ParamSet& s = sets[(size_t)(g % kSets)];
        kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
        p.class_labels = s.labels.data();
        p.class_label_count = (int)s.labels.size();
        p.steps = s.steps;
        p.guidance = s.guidance;
        p.seed = s.seed;
        p.scheduler = s.scheduler;
        p.jit_mode = s.mode;
        uint64_t dev_peak = 0;
        p.progress = sample_device;
        p.progress_user = &dev_peak;
        kiln_image img = KILN_IMAGE_INIT;
        img.format = KILN_PIXELS_RGBA8;
        REQUIRE(kiln_generate(model.get(), &p, &img) == KILN_OK);
        std::vector<uint8_t> pixels(img.required_bytes);
        img.data = pixels.data();
        img.capacity = pixels.size();
        kiln_status st = kiln_generate(model.get(), &p, &img);
        INFO("generation " << g << ": " << kiln_last_error());
        REQUIRE(st == KILN_OK);
        REQUIRE(dev_peak > 0);
        if (g < kSets) {
            first[(size_t)g] = std::move(pixels);
            first_peak[(size_t)g] = dev_peak;
        } else {
            REQUIRE(pixels == first[(size_t)(g % kSets)]);         // identical parameters and seed: identical bytes
            REQUIRE(dev_peak == first_peak[(size_t)(g % kSets)]);  // same work, same device memory while running
        }

        const uint64_t rss = rss_bytes(), dev = kiln::vk::Allocator::process_bytes();
        dev_peak_max = std::max(dev_peak_max, dev_peak);
        if (g == kSets - 1) rss_warm = rss, dev_warm = dev;
        if (g >= kSets) rss_max = std::max(rss_max, rss), dev_max = std::max(dev_max, dev);
        if (g % 20 == 19 || g == kSets - 1)
            std::printf("soak: generation %3d  rss %.1f MiB  device %.1f MiB (%.1f MiB while generating)\n", g + 1,
                        rss / 1048576.0, dev / 1048576.0, dev_peak / 1048576.0);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "soak: %d generations in %.1f s; after warm-up rss %.1f -> max %.1f MiB (slack %.0f), device %.1f -> "
        "max %.1f MiB (peak while generating %.1f MiB)\n",
        kGenerations, secs, rss_warm / 1048576.0, rss_max / 1048576.0, kRssSlack / 1048576.0, dev_warm / 1048576.0,
        dev_max / 1048576.0, dev_peak_max / 1048576.0);
    CHECK(rss_max <= rss_warm + kRssSlack);
    CHECK(dev_max <= dev_warm);
}
