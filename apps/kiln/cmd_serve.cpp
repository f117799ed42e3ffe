// `kiln serve`: one resident model behind OpenAI's images API (cpp-httplib). Routes, auth and the wait for a job;
// the queue and the generation are serve_worker.cpp's, the request parser serve_request.cpp's.
#include <httplib.h>
#ifdef __linux__  // peer_closed(): the sockets behind /proc/self/fd
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#endif

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/kiln/commands.h"
#include "apps/kiln/serve_worker.h"
#include "models/layouts/lora.h"
#include "runtime/core/error.h"

namespace kiln::app {

namespace {
using namespace serve;
using json = nlohmann::json;

struct ServeOptions {
    std::string model, host = "127.0.0.1", api_key;
    int port = 8080, device = -1, queue = 16;
    double timeout_s = 600;
    bool allow_remote = false;
    Limits limits;
    int step_delay_ms = 0;           // TestHooks::serve_step_delay_ms, read at start
    std::vector<std::string> loras;  // --lora FILE[:SCALE], as kiln generate's
    std::string lora_apply = "runtime";
    bool lora_allow_unmatched = false;
};

std::atomic<bool> g_stop{false};

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(error_json(e), "application/json");
}

ApiError api_error(int status, std::string message, std::string type, std::string code, std::string param = "") {
    ApiError e;
    e.status = status, e.message = std::move(message), e.type = std::move(type), e.code = std::move(code);
    e.param = std::move(param);
    return e;
}

// Equal strings in time independent of where they differ (the API key).
bool same_secret(const std::string& a, const std::string& b) {
    unsigned diff = a.size() != b.size();
    for (size_t i = 0; i < a.size(); ++i) diff |= (unsigned char)a[i] ^ (unsigned char)(i < b.size() ? b[i] : 0);
    return diff == 0;
}

// Whether the client of `req` closed its connection. cpp-httplib 0.11 shows a handler no socket, so this finds it
// among the process's descriptors by the connection's (local port, peer address, peer port), then peeks: recv()
// returning 0 is the peer's FIN. -1 is cached as "not found" (the answer is then "open"). Elsewhere than Linux the
// answer is always "open": a job whose client left runs to its end (or its --timeout), and its reply is dropped.
bool peer_closed(const httplib::Request& req, int& fd) {
#ifdef __linux__
    if (fd == -2) {
        fd = -1;
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
            int f = std::atoi(e.path().filename().c_str());
            sockaddr_storage local{}, peer{};
            socklen_t ll = sizeof local, pl = sizeof peer;
            if (getsockname(f, (sockaddr*)&local, &ll) != 0 || getpeername(f, (sockaddr*)&peer, &pl) != 0) continue;
            char ip[INET6_ADDRSTRLEN] = {};
            int lport = 0, pport = 0;
            if (peer.ss_family == AF_INET) {
                auto* p = (sockaddr_in*)&peer;
                inet_ntop(AF_INET, &p->sin_addr, ip, sizeof ip);
                pport = ntohs(p->sin_port), lport = ntohs(((sockaddr_in*)&local)->sin_port);
            } else if (peer.ss_family == AF_INET6) {
                auto* p = (sockaddr_in6*)&peer;
                inet_ntop(AF_INET6, &p->sin6_addr, ip, sizeof ip);
                pport = ntohs(p->sin6_port), lport = ntohs(((sockaddr_in6*)&local)->sin6_port);
            }
            if (lport == req.local_port && pport == req.remote_port && req.remote_addr == ip) {
                fd = f;
                break;
            }
        }
    }
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
#else
    (void)req, (void)fd;
    return false;
#endif
}

// Waits up to `slice` for the job to progress; past the deadline a job still queued is withdrawn and answered 504.
void wait_slice(Worker& w, const std::shared_ptr<Job>& job, std::chrono::milliseconds slice, int last_step) {
    {
        std::unique_lock<std::mutex> lock(job->m);
        job->cv.wait_for(lock, slice, [&] { return job->done || job->step != last_step; });
        if (job->done || Clock::now() < job->deadline) return;
    }
    if (w.withdraw(job))
        finish(*job, 504,
               error_json(
                   api_error(504, "the request passed its deadline while queued (--timeout)", "timeout", "timeout")));
}

