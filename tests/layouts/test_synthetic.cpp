// Layouts the fixtures do not hold, written from the diffusers files: SD3.5's extras (qk norm ln_q/ln_k, dual
// attention attn2, 9-chunk adaLN) in Stability's layout and in a city96 GGUF (the tiny sd3_qknorm_dual model in
// Stability's keys by the inverse of the facts file's table), diffusers-named single files, a ComfyUI checkpoint,
// ComfyUI's doubled prefix. Each reads back as the diffusers file, bitwise.
#include "runtime/core/gguf.h"
#include "tests/layouts/layouts_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// diffusers module -> Stability module (single_file.md, "SD3 / SD3.5, Stability keys -> diffusers").
const std::vector<std::pair<std::string, std::string>> kTop = {
    {"pos_embed.proj", "x_embedder.proj"},
    {"time_text_embed.timestep_embedder.linear_1", "t_embedder.mlp.0"},
    {"time_text_embed.timestep_embedder.linear_2", "t_embedder.mlp.2"},
    {"time_text_embed.text_embedder.linear_1", "y_embedder.mlp.0"},
    {"time_text_embed.text_embedder.linear_2", "y_embedder.mlp.2"},
    {"context_embedder", "context_embedder"},
    {"proj_out", "final_layer.linear"},
    {"norm_out.linear", "final_layer.adaLN_modulation.1"},
};
const std::vector<std::pair<std::string, std::string>> kBlock = {
    {"attn.to_out.0", "x_block.attn.proj"},
    {"attn.norm_q", "x_block.attn.ln_q"},
    {"attn.norm_k", "x_block.attn.ln_k"},
    {"attn2.to_out.0", "x_block.attn2.proj"},
    {"attn2.norm_q", "x_block.attn2.ln_q"},
    {"attn2.norm_k", "x_block.attn2.ln_k"},
    {"norm1.linear", "x_block.adaLN_modulation.1"},
    {"ff.net.0.proj", "x_block.mlp.fc1"},
    {"ff.net.2", "x_block.mlp.fc2"},
    {"attn.to_add_out", "context_block.attn.proj"},
    {"attn.norm_added_q", "context_block.attn.ln_q"},
    {"attn.norm_added_k", "context_block.attn.ln_k"},
    {"ff_context.net.0.proj", "context_block.mlp.fc1"},
    {"ff_context.net.2", "context_block.mlp.fc2"},
    {"norm1_context.linear", "context_block.adaLN_modulation.1"},
    // qkv parts: the fused key, and the part's index
    {"attn.to_q", "x_block.attn.qkv/0"},
    {"attn.to_k", "x_block.attn.qkv/1"},
    {"attn.to_v", "x_block.attn.qkv/2"},
    {"attn2.to_q", "x_block.attn2.qkv/0"},
    {"attn2.to_k", "x_block.attn2.qkv/1"},
    {"attn2.to_v", "x_block.attn2.qkv/2"},
    {"attn.add_q_proj", "context_block.attn.qkv/0"},
    {"attn.add_k_proj", "context_block.attn.qkv/1"},
    {"attn.add_v_proj", "context_block.attn.qkv/2"},
};

Tensor swapped(const Tensor& t) {  // [a; b] -> [b; a] along dim 0
    Tensor o = t;
    const size_t h = t.nbytes() / 2;
    std::memcpy(o.bytes.data(), t.bytes.data() + h, h);
    std::memcpy(o.bytes.data() + h, t.bytes.data(), h);
    return o;
}

