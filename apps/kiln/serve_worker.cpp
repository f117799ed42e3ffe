#include "apps/kiln/serve_worker.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "apps/kiln/generate_params.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // the static writers the server does not call
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_image_write.h>

#include <thread>
#pragma GCC diagnostic pop

namespace kiln::app::serve {

namespace {
using json = nlohmann::json;

std::string base64(const uint8_t* p, size_t n) {
    static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out += k[v >> 18 & 63];
        out += k[v >> 12 & 63];
        out += i + 1 < n ? k[v >> 6 & 63] : '=';
        out += i + 2 < n ? k[v & 63] : '=';
    }
    return out;
}

// One RGBA8 image as the PNG bytes `kiln generate` writes for it, less its tEXt chunks: RGB, stb's encoder.
std::string png_base64(const uint8_t* rgba, int w, int h) {
    std::vector<uint8_t> rgb((size_t)w * h * 3);
    for (size_t i = 0; i < (size_t)w * h; ++i)
        for (int c = 0; c < 3; ++c) rgb[i * 3 + c] = rgba[i * 4 + c];
    int len = 0;
    unsigned char* png = stbi_write_png_to_mem(rgb.data(), w * 3, w, h, 3, &len);
    if (!png) return "";
    std::string b64 = base64(png, (size_t)len);
    STBIW_FREE(png);
    return b64;
}

std::string error_body(int status, const std::string& message, const std::string& type, const std::string& code) {
    ApiError e;
    e.status = status;
    e.message = message;
    e.type = type;
    e.code = code;
    return error_json(e);
}

// Step 0 comes before the first step, then 1 .. total. Non-zero stops kiln_generate at the next step boundary.
int on_progress(int step, int total, void* user) {
    Job& job = *static_cast<Job*>(user);
    if (job.step_delay_ms > 0 && step > 0) std::this_thread::sleep_for(std::chrono::milliseconds(job.step_delay_ms));
    bool late = Clock::now() > job.deadline;
    {
        std::lock_guard<std::mutex> lock(job.m);
        job.step = step, job.total = total;
        if (late) job.timed_out = true;
    }
    job.cv.notify_all();
    return late || job.cancel ? 1 : 0;
}
}  // namespace

kiln_generate_params generate_params(const ModelFacts& f, const ImageRequest& r, const int* label, const char** prompt,
                                     std::vector<kiln_lora>& loras) {
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    if (f.info.kind == KILN_MODEL_CLASS_LABELS) {
        p.class_labels = label, p.class_label_count = 1;
    } else {
        *prompt = r.prompt.c_str();
        p.prompts = prompt, p.prompt_count = 1;
        // Resident: the next request skips planning and uploading the encoders, and one of the same shapes skips
        // planning, recording and uploading the transformer (the C API replaces it when the shapes change: one at a
        // time). Unchanged LoRA files are not read again.
        p.keep_encoders = 1;
        p.keep_transformer = 1;
    }
    loras.clear();
    const ServeLoras& l = f.loras;
    for (size_t i = 0; i < l.paths.size(); ++i)
        loras.push_back({l.paths[i].c_str(), r.lora_scales.empty() ? l.scales[i] : r.lora_scales[i]});
    p.loras = loras.empty() ? nullptr : loras.data();
    p.lora_count = (int)loras.size();
    p.lora_apply = l.apply;
    p.lora_allow_unmatched = l.allow_unmatched;
    if (!r.negative_prompt.empty()) p.negative_prompt = r.negative_prompt.c_str();
    if (!r.scheduler.empty()) p.scheduler = r.scheduler.c_str();
    p.width = r.width, p.height = r.height, p.steps = r.steps, p.guidance = r.guidance_scale, p.seed = r.seed;
    p.guidance_exact = r.guidance_given;
    p.images_per_prompt = r.n;
    p.text_encoder_layers = r.text_encoder_layers.empty() ? nullptr : r.text_encoder_layers.data();
    p.text_encoder_layer_count = (int)r.text_encoder_layers.size();
    p.cfg_truncation = cfg_truncation_param(r.cfg_truncation);
    p.cfg_normalization = r.cfg_normalization;
    return p;
}

void finish(Job& job, int status, std::string body) {
    {
        std::lock_guard<std::mutex> lock(job.m);
        job.status = status, job.body = std::move(body), job.done = true;
    }
    job.cv.notify_all();
}

Worker::Worker(kiln_model* model, ModelFacts facts, size_t max_queued)
    : model_(model), facts_(std::move(facts)), max_queued_(max_queued), thread_([this] { loop(); }) {}