// "stream": true: server-sent events (docs/serve.md): `queued` with the position, `progress` per step, then one
// `done` carrying the whole answer or one `error` carrying the error object. A failed write cancels the job.
bool stream_events(Worker& w, const std::shared_ptr<Job>& job, httplib::DataSink& sink) {
    auto send = [&](const char* event, const std::string& data) {
        std::string s = std::string("event: ") + event + "\ndata: " + data + "\n\n";
        return sink.write(s.data(), s.size());
    };
    int last_step = -1;
    size_t last_pos = (size_t)-1;
    for (;;) {
        wait_slice(w, job, std::chrono::milliseconds(500), last_step);
        std::unique_lock<std::mutex> lock(job->m);
        if (job->done) {
            const bool ok = job->status == 200;
            std::string body = job->body;
            lock.unlock();
            if (!send(ok ? "done" : "error", body)) return false;
            sink.done();
            return true;
        }
        const int step = job->step, total = job->total;
        const bool started = job->started;
        lock.unlock();
        bool written = true;
        if (step != last_step) {
            written = send("progress", json{{"step", step}, {"total", total}}.dump());
            last_step = step;
        } else if (!started) {
            const size_t pos = w.position(job);
            written = pos != last_pos ? send("queued", json{{"position", pos}}.dump()) : sink.write(":\n\n", 3);
            last_pos = pos;
        } else {
            written = sink.write(":\n\n", 3);  // a comment: keeps proxies open, and finds a closed client
        }
        if (!written) {
            job->cancel = true;
            return false;
        }
    }
}

std::string model_id(const std::string& path) {
    if (path.rfind("synthetic:", 0) == 0) return path.substr(10);
    std::filesystem::path p(path);
    while (!p.empty() && !p.has_filename()) p = p.parent_path();
    return p.stem().string();
}

ModelFacts load_facts(kiln_model* m, const std::string& path) {
    ModelFacts f;
    f.id = model_id(path);
    capi_check(kiln_model_get_info(m, &f.info));
    for (int i = 0; i < f.info.class_count; ++i) {
        int id = 0;
        const char* name = nullptr;
        capi_check(kiln_model_class_label(m, i, &id, &name));
        f.labels.emplace_back(id, name ? name : "");
    }
    return f;
}

// DiT: the prompt names a class label, by name (any case) or by id; -1 if none.
int find_label(const ModelFacts& f, const std::string& prompt) {
    auto lower = [](std::string s) {
        for (char& c : s) c = (char)std::tolower((unsigned char)c);
        return s;
    };
    const std::string p = lower(prompt);
    for (auto& [id, name] : f.labels)
        if (!name.empty() && lower(name) == p) return id;
    if (p.empty() || p.size() > 9 || p.find_first_not_of("0123456789") != std::string::npos) return -1;
    const int id = std::stoi(p);
    for (auto& l : f.labels)
        if (l.first == id) return id;
    return -1;
}

json models_json(const ModelFacts& f) {
    const bool labels = f.info.kind == KILN_MODEL_CLASS_LABELS;
    json kiln = {{"pipeline", f.info.pipeline ? f.info.pipeline : ""},
                 {"kind", labels ? "class_labels" : "text"},
                 {"width", f.info.default_width},
                 {"height", f.info.default_height}};
    if (labels) {
        kiln["class_labels"] = json::array();
        for (auto& [id, name] : f.labels) kiln["class_labels"].push_back({{"id", id}, {"name", name}});
    }
    json model = {{"id", f.id}, {"object", "model"}, {"created", 0}, {"owned_by", "kiln"}, {"kiln", kiln}};
    return {{"object", "list"}, {"data", json::array({model})}};
}

