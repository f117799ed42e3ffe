// Opt-in (hidden tag, not in the CTest run): peak memory of converting a ~1 GB synthetic f32 DiT.
//   test_converter "[.rss]"      (KILN_RSS_LAYERS=N changes the size; ~100 MB per layer)
// The conversion runs in a forked child so its ru_maxrss is not mixed with the writer of the input.
#include <sys/resource.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>

#include "tests/converter/converter_test_util.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("peak RSS of converting a ~1 GB checkpoint", "[.rss]") {
    const int64_t heads = 16, head_dim = 72, d = heads * head_dim;  // DiT-XL width
    const char* env = std::getenv("KILN_RSS_LAYERS");
    const int64_t layers = env ? std::atoi(env) : 10;
    TempDir tmp;
    const std::string dir = tmp / "big";
    fs::create_directories(dir);
    nlohmann::json cfg = nlohmann::json::parse(slurp(fixture("dit") + "/config.json"));
    cfg["num_attention_heads"] = heads;
    cfg["attention_head_dim"] = head_dim;
    cfg["num_layers"] = layers;
    cfg["num_embeds_ada_norm"] = 1000;
    spit(dir + "/config.json", cfg.dump(2));

    // Shapes of every tensor DiT needs at this size.
    std::vector<std::pair<std::string, Shape>> shapes = {
        {"pos_embed.proj.weight", {d, 4, 2, 2}}, {"pos_embed.proj.bias", {d}},
        {"proj_out_1.weight", {2 * d, d}},       {"proj_out_1.bias", {2 * d}},
        {"proj_out_2.weight", {32, d}},          {"proj_out_2.bias", {32}}};
    for (int64_t i = 0; i < layers; ++i) {
        std::string b = "transformer_blocks." + std::to_string(i) + ".";
        for (auto n :
             {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "norm1.emb.timestep_embedder.linear_2"}) {
            shapes.push_back({b + n + ".weight", {d, d}});
            shapes.push_back({b + n + ".bias", {d}});
        }
        shapes.push_back({b + "norm1.emb.timestep_embedder.linear_1.weight", {d, 256}});
        shapes.push_back({b + "norm1.emb.timestep_embedder.linear_1.bias", {d}});
        shapes.push_back({b + "norm1.emb.class_embedder.embedding_table.weight", {1001, d}});
        shapes.push_back({b + "norm1.linear.weight", {6 * d, d}});
        shapes.push_back({b + "norm1.linear.bias", {6 * d}});
        shapes.push_back({b + "ff.net.0.proj.weight", {4 * d, d}});
        shapes.push_back({b + "ff.net.0.proj.bias", {4 * d}});
        shapes.push_back({b + "ff.net.2.weight", {d, 4 * d}});
        shapes.push_back({b + "ff.net.2.bias", {d}});
    }
    // Stream the safetensors file out: header, then each tensor in 1 MiB chunks.
    nlohmann::json h = nlohmann::json::object();
    uint64_t off = 0;
    for (auto& [n, s] : shapes) {
        uint64_t bytes = (uint64_t)shape_numel(s) * 4;
        h[n] = {{"dtype", "F32"}, {"shape", s}, {"data_offsets", {off, off + bytes}}};
        off += bytes;
    }
    {
        std::string hs = h.dump();
        std::ofstream f(dir + "/diffusion_pytorch_model.safetensors", std::ios::binary);
        uint64_t n = hs.size();
        f.write((const char*)&n, 8);
        f.write(hs.data(), (std::streamsize)hs.size());
        std::vector<float> chunk(1 << 18);
        for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = (float)((int)(i % 2001) - 1000) * 1e-3f;
        for (uint64_t left = off; left;) {
            uint64_t k = std::min<uint64_t>(left, chunk.size() * 4);
            f.write((const char*)chunk.data(), (std::streamsize)k);
            left -= k;
        }
        REQUIRE(f.good());
    }
    const std::string out = tmp / "big.kiln";
    auto t0 = std::chrono::steady_clock::now();
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        try {
            converter::Options o;
            o.quiet = true;
            converter::convert_folder(dir, out, o);
            _exit(0);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s\n", e.what());
            _exit(1);
        }
    }
    int status = 0;
    struct rusage ru {};
    REQUIRE(wait4(pid, &status, 0, &ru) == pid);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    uint64_t largest = 0;
    for (auto& [n, s] : shapes) largest = std::max<uint64_t>(largest, (uint64_t)shape_numel(s) * 4);
    std::printf(
        "rss: input %.1f MiB f32 (%zu tensors, largest %.1f MiB) -> %.1f MiB f16 in %.1f s; "
        "peak RSS of the conversion: %.1f MiB\n",
        off / 1048576.0, shapes.size(), largest / 1048576.0, fs::file_size(out) / 1048576.0, secs,
        ru.ru_maxrss / 1024.0);
    CHECK(ru.ru_maxrss * 1024.0 < 4.0 * largest + 64e6);  // ~one tensor in + out, plus the process itself
    GgufFile g = GgufFile::open(out);
    CHECK(g.get_int("kiln.transformer.blocks.transformer_blocks.count") == layers);
}
