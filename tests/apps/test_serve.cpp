// `kiln serve` run as the binary on a loopback port the OS picks (--port 0): the error answers (400, 401, 404, 413,
// 429, 504), a client that goes away, server-sent events, 8 concurrent clients against their single-run twins, the
// text path on the SD3 fixture, and (opt-in, [.soak]) 200 requests with the server's memory flat.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/apps/cli_run.h"
#include "tests/support/qwen3_pipelines.h"
#include "tests/support/test_support.h"

using json = nlohmann::json;

namespace {
// A `kiln serve --port 0 ARGS` child; its stderr goes to a file. Stopped with SIGTERM (then SIGKILL) at scope exit.
struct Server {
    pid_t pid = -1;
    int port = 0;
    kiln::test::TempDir tmp{"kiln_serve"};
    // validation false: the child runs without the Vulkan validation layers (KILN_VALIDATION=0), whose own
    // object tracking grows with every request (the soak measures the server's memory, not the layer's).
    // step_delay_ms: KILN_TEST_SERVE_STEP_DELAY_MS, a pause after each step that keeps a job busy on any device.
    explicit Server(const std::vector<std::string>& args, bool validation = true, int step_delay_ms = 0) {
        int out[2];
        REQUIRE(pipe(out) == 0);
        const std::string err = tmp / "stderr.txt";
        pid = fork();
        if (pid == 0) {
            dup2(out[1], 1);
            if (!validation) setenv("KILN_VALIDATION", "0", 1);
            if (step_delay_ms > 0) setenv("KILN_TEST_SERVE_STEP_DELAY_MS", std::to_string(step_delay_ms).c_str(), 1);
            FILE* e = std::fopen(err.c_str(), "w");
            if (e) dup2(fileno(e), 2);
            std::vector<std::string> a = kiln::test::cli_argv("kiln");  // after KILN_TEST_RUNNER, when set
            for (const char* w : {"serve", "--port", "0"}) a.push_back(w);
            a.insert(a.end(), args.begin(), args.end());
            std::vector<char*> argv;
            for (auto& s : a) argv.push_back(s.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        close(out[1]);
        std::string line;  // "kiln serve: listening on http://127.0.0.1:PORT (...)"
        char c;
        while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
        close(out[0]);
        const size_t colon = line.rfind(':', line.find(" (model"));
        INFO("kiln serve said: " << line << "\n" << log());
        REQUIRE(colon != std::string::npos);
        port = std::atoi(line.c_str() + colon + 1);
        REQUIRE(port > 0);
    }
    ~Server() {
        kill(pid, SIGTERM);
        for (int i = 0; i < 100; ++i) {  // 10 s, then SIGKILL
            if (waitpid(pid, nullptr, WNOHANG) == pid) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
    std::string log() const {
        std::ifstream f(tmp / "stderr.txt");
        return std::string(std::istreambuf_iterator<char>(f), {});
    }
    httplib::Client client(double read_timeout_s = 120) const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout((time_t)read_timeout_s, (time_t)((read_timeout_s - (time_t)read_timeout_s) * 1e6));
        return c;
    }
    httplib::Result post(const json& body, const httplib::Headers& h = {}) const {
        return client().Post("/v1/images/generations", h, body.dump(), "application/json");
    }
    size_t rss_kb() const {
        std::ifstream f("/proc/" + std::to_string(pid) + "/status");
        for (std::string l; std::getline(f, l);)
            if (l.rfind("VmRSS:", 0) == 0) return std::stoul(l.substr(6));
        return 0;
    }
};

// The answer's error object: status, type and code checked, message non-empty.
void check_error(const httplib::Result& r, int status, const std::string& code) {
    REQUIRE(r);
    INFO(r->body);
    CHECK(r->status == status);
    json j = json::parse(r->body);
    REQUIRE(j.contains("error"));
    CHECK(!j["error"]["message"].get<std::string>().empty());
    CHECK(j["error"]["type"].is_string());
    CHECK(j["error"].contains("param"));
    CHECK(j["error"]["code"] == code);
}

// base64 (RFC 4648, '=' padded) to bytes.
std::string unbase64(const std::string& s) {
    std::string out;
    uint32_t v = 0;
    int bits = 0;
    for (char c : s) {
        int d = c >= 'A' && c <= 'Z'   ? c - 'A'
                : c >= 'a' && c <= 'z' ? c - 'a' + 26
                : c >= '0' && c <= '9' ? c - '0' + 52
                : c == '+'             ? 62
                : c == '/'             ? 63
                                       : -1;
        if (d < 0) continue;  // '=' padding
        v = v << 6 | (uint32_t)d, bits += 6;
        if (bits >= 8) bits -= 8, out += (char)(v >> bits & 0xff);
    }
    return out;
}

// A PNG without its tEXt chunks (kiln generate's settings): 8-byte signature, then length, type, data, CRC.
std::string without_text(const std::string& png) {
    std::string out = png.substr(0, 8);
    for (size_t at = 8; at + 12 <= png.size();) {
        const auto* p = reinterpret_cast<const unsigned char*>(png.data() + at);
        const size_t len = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
        if (png.compare(at + 4, 4, "tEXt") != 0) out += png.substr(at, 12 + len);
        at += 12 + len;
    }
    return out;
}

std::string image_of(const httplib::Result& r) {
    REQUIRE(r);
    INFO(r->body.substr(0, 400));
    REQUIRE(r->status == 200);
    json j = json::parse(r->body);
    REQUIRE(j["data"].size() == 1);
    return j["data"][0]["b64_json"];
}
}  // namespace

TEST_CASE("kiln serve: errors answer with OpenAI's error object", "[serve]") {
    Server s({"--api-key", "sekret"});
    const httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
    // 401: no key, a wrong key; /health needs none.
    check_error(s.post({{"prompt", "3"}}), 401, "invalid_api_key");
    check_error(s.post({{"prompt", "3"}}, {{"Authorization", "Bearer wrong"}}), 401, "invalid_api_key");
    auto health = s.client().Get("/health");
    REQUIRE(health);
    CHECK(health->status == 200);
    // 404: an unknown route, a model that is not loaded.
    check_error(s.client().Get("/v1/nothing", auth), 404, "unknown_route");
    check_error(s.post({{"prompt", "3"}, {"model", "sd3"}}, auth), 404, "model_not_found");
    // 400: malformed JSON, not an object, a wrong type, an unknown field, limits, a label the model lacks.
    auto raw = [&](const std::string& body) {
        return s.client().Post("/v1/images/generations", auth, body, "application/json");
    };
    check_error(raw("{\"prompt\": \"3\""), 400, "invalid_json");
    check_error(raw("[1, 2]"), 400, "invalid_json");
    check_error(raw(std::string(100, '[')), 400, "invalid_json");
    check_error(s.post({{"prompt", 3}}, auth), 400, "invalid_type");
    check_error(s.post({{"prompt", "3"}, {"n", "2"}}, auth), 400, "invalid_type");
    check_error(s.post({{"prompt", "3"}, {"colour", "red"}}, auth), 400, "unknown_parameter");
    check_error(s.post({{"n", 1}}, auth), 400, "missing_required_parameter");
    check_error(s.post({{"prompt", "3"}, {"n", 9}}, auth), 400, "invalid_value");
    check_error(s.post({{"prompt", "3"}, {"n", 0}}, auth), 400, "invalid_value");  // found by fuzz_serve_request
    check_error(s.post({{"prompt", "3"}, {"steps", -1}}, auth), 400, "invalid_value");
    check_error(s.post({{"prompt", "3"}, {"steps", 201}}, auth), 400, "invalid_value");
    check_error(s.post({{"prompt", "3"}, {"size", "4096x4096"}}, auth), 400, "invalid_value");
    check_error(s.post({{"prompt", "3"}, {"size", "32"}}, auth), 400, "invalid_value");
    check_error(s.post({{"prompt", std::string(5000, 'a')}}, auth), 400, "too_long");
    check_error(s.post({{"prompt", "3"}, {"response_format", "url"}}, auth), 400, "unsupported_value");
    check_error(s.post({{"prompt", "zebra"}}, auth), 400, "unknown_class_label");
    // The model refuses what it cannot make (DiT has one size): 400 with the C API's message, no crash.
    check_error(s.post({{"prompt", "3"}, {"size", "64x48"}}, auth), 400, "KILN_INVALID_ARGUMENT");
    // 413: a body over 64 KiB, refused before it is parsed.
    check_error(raw("{\"prompt\": \"" + std::string(70000, 'a') + "\"}"), 413, "body_too_large");
    // Still serving after all of that.
    CHECK(image_of(s.post({{"prompt", "3"}, {"steps", 2}}, auth)).size() > 100);
}

TEST_CASE("kiln serve: a request past its deadline answers 504", "[serve]") {
    // --timeout 1 ms: no device makes 8 images x 200 steps with CFG in that (the deadline is checked at each step
    // boundary, and while the request waits).
    Server s({"--timeout", "0.001"});
    check_error(s.post({{"prompt", "3"}, {"steps", 200}, {"n", 8}}), 504, "timeout");
    CHECK(s.log().find("deadline passed") != std::string::npos);
}

TEST_CASE("kiln serve: a full queue answers 429, a client that leaves cancels its work", "[serve]") {
    // 50 ms after each step (a test hook): a 20-step job takes at least 1 s on any device, however fast.
    Server s({"--queue", "1"}, true, 50);
    // One runs, one waits, the rest find the queue full: the first is busy while all four arrive.
    std::vector<std::thread> clients;
    std::vector<int> status(4, 0);
    for (int i = 0; i < 4; ++i)
        clients.emplace_back([&, i] {
            auto r = s.post({{"prompt", "1"}, {"steps", 20}, {"seed", i}});
            status[i] = r ? r->status : -1;
        });
    for (auto& t : clients) t.join();
    CHECK(std::count(status.begin(), status.end(), 429) >= 1);
    CHECK(std::count(status.begin(), status.end(), 200) >= 1);
    CHECK(std::count(status.begin(), status.end(), 200) + std::count(status.begin(), status.end(), 429) == 4);
    // A client that gives up after 0.3 s: the server stops the job at the next step boundary and says so.
    auto r =
        s.client(0.3).Post("/v1/images/generations", json{{"prompt", "2"}, {"steps", 20}}.dump(), "application/json");
    CHECK(!r);
    bool cancelled = false;
    for (int i = 0; i < 300 && !cancelled; ++i) {  // 30 s at most
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        cancelled = s.log().find("cancelled") != std::string::npos;
    }
    INFO(s.log());
    CHECK(cancelled);
}

TEST_CASE("kiln serve: progress as server-sent events", "[serve]") {
    Server s({});
    auto r = s.post({{"prompt", "5"}, {"steps", 4}, {"stream", true}});
    REQUIRE(r);
    REQUIRE(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == "text/event-stream");
    const std::string& b = r->body;
    INFO(b.substr(0, 600));
    CHECK(b.find("event: progress\ndata: {\"step\":4,\"total\":4}\n\n") != std::string::npos);
    const size_t done = b.find("event: done\ndata: ");
    REQUIRE(done != std::string::npos);
    json j = json::parse(b.substr(done + 18, b.find("\n\n", done) - done - 18));
    // The streamed image is the plain answer's.
    CHECK(j["data"][0]["b64_json"] == image_of(s.post({{"prompt", "5"}, {"steps", 4}})));
}

TEST_CASE("kiln serve: 8 clients, 32 requests, each image its single-run twin", "[serve]") {
    Server s({"--queue", "32"});
    auto body = [](int i) { return json{{"prompt", std::to_string(i % 10)}, {"seed", 100 + i}, {"steps", 8}}; };
    std::vector<std::string> got(32);
    std::vector<std::thread> clients;
    for (int c = 0; c < 8; ++c)
        clients.emplace_back([&, c] {
            for (int k = 0; k < 4; ++k) {
                auto r = s.post(body(c * 4 + k));
                if (r && r->status == 200) got[c * 4 + k] = json::parse(r->body)["data"][0]["b64_json"];
            }
        });
    for (auto& t : clients) t.join();
    for (int i = 0; i < 32; ++i) {
        INFO("request " << i);
        REQUIRE(!got[i].empty());
        CHECK(got[i] == image_of(s.post(body(i))));  // the same request alone
    }
    CHECK(got[0] != got[10]);  // same label, other seed: not one cached image
}

TEST_CASE("kiln serve: the text path (SD3 fixture pipeline)", "[serve]") {
    Server s({"--model", kiln::test::data_path("fixtures/sd3_pipeline")});
    auto m = s.client().Get("/v1/models");
    REQUIRE(m);
    CHECK(json::parse(m->body)["data"][0]["kiln"]["kind"] == "text");
    json req = {{"prompt", "a red cube"}, {"negative_prompt", "blurry"}, {"steps", 2}, {"seed", 3}, {"n", 2}};
    auto r = s.post(req);
    REQUIRE(r);
    INFO(r->body.substr(0, 400));
    REQUIRE(r->status == 200);
    json j = json::parse(r->body);
    REQUIRE(j["data"].size() == 2);
    CHECK(j["data"][0]["b64_json"] != j["data"][1]["b64_json"]);  // each image from its own noise
    CHECK(json::parse(s.post(req)->body)["data"] == j["data"]);   // resident encoders: the same answer again
    // The first request planned the transformer, the second (the same shapes) found it resident.
    const std::string log = s.log();
    INFO(log);
    const size_t planned = log.find("transformer planned"), reused = log.find("transformer reused");
    CHECK(planned != std::string::npos);
    CHECK(reused != std::string::npos);
    CHECK(planned < reused);
}

// Z-Image's and klein's fields reach kiln_generate_params: on a klein config pipeline (no transformer runs), a layer
// its Qwen3 lacks and cfg_truncation are refused by the model's checks, with their message; wrong types and values
// by the parser.
TEST_CASE("kiln serve: text_encoder_layers, cfg_truncation, cfg_normalization", "[serve]") {
    kiln::test::TempDir tmp("kiln_serve_qwen3");
    Server s({"--model", kiln::test::write_qwen3_pipeline(tmp / "klein", true)});
    auto refused = [&](const json& req, const std::string& code, const std::string& needle) {
        auto r = s.post(req);
        check_error(r, 400, code);
        CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find(needle) != std::string::npos);
    };
    refused({{"prompt", "a"}, {"text_encoder_layers", {9, 29}}}, "KILN_INVALID_ARGUMENT",
            "29 is not a hidden_states entry of this 28-layer Qwen3");
    refused({{"prompt", "a"}, {"cfg_truncation", 0.5}}, "KILN_INVALID_ARGUMENT",
            "Flux2KleinPipeline: cfg_truncation applies to ZImagePipeline");
    refused({{"prompt", "a"}, {"cfg_truncation", 0}}, "KILN_INVALID_ARGUMENT", "cfg_truncation applies");
    refused({{"prompt", "a"}, {"cfg_normalization", true}}, "KILN_INVALID_ARGUMENT",
            "Flux2KleinPipeline: cfg_normalization applies to ZImagePipeline");
    refused({{"prompt", "a"}, {"text_encoder_layers", json::array()}}, "invalid_value", "text_encoder_layers");
    refused({{"prompt", "a"}, {"text_encoder_layers", {9, 2000}}}, "invalid_value", "text_encoder_layers");
    refused({{"prompt", "a"}, {"text_encoder_layers", {9, -2000}}}, "invalid_value", "text_encoder_layers");
    refused({{"prompt", "a"}, {"text_encoder_layers", std::vector<int>(17, 1)}}, "invalid_value",
            "text_encoder_layers");
    refused({{"prompt", "a"}, {"text_encoder_layers", {9, 1.5}}}, "invalid_type", "integers");
    refused({{"prompt", "a"}, {"text_encoder_layers", 9}}, "invalid_type", "array");
    refused({{"prompt", "a"}, {"cfg_truncation", "0.5"}}, "invalid_type", "cfg_truncation");
    refused({{"prompt", "a"}, {"cfg_normalization", -1}}, "invalid_value", ">= 0");
    refused({{"prompt", "a"}, {"cfg_normalization", "yes"}}, "invalid_type", "cfg_normalization");
}

// The Flux fixture with a LoRA through kiln serve: each image equals the PNG `kiln generate --lora` writes for the
// same seed and settings, byte for byte less its tEXt chunks (the same RGB pixels through the same encoder); a
// request's lora_scales equals generate's FILE:SCALE. 32x32, 2 steps: a few seconds on lavapipe.
TEST_CASE("kiln serve --lora: kiln generate --lora's images; lora_scales", "[serve][lora]") {
    const std::string model = kiln::test::data_path("fixtures/flux_pipeline");
    const std::string peft = kiln::test::data_path("fixtures/flux_lora/lora_peft.safetensors");
    const std::string peft_b = kiln::test::data_path("fixtures/flux_lora/lora_peft_b.safetensors");
    Server s({"--model", model, "--lora", peft + ":0.7", "--lora", peft_b + ":-0.4"});
    auto generated = [&](const std::string& loras) {
        const std::string out = s.tmp / "ref.png";
        auto r = kiln::test::run_cli(s.tmp, "kiln",
                                     "generate --model " + model + " --prompt 'a red cube' --seed 5 --steps 2 " +
                                         "--width 32 --height 32" + loras + " -o " + out);
        INFO(r.err);
        REQUIRE(r.rc == 0);
        std::ifstream f(out, std::ios::binary);
        return without_text(std::string(std::istreambuf_iterator<char>(f), {}));
    };
    json req = {{"prompt", "a red cube"}, {"seed", 5}, {"steps", 2}, {"size", "32x32"}};
    const std::string served = unbase64(image_of(s.post(req)));
    CHECK(served == generated(" --lora " + peft + ":0.7 --lora " + peft_b + ":-0.4"));
    req["lora_scales"] = {0.3, 0.0};
    const std::string rescaled = unbase64(image_of(s.post(req)));
    CHECK(rescaled != served);
    CHECK(rescaled == generated(" --lora " + peft + ":0.3 --lora " + peft_b + ":0"));
    // The same shapes and files throughout: the transformer planned once, the files read once (at start).
    const std::string log = s.log();
    INFO(log);
    CHECK(log.find("transformer planned") == log.rfind("transformer planned"));
    CHECK(log.find("transformer reused") != std::string::npos);
    // lora_scales is checked before the request is queued: count, type, bound.
    check_error(s.post({{"prompt", "a"}, {"lora_scales", {1.0}}}), 400, "invalid_value");
    check_error(s.post({{"prompt", "a"}, {"lora_scales", {1.0, 2.0, 3.0}}}), 400, "invalid_value");
    check_error(s.post({{"prompt", "a"}, {"lora_scales", json::array()}}), 400, "invalid_value");
    check_error(s.post({{"prompt", "a"}, {"lora_scales", {1.0, 1e300}}}), 400, "invalid_value");
    check_error(s.post({{"prompt", "a"}, {"lora_scales", {1.0, "2"}}}), 400, "invalid_type");
    check_error(s.post({{"prompt", "a"}, {"lora_scales", 1.0}}), 400, "invalid_type");
    check_error(s.post({{"prompt", "a"}, {"lora_scales", json::array({json::array({1.0}), 1.0})}}), 400,
                "invalid_type");
}

TEST_CASE("kiln serve --lora: a bad LoRA stops the server with one line; merged scales are fixed", "[serve][lora]") {
    const std::string flux = kiln::test::data_path("fixtures/flux_pipeline");
    const std::string peft = kiln::test::data_path("fixtures/flux_lora/lora_peft.safetensors");
    kiln::test::TempDir tmp("kiln_serve_lora");
    auto refused = [&](const std::string& args, const std::string& needle) {
        auto r = kiln::test::run_cli(tmp, "kiln", "serve --port 0 " + args, true);
        INFO(args << "\n" << r.err);
        CHECK(r.rc != 0);
        CHECK(r.err.find(needle) != std::string::npos);
        CHECK(r.err.find("listening") == std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
    };
    refused("--model " + flux + " --lora " + (tmp / "missing.safetensors"), "missing.safetensors");
    refused("--model " + flux + " --lora " + kiln::test::data_path("fixtures/sd3_lora/lora_peft.safetensors"),
            "match no module");
    refused("--model " + flux + " --lora " + peft + ":x", peft);
    refused("--model " + flux + " --lora " + peft + " --lora-apply fold", "--lora-apply");
    refused("--lora " + peft, "class-label model");  // the built-in DiT
    // Merged: the scales are baked at start, a request cannot change them.
    Server s({"--model", flux, "--lora", peft, "--lora-apply", "merge"});
    check_error(s.post({{"prompt", "a"}, {"lora_scales", {0.5}}}), 400, "invalid_value");
    // A server without LoRAs has no scales to set.
    Server plain({"--model", flux});
    check_error(plain.post({{"prompt", "a"}, {"lora_scales", {0.5}}}), 400, "invalid_value");
}

TEST_CASE("kiln serve: 200 requests, memory flat (soak)", "[.soak]") {
    // Measured on lavapipe (2026-11-24), 4-step digits requests: with the validation layers RSS climbs ~30 KiB a
    // request (the layer's tracking); without, 114.3 -> 115.4 MiB over 400 requests.
    Server s({}, false);
    auto one = [&](int i) { return image_of(s.post({{"prompt", std::to_string(i % 10)}, {"seed", i}, {"steps", 4}})); };
    for (int i = 0; i < 20; ++i) one(i);  // warm: pipelines, allocator pools
    const size_t warm = s.rss_kb();
    const std::string first = one(0);
    for (int i = 21; i < 200; ++i) one(i);
    const size_t end = s.rss_kb();
    CHECK(one(0) == first);
    // Flat: malloc arenas (one per handler thread) and lavapipe's pools settle in steps of pages to a MiB; 4 MiB over
    // 180 requests still catches a leak of 23 KiB a request (one 32x32 RGBA image, its PNG and its base64).
    INFO("RSS after warm-up " << warm << " KiB, after 200 requests " << end << " KiB");
    CHECK(end < warm + 4096);
}