// The diffusers SD3 file in Stability's keys (without prefix).
std::vector<std::pair<std::string, Tensor>> to_stability(const SafeTensors& d, int last_block) {
    std::map<std::string, std::vector<Tensor>> fused;  // key -> [q, k, v]
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& t : d.tensors()) {
        const std::string leaf = t.name.substr(t.name.rfind('.'));  // ".weight"
        const std::string mod = t.name.substr(0, t.name.size() - leaf.size());
        Tensor v = d.read(t.name);
        bool done = t.name == "pos_embed.pos_embed";  // [1, max^2, D], no leaf
        if (done) out.emplace_back("pos_embed", v);
        for (const auto& [from, to] : kTop)
            if (mod == from) {
                out.emplace_back(to + leaf, from == "norm_out.linear" ? swapped(v) : v);
                done = true;
            }
        if (!done && t.name.rfind("transformer_blocks.", 0) == 0) {
            const size_t p = t.name.find('.', 19);
            const int n = std::stoi(t.name.substr(19, p - 19));
            const std::string rest = mod.substr(p + 1), base = "joint_blocks." + std::to_string(n) + ".";
            for (const auto& [from, to] : kBlock) {
                if (rest != from) continue;
                done = true;
                if (to.find('/') != std::string::npos) {
                    auto& parts = fused[base + to.substr(0, to.find('/')) + leaf];
                    parts.resize(3);
                    parts[to.back() - '0'] = v;
                } else {
                    const bool pre_only = n == last_block && from == "norm1_context.linear";
                    out.emplace_back(base + to + leaf, pre_only ? swapped(v) : v);
                }
            }
        }
        if (!done) FAIL("no Stability key for " << t.name);
    }
    for (auto& [k, parts] : fused) {  // cat(q, k, v) along dim 0
        Shape s = parts[0].shape;
        s[0] *= 3;
        Tensor cat(DType::f32, s);
        size_t off = 0;
        for (const auto& p : parts) {
            std::memcpy(cat.bytes.data() + off, p.bytes.data(), p.nbytes());
            off += p.nbytes();
        }
        out.emplace_back(k, cat);
    }
    return out;
}

}  // namespace

TEST_CASE("layouts: SD3.5 qk norm and dual attention in Stability's layout and in GGUF", "[layouts][sd3]") {
    const std::string ref = data_path("fixtures/sd3_qknorm_dual/diffusion_pytorch_model.safetensors");
    SafeTensors d = SafeTensors::open(ref);
    auto keys = to_stability(d, 1);
    TempDir dir("kiln_layouts");

    std::vector<std::pair<std::string, Tensor>> prefixed;
    for (const auto& [k, v] : keys) prefixed.emplace_back("model.diffusion_model." + k, v);
    const std::string st = dir / "sd3.5-tiny.safetensors";
    write_safetensors(st, prefixed);
    auto fi = layouts::inspect(st);
    REQUIRE(fi.components.size() == 1);
    CHECK(fi.components[0].family == "sd3");
    CHECK(fi.components[0].layout == "stability");
    check_same(*layouts::open_component(st, "transformer"), ref);

    const std::string gg = dir / "sd3.5-tiny-F32.gguf";
    GgufWriter w;
    w.set_string("general.architecture", "sd3");
    for (const auto& [k, v] : keys)
        w.add_tensor(k, DType::f32, v.shape, [v](void* dst) { std::memcpy(dst, v.bytes.data(), v.nbytes()); });
    w.write(gg);
    auto gi = layouts::inspect(gg);
    REQUIRE(gi.components.size() == 1);
    CHECK(gi.components[0].layout == "city96");
    CHECK(gi.components[0].family == "sd3");
    check_same(*layouts::open_component(gg, "transformer"), ref);
}

TEST_CASE("layouts: diffusers-named single files", "[layouts]") {
    // A transformer or VAE saved with diffusers' names is read as it is.
    struct Want {
        std::string path, role, layout, family;
    };
    for (const Want& w : {Want{folder("flux", "transformer"), "transformer", "diffusers", "flux"},
                          Want{folder("sd3", "transformer"), "transformer", "diffusers", "sd3"},
                          Want{folder("sd3", "vae"), "vae", "diffusers", ""},
                          Want{folder("sd3", "text_encoder_3"), "t5xxl", "transformers", ""}}) {
        INFO(w.path);
        auto fi = layouts::inspect(w.path);
        REQUIRE(fi.components.size() == 1);
        CHECK(fi.components[0].role == w.role);
        CHECK(fi.components[0].layout == w.layout);
        CHECK(fi.components[0].family == w.family);
        check_same(*layouts::open_component(w.path, w.role), w.path);
    }
}