Worker::~Worker() {
    std::deque<std::shared_ptr<Job>> left;
    {
        std::lock_guard<std::mutex> lock(m_);
        stopping_ = true;
        left.swap(queue_);
    }
    cv_.notify_all();
    // Outside m_: a handler holds its job's mutex while it takes m_ (withdraw), never the other way round.
    for (auto& j : left) finish(*j, 503, error_body(503, "the server is shutting down", "server_error", ""));
    thread_.join();
}

bool Worker::submit(const std::shared_ptr<Job>& job) {
    {
        std::lock_guard<std::mutex> lock(m_);
        if (stopping_ || queue_.size() >= max_queued_) return false;
        queue_.push_back(job);
    }
    cv_.notify_one();
    return true;
}

bool Worker::withdraw(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it == queue_.end()) return false;
    queue_.erase(it);
    return true;
}

size_t Worker::queued() {
    std::lock_guard<std::mutex> lock(m_);
    return queue_.size();
}

size_t Worker::position(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    return it == queue_.end() ? 0 : (size_t)(it - queue_.begin()) + 1;
}

void Worker::loop() {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock<std::mutex> lock(m_);
            cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;
            job = queue_.front();
            queue_.pop_front();
            busy_ = true;
        }
        {
            std::lock_guard<std::mutex> lock(job->m);
            job->started = true;
        }
        run(*job);
        busy_ = false;
    }
}

void Worker::run(Job& job) {
    const ImageRequest& r = job.req;
    if (job.cancel) {
        std::fprintf(stderr, "kiln serve: cancelled before it started (client closed)\n");
        return finish(job, 499, error_body(499, "the client closed the request", "cancelled", "cancelled"));
    }
    const char* prompt = nullptr;
    std::vector<kiln_lora> loras;
    kiln_generate_params p = generate_params(facts_, r, &job.label, &prompt, loras);
    p.progress = on_progress, p.progress_user = &job;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGBA8;
    // The size query checks the request against the model without generating: what it refuses is the client's.
    if (kiln_status s = kiln_generate(model_, &p, &img); s != KILN_OK)
        return finish(job, 400, error_body(400, kiln_last_error(), "invalid_request_error", kiln_status_name(s)));
    std::vector<uint8_t> pixels(img.required_bytes);
    img.data = pixels.data(), img.capacity = pixels.size();
    const auto t0 = Clock::now();
    kiln_generate_stats stats = KILN_GENERATE_STATS_INIT;
    p.stats = &stats;
    kiln_status s = kiln_generate(model_, &p, &img);
    if (s == KILN_CANCELLED)
        std::fprintf(stderr, "kiln serve: cancelled at step %d of %d (%s)\n", job.step, job.total,
                     job.timed_out ? "deadline passed" : "client closed");
    if (s == KILN_CANCELLED && job.timed_out)
        return finish(job, 504, error_body(504, "the request passed its deadline (--timeout)", "timeout", "timeout"));
    if (s == KILN_CANCELLED)
        return finish(job, 499, error_body(499, "the client closed the request", "cancelled", "cancelled"));
    if (s == KILN_INVALID_ARGUMENT || s == KILN_UNSUPPORTED || s == KILN_NOT_FOUND)
        return finish(job, 400, error_body(400, kiln_last_error(), "invalid_request_error", kiln_status_name(s)));
    if (s != KILN_OK) return finish(job, 500, error_body(500, kiln_last_error(), "server_error", kiln_status_name(s)));
    json data = json::array();
    const size_t per_image = (size_t)img.width * img.height * 4;
    for (int i = 0; i < img.count; ++i) {
        std::string b64 = png_base64(pixels.data() + i * per_image, img.width, img.height);
        if (b64.empty()) return finish(job, 500, error_body(500, "PNG encoding failed", "server_error", ""));
        data.push_back({{"b64_json", std::move(b64)}});
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    json answer = {{"created", (int64_t)std::time(nullptr)}, {"data", std::move(data)}};
    // Text models: whether the resident transformer was reused ("reused") or planned for this request ("planned").
    const char* transformer = facts_.info.kind == KILN_MODEL_CLASS_LABELS ? ""
                              : stats.transformer_reused                  ? ", transformer reused"
                                                                          : ", transformer planned";
    std::fprintf(stderr, "kiln serve: %d image(s) %dx%d, seed %llu, in %.0f ms%s\n", img.count, img.width, img.height,
                 (unsigned long long)r.seed, ms, transformer);
    finish(job, 200, answer.dump());
}

}  // namespace kiln::app::serve