void handle_generation(const ServeOptions& o, Worker& w, const httplib::Request& req, httplib::Response& res) {
    auto job = std::make_shared<Job>();
    job->step_delay_ms = o.step_delay_ms;
    ApiError e;
    if (!parse_image_request(req.body, o.limits, &job->req, &e)) return send_error(res, e);
    const ModelFacts& f = w.facts();
    if (!job->req.model.empty() && job->req.model != f.id)
        return send_error(res, api_error(404,
                                         "model '" + job->req.model + "' is not loaded; this server serves '" + f.id +
                                             "' (GET /v1/models)",
                                         "invalid_request_error", "model_not_found", "model"));
    if (f.info.kind == KILN_MODEL_CLASS_LABELS && (job->label = find_label(f, job->req.prompt)) < 0)
        return send_error(res, api_error(400,
                                         "the prompt names no class label of '" + f.id +
                                             "': give a label's name or id (GET /v1/models lists them)",
                                         "invalid_request_error", "unknown_class_label", "prompt"));
    if (!job->req.lora_scales.empty()) {
        const ServeLoras& l = f.loras;
        std::string why;
        if (l.paths.empty())
            why = "this server has no LoRAs (kiln serve --lora)";
        else if (job->req.lora_scales.size() != l.paths.size())
            why = std::to_string(job->req.lora_scales.size()) + " LoRA scales given, the server has " +
                  std::to_string(l.paths.size()) + " LoRA(s)";
        else if (l.apply == KILN_LORA_APPLY_MERGE)
            why = "the server's LoRAs are merged into the weights (--lora-apply merge): their scales are baked";
        if (!why.empty())
            return send_error(
                res, api_error(400, "'lora_scales': " + why, "invalid_request_error", "invalid_value", "lora_scales"));
    }
    job->deadline = Clock::now() + std::chrono::milliseconds((int64_t)(o.timeout_s * 1000));
    if (!w.submit(job)) {
        res.set_header("Retry-After", "1");
        return send_error(res, api_error(429, "the queue is full (" + std::to_string(o.queue) + " requests waiting)",
                                         "rate_limit_error", "queue_full"));
    }
    if (job->req.stream) {
        res.set_chunked_content_provider(
            "text/event-stream", [&w, job](size_t, httplib::DataSink& sink) { return stream_events(w, job, sink); },
            [job](bool ok) {
                if (!ok) job->cancel = true;
            });
        return;
    }
    int fd = -2;
    for (int last = -1;;) {
        wait_slice(w, job, std::chrono::milliseconds(100), last);
        std::lock_guard<std::mutex> lock(job->m);
        if (job->done) break;
        last = job->step;
        if (!job->cancel && peer_closed(req, fd)) job->cancel = true;  // the worker stops at the next step
        if (job->cancel && !job->started && w.withdraw(job)) {
            std::fprintf(stderr, "kiln serve: cancelled while queued (client closed)\n");
            job->status = 499, job->done = true;
            break;
        }
    }
    res.status = job->status;
    res.set_content(job->body, "application/json");
}

void add_routes(httplib::Server& svr, const ServeOptions& o, Worker& w) {
    svr.set_pre_routing_handler([&o](const httplib::Request& req, httplib::Response& res) {
        if (o.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
        if (same_secret(req.get_header_value("Authorization"), "Bearer " + o.api_key))
            return httplib::Server::HandlerResponse::Unhandled;
        res.set_header("WWW-Authenticate", "Bearer");
        send_error(res, api_error(401, "a valid API key is required: Authorization: Bearer KEY",
                                  "invalid_request_error", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    });
    // Answers cpp-httplib makes itself (no route: 404; a body over the limit: 413) get the same error object.
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        ApiError e = api_error(res.status, "", "invalid_request_error", "");
        if (res.status == 404)
            e.message = "no route " + req.method + " " + req.path, e.code = "unknown_route";
        else if (res.status == 413)
            e.message = "the request body is too large", e.code = "body_too_large";
        else
            e.message = "HTTP " + std::to_string(res.status);
        send_error(res, e);
    });
    svr.Get("/health", [&w](const httplib::Request&, httplib::Response& res) {
        json j = {{"status", "ok"}, {"model", w.facts().id}, {"queued", w.queued()}, {"busy", w.busy()}};
        res.set_content(j.dump(), "application/json");
    });
    svr.Get("/v1/models", [&w](const httplib::Request&, httplib::Response& res) {
        res.set_content(models_json(w.facts()).dump(), "application/json");
    });
    svr.Post("/v1/images/generations",
             [&o, &w](const httplib::Request& req, httplib::Response& res) { handle_generation(o, w, req, res); });
}

// --lora, --lora-apply, --lora-allow-unmatched as kiln generate parses them.
ServeLoras parse_loras(const ServeOptions& o) {
    ServeLoras l;
    for (const std::string& a : o.loras) {
        auto [path, scale] = layouts::parse_lora_arg(a);
        l.paths.push_back(path), l.scales.push_back(scale);
    }
    KILN_CHECK(o.lora_apply == "runtime" || o.lora_apply == "merge", "--lora-apply ", o.lora_apply,
               ": runtime or merge");
    l.apply = o.lora_apply == "merge" ? KILN_LORA_APPLY_MERGE : KILN_LORA_APPLY_RUNTIME;
    l.allow_unmatched = o.lora_allow_unmatched;
    return l;
}

// The LoRAs read and checked against the model before the server listens: a size query (nothing generated) with
// an empty request's parameters, which the C API refuses with one line for a bad file or a class-label model.
void check_loras(kiln_model* m, const ModelFacts& f) {
    if (f.loras.paths.empty()) return;
    const char* prompt = nullptr;
    std::vector<kiln_lora> loras;
    const int label = f.labels.empty() ? 0 : f.labels[0].first;
    const ImageRequest none;  // outlives p (its prompt)
    kiln_generate_params p = generate_params(f, none, &label, &prompt, loras);
    kiln_image img = KILN_IMAGE_INIT;
    capi_check(kiln_generate(m, &p, &img));
}

void run_serve(const ServeOptions& o) {
    KILN_CHECK(is_loopback(o.host) || !o.api_key.empty() || o.allow_remote, "--host ", o.host,
               " is not a loopback address: give --api-key KEY, or --allow-remote to serve it without one");
    KILN_CHECK(o.queue >= 1 && o.queue <= 1024, "--queue ", o.queue, ": 1 .. 1024");
    // Finite and at most a year: the deadline is a steady_clock time point in milliseconds.
    KILN_CHECK(std::isfinite(o.timeout_s) && o.timeout_s > 0 && o.timeout_s <= 365 * 86400.0, "--timeout is ",
               o.timeout_s, ": seconds, in (0, 31536000]");
    const std::string path = o.model.empty() ? default_model() : o.model;
    ContextPtr ctx = open_context(o.device);
    ModelPtr model = open_model(ctx.get(), path);
    ModelFacts facts = load_facts(model.get(), path);
    facts.loras = parse_loras(o);
    check_loras(model.get(), facts);
    Worker worker(model.get(), std::move(facts), (size_t)o.queue);
    httplib::Server svr;
    // Handler threads: the queue's waiters, the running job, and a few for /health, 429s and idle keep-alives.
    const size_t threads = (size_t)o.queue + 8;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    svr.set_payload_max_length(o.limits.max_body);
    add_routes(svr, o, worker);
    const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
    KILN_CHECK(port > 0, "cannot listen on ", o.host, ":", o.port, " (in use, or not an address of this machine)");
    // The first line on stdout says where it listens (tests read the port from it when --port 0).
    std::printf("kiln serve: listening on http://%s:%d (model %s, %s)\n", o.host.c_str(), port,
                worker.facts().id.c_str(), worker.facts().info.pipeline);
    std::fflush(stdout);
    std::signal(SIGINT, [](int) { g_stop = true; });
    std::signal(SIGTERM, [](int) { g_stop = true; });
    std::thread stopper([&svr] {
        while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        svr.stop();
    });
    svr.listen_after_bind();
    g_stop = true;
    stopper.join();
}
}  // namespace