TEST_CASE("layouts: a ComfyUI Flux checkpoint with every component", "[layouts][flux]") {
    // ComfyUI saves Flux checkpoints as model.diffusion_model.*, vae.*, text_encoders.{clip_l,t5xxl}.transformer.*,
    // plus CLIP's logit_scale and T5's tokenizer as tensors (not weights: skipped).
    std::vector<std::pair<std::string, Tensor>> ts;
    auto add = [&](const std::string& file, const std::string& prefix) {
        SafeTensors s = SafeTensors::open(single("flux", file));
        for (const auto& t : s.tensors()) ts.emplace_back(prefix + t.name, s.read(t.name));
    };
    add("flux1-tiny.safetensors", "model.diffusion_model.");
    add("ae.safetensors", "vae.");
    add("clip_l.safetensors", "text_encoders.clip_l.transformer.");
    add("t5xxl.safetensors", "text_encoders.t5xxl.transformer.");
    ts.emplace_back("text_encoders.clip_l.logit_scale", Tensor(DType::f32, {}));
    ts.emplace_back("text_encoders.t5xxl.transformer.spiece_model", Tensor(DType::u8, {16}));
    TempDir dir("kiln_layouts");
    const std::string path = dir / "flux1-tiny-checkpoint.safetensors";
    write_safetensors(path, ts);

    auto fi = layouts::inspect(path);
    REQUIRE(fi.components.size() == 4);
    CHECK(fi.components[0].role == "clip_l");
    CHECK(fi.components[1].role == "t5xxl");
    CHECK(fi.components[2].layout == "comfyui");
    CHECK(fi.components[3].prefix == "vae.");
    CHECK(fi.dtype_counts == std::map<std::string, size_t>{{"f32", 60 + 120 + 36 + 21 + 1}, {"u8", 1}});
    check_same(*layouts::open_component(path, "transformer"), folder("flux", "transformer"));
    check_same(*layouts::open_component(path, "vae"), folder("flux", "vae"));
    check_same(*layouts::open_component(path, "clip_l"), folder("flux", "text_encoder"));
    check_same(*layouts::open_component(path, "t5xxl"), folder("flux", "text_encoder_2"));
}

TEST_CASE("layouts: ComfyUI's doubled prefix", "[layouts][flux]") {
    TempDir dir("kiln_layouts");
    SafeTensors src = SafeTensors::open(single("flux", "flux1-tiny.safetensors"));
    std::vector<std::pair<std::string, Tensor>> ts;
    for (const auto& t : src.tensors())
        ts.emplace_back("model.diffusion_model.model.diffusion_model." + t.name, src.read(t.name));
    const std::string path = dir / "flux-doubled.safetensors";
    write_safetensors(path, ts);
    auto fi = layouts::inspect(path);
    REQUIRE(fi.components.size() == 1);
    CHECK(fi.components[0].layout == "comfyui");
    CHECK(fi.components[0].prefix == "model.diffusion_model.model.diffusion_model.");
    check_same(*layouts::open_component(path, "transformer"), folder("flux", "transformer"));
}

TEST_CASE("layouts: a sharded single file (safetensors index)", "[layouts][flux]") {
    // Two shards and their index.json, as large BFL/diffusers uploads come: each tensor read from its own shard.
    TempDir dir("kiln_layouts");
    SafeTensors src = SafeTensors::open(single("flux", "flux1-tiny.safetensors"));
    std::vector<std::pair<std::string, Tensor>> a, b;
    nlohmann::json map;
    for (size_t i = 0; i < src.tensors().size(); ++i) {
        const std::string& n = src.tensors()[i].name;
        (i % 2 ? b : a).emplace_back(n, src.read(n));
        map[n] = i % 2 ? "flux-00002-of-00002.safetensors" : "flux-00001-of-00002.safetensors";
    }
    write_safetensors(dir / "flux-00001-of-00002.safetensors", a);
    write_safetensors(dir / "flux-00002-of-00002.safetensors", b);
    const std::string index = dir / "flux.safetensors.index.json";
    std::ofstream(index) << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump();
    auto fi = layouts::inspect(index);
    REQUIRE(fi.components.size() == 1);
    CHECK(fi.components[0].layout == "bfl");
    check_same(*layouts::open_component(index, "transformer"), folder("flux", "transformer"));
}
