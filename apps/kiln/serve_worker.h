#pragma once
// `kiln serve`'s scheduler: one resident model, one worker thread, a bounded FIFO of jobs. HTTP handlers enqueue a
// job and wait on it; the worker runs each through the C API (kiln_generate), whose progress callback carries the
// job's cancellation (client gone, deadline passed) to the next step boundary.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "apps/kiln/serve_request.h"
#include "include/kiln.h"

namespace kiln::app::serve {

using Clock = std::chrono::steady_clock;

// The server's LoRAs (--lora FILE:SCALE, --lora-apply, --lora-allow-unmatched): every request runs with them; a
// request's "lora_scales" replaces `scales` (runtime LoRAs only: merged ones are baked into the weights).
struct ServeLoras {
    std::vector<std::string> paths;
    std::vector<double> scales;
    int apply = KILN_LORA_APPLY_RUNTIME;  // a kiln_lora_apply
    bool allow_unmatched = false;
};

// The resident model and what requests are checked against.
struct ModelFacts {
    std::string id;  // what GET /v1/models lists and "model" may name: the file's stem ("dit-digits")
    kiln_model_info info = KILN_MODEL_INFO_INIT;
    std::vector<std::pair<int, std::string>> labels;  // class-label models: (id, name)
    ServeLoras loras;
};

// The generate parameters of a request on the resident model, as the worker runs it (and the startup check, with
// an empty request, before the server listens). `prompt` and `loras` back the pointers; they outlive the params.
kiln_generate_params generate_params(const ModelFacts& f, const ImageRequest& r, const int* label, const char** prompt,
                                     std::vector<kiln_lora>& loras);

// One request. The handler owns it with the queue; `m` guards everything below it.
struct Job {
    ImageRequest req;
    int label = -1;  // class-label models: the id the prompt named
    Clock::time_point deadline;
    std::atomic<bool> cancel{false};  // the client went away: the progress callback stops the work
    int step_delay_ms = 0;            // TestHooks::serve_step_delay_ms: a pause after each step (tests)
    std::mutex m;
    std::condition_variable cv;
    bool started = false, done = false, timed_out = false;
    int step = -1, total = 0;  // the last progress callback
    int status = 0;            // done: the HTTP status, and `body` the JSON answer
    std::string body;
};

class Worker {
public:
    Worker(kiln_model* model, ModelFacts facts, size_t max_queued);
    ~Worker();  // finishes the running job, fails the queued ones (503)
    const ModelFacts& facts() const { return facts_; }
    // Queues a job; false when max_queued jobs already wait (the caller answers 429).
    bool submit(const std::shared_ptr<Job>& job);
    // Takes a job that has not started out of the queue (its deadline passed); false when it already started.
    bool withdraw(const std::shared_ptr<Job>& job);
    size_t queued();
    bool busy() const { return busy_; }
    // The jobs ahead of `job` in the queue (0 when it runs or is done).
    size_t position(const std::shared_ptr<Job>& job);

private:
    void loop();
    void run(Job& job);
    kiln_model* model_;
    ModelFacts facts_;
    size_t max_queued_;
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    bool stopping_ = false;
    std::atomic<bool> busy_{false};
    std::thread thread_;
};

// Marks a job done with `status` and `body`, waking its handler.
void finish(Job& job, int status, std::string body);

}  // namespace kiln::app::serve