Run add_serve(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    app.add_option("--model", o->model, "The model kept resident (default: the built-in dit-digits)");
    app.add_option("--host", o->host, "Address to bind (default 127.0.0.1; another needs --api-key or --allow-remote)");
    app.add_option("--port", o->port, "Port (default 8080; 0: a free one, printed on the first line)");
    app.add_option("--api-key", o->api_key, "Answer 401 to requests without 'Authorization: Bearer KEY'");
    app.add_flag("--allow-remote", o->allow_remote, "Serve a non-loopback --host without --api-key");
    app.add_option("--queue", o->queue, "Requests that may wait; one more answers 429 (default 16)");
    app.add_option("--timeout", o->timeout_s, "Seconds a request may take, queued and running; then 504 (default 600)");
    app.add_option("--device", o->device, "Vulkan device index (default: KILN_DEVICE or the best)");
    app.add_option("--max-n", o->limits.max_n, "Most images per request (default 8)");
    app.add_option("--max-size", o->limits.max_side, "Largest width or height (default 2048)");
    app.add_option("--max-steps", o->limits.max_steps, "Most steps (default 200)");
    app.add_option("--lora", o->loras,
                   "SD3, Flux: a LoRA on every request, FILE[:SCALE] (repeatable; as kiln generate --lora). Read and "
                   "checked at start; a request's \"lora_scales\": [s1, ...] replaces the scales (runtime only)");
    app.add_option("--lora-apply", o->lora_apply,
                   "How --lora is applied: runtime (the default: a side path, scales per request) or merge (folded "
                   "into the weights as the first request loads them; no per-step cost, scales fixed)");
    app.add_flag("--lora-allow-unmatched", o->lora_allow_unmatched,
                 "LoRA keys that match no module of the model are a warning instead of an error");
    app.footer(
        "Endpoints: POST /v1/images/generations (OpenAI's images API; Kiln's seed, steps, guidance_scale, "
        "negative_prompt, scheduler, stream, lora_scales), GET /v1/models, GET /health. See docs/serve.md.\n"
        "Example: kiln serve --port 8080 &  curl -s localhost:8080/v1/images/generations -d '{\"prompt\":\"7\"}'");
    return [o] {
        o->step_delay_ms = settings_from_env().test.serve_step_delay_ms;  // the environment, read at this edge
        run_serve(*o);
    };
}

}  // namespace kiln::app
