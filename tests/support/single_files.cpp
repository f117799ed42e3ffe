#include "tests/support/single_files.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

#if KILN_TEST_SHA256
#include <openssl/evp.h>
#endif

namespace kiln::test {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One source of a file's tensors: the diffusers component folder `component` (default of the key_map entries that name
// none), mapped by io.json's key_map of `key_map` (null: every tensor of the component under its own name), each file
// key prefixed with `prefix`. `tie_t5` adds T5's encoder.embed_tokens.weight as the copy of shared.weight it is tied
// to.
struct Part {
    const char* component;
    const char* key_map;
    const char* prefix;
    bool tie_t5 = false;
};
struct Recipe {
    const char* c;
    const char* file;
    std::vector<Part> parts;
};

// What io.json's `layout` and `key_map` fields say of each file (free text where the key_map is not a list).
const std::vector<Recipe>& recipes() {
    static const std::vector<Recipe> r = {
        {"flux", "flux1-tiny.safetensors", {{"transformer", "flux1-tiny.safetensors", ""}}},
        {"flux", "flux1-tiny-comfy.safetensors", {{"transformer", "flux1-tiny.safetensors", "model.diffusion_model."}}},
        {"flux", "ae.safetensors", {{"vae", "ae.safetensors", ""}}},
        {"flux", "clip_l.safetensors", {{"text_encoder", nullptr, ""}}},
        {"flux", "t5xxl.safetensors", {{"text_encoder_2", nullptr, ""}}},
        {"sd3",
         "sd3-tiny.safetensors",
         {{"transformer", "sd3-tiny.safetensors", ""},
          {"text_encoder", nullptr, "text_encoders.clip_l.transformer."},
          {"text_encoder_2", nullptr, "text_encoders.clip_g.transformer."},
          {"text_encoder_3", nullptr, "text_encoders.t5xxl.transformer.", true}}},
        {"sd3", "clip_l.safetensors", {{"text_encoder", nullptr, ""}}},
        {"sd3", "clip_g.safetensors", {{"text_encoder_2", nullptr, ""}}},
        {"sd3", "t5xxl.safetensors", {{"text_encoder_3", nullptr, "", true}}},
    };
    return r;
}

const Recipe* find_recipe(const std::string& c, const std::string& file) {
    for (const auto& r : recipes())
        if (c == r.c && file == r.file) return &r;
    return nullptr;
}

std::string case_dir(const std::string& c) { return data_path("fixtures/" + c + "_pipeline_singlefile"); }

const json& io_json(const std::string& c) {
    static std::map<std::string, json> cache;
    static std::mutex m;
    std::lock_guard<std::mutex> lock(m);
    auto it = cache.find(c);
    if (it == cache.end()) {
        const std::string p = case_dir(c) + "/io.json";
        std::ifstream f(p);
        KILN_CHECK(f.good(), p, ": cannot open");
        it = cache.emplace(c, json::parse(f)).first;
    }
    return it->second;
}

class Sources {
public:
    explicit Sources(const std::string& c) : dir_(data_path("fixtures/" + c + "_pipeline/")) {}
    const SafeTensors& get(const std::string& component) {
        auto it = open_.find(component);
        if (it == open_.end()) {
            const bool text = component.rfind("text_encoder", 0) == 0;
            const std::string p =
                dir_ + component + (text ? "/model.safetensors" : "/diffusion_pytorch_model.safetensors");
            it = open_.emplace(component, SafeTensors::open(p)).first;
        }
        return it->second;
    }

private:
    std::string dir_;
    std::map<std::string, SafeTensors> open_;
};

// One key_map entry: the file tensor from its diffusers tensors. Each op moves whole rows of row-major tensors, so it
// is a byte re-arrangement: concat_dim0 joins the sources' bytes, swap_halves_dim0 swaps the two halves of the bytes
// ([shift; scale] <-> [scale; shift]), reshape_to_1x1_conv keeps the bytes of [C, C] as [C, C, 1, 1].
Tensor apply_op(const std::string& file, const json& e, const SafeTensors& src) {
    const std::string key = e.at("file_key"), op = e.at("op");
    std::vector<Tensor> in;
    for (const auto& n : e.at("diffusers")) in.push_back(src.read(n.get<std::string>()));
    KILN_CHECK(!in.empty(), file, ": ", key, ": key_map entry names no diffusers tensor");
    KILN_CHECK(op == "concat_dim0" || in.size() == 1, file, ": ", key, ": op ", op, " takes one tensor, not ",
               in.size());
    Tensor t = in[0];
    if (op == "copy") return t;
    if (op == "reshape_to_1x1_conv") {
        t.shape.insert(t.shape.end(), {1, 1});
        return t;
    }
    if (op == "swap_halves_dim0") {
        KILN_CHECK(!t.shape.empty() && t.shape[0] % 2 == 0, file, ": ", key, ": odd dim 0 ", shape_str(t.shape));
        std::rotate(t.bytes.begin(), t.bytes.begin() + (std::ptrdiff_t)(t.bytes.size() / 2), t.bytes.end());
        return t;
    }
    KILN_CHECK(op == "concat_dim0", file, ": ", key, ": unknown key_map op '", op, "'");
    for (size_t i = 1; i < in.size(); ++i) {
        const Tensor& x = in[i];
        KILN_CHECK(x.dtype == t.dtype && x.shape.size() == t.shape.size() &&
                       std::equal(x.shape.begin() + 1, x.shape.end(), t.shape.begin() + 1),
                   file, ": ", key, ": concat_dim0 of ", shape_str(t.shape), " and ", shape_str(x.shape));
        t.shape[0] += x.shape[0];
        t.bytes.insert(t.bytes.end(), x.bytes.begin(), x.bytes.end());
    }
    return t;
}

// The layout safetensors' Python writer (its Rust serializer) gave the committed files: 8-byte little-endian header
// length, compact JSON with the tensors in data order and each entry's fields as dtype, shape, data_offsets (nlohmann's
// json would sort them), padded with spaces to a multiple of 8, then the data packed.
void write_python_safetensors(const std::string& path, const std::map<std::string, Tensor>& ts) {
    std::string h = "{";
    uint64_t off = 0;
    for (const auto& [name, t] : ts) {
        const char* dt = t.dtype == DType::f32    ? "F32"
                         : t.dtype == DType::f16  ? "F16"
                         : t.dtype == DType::bf16 ? "BF16"
                                                  : nullptr;
        KILN_CHECK(dt, path, ": ", name, ": dtype ", dtype_name(t.dtype), " not written by the fixture generator");
        std::string shape;
        for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
        h += (h.size() > 1 ? "," : "") + json(name).dump() + ":{\"dtype\":\"" + dt + "\",\"shape\":[" + shape +
             "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.nbytes()) + "]}";
        off += t.nbytes();
    }
    h += "}";
    h.append((8 - h.size() % 8) % 8, ' ');
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    KILN_CHECK(f.good(), path, ": cannot open for writing");
    const uint64_t n = h.size();  // little-endian hosts only, as the safetensors reader
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(h.data(), (std::streamsize)h.size());
    for (const auto& [name, t] : ts)
        f.write(reinterpret_cast<const char*>(t.bytes.data()), (std::streamsize)t.nbytes());
    KILN_CHECK(f.good(), path, ": write failed");
}

// Checks the written file against io.json: size, tensor count and (with libcrypto) sha256.
void check_file(const std::string& c, const std::string& file, const std::string& path) {
    const json& want = io_json(c).at("files").at(file);
    const uint64_t bytes = fs::file_size(path);
    KILN_CHECK(bytes == want.at("bytes").get<uint64_t>(), path, ": generated ", file, " has ", bytes,
               " bytes, io.json says ", want.at("bytes").get<uint64_t>());
    const size_t n = SafeTensors::open(path).tensors().size();
    KILN_CHECK(n == want.at("n_tensors").get<size_t>(), path, ": generated ", file, " has ", n,
               " tensors, io.json says ", want.at("n_tensors").get<size_t>());
    const std::string sha = file_sha256(path);
    KILN_CHECK(sha.empty() || sha == want.at("sha256").get<std::string>(), path, ": generated ", file, " has sha256 ",
               sha, ", io.json says ", want.at("sha256").get<std::string>());
}

}  // namespace

void write_single_file(const std::string& c, const std::string& file, const std::string& path) {
    const Recipe* r = find_recipe(c, file);
    KILN_CHECK(r, c, "_pipeline_singlefile/", file, ": not a generated single-file fixture");
    const json& files = io_json(c).at("files");
    Sources src(c);
    std::map<std::string, Tensor> out;  // by name: the Python writer orders tensors by name (all of one dtype here)
    auto add = [&](const std::string& key, Tensor t) {
        KILN_CHECK(out.emplace(key, std::move(t)).second, file, ": tensor ", key, " made twice");
    };
    for (const Part& p : r->parts) {
        const std::string prefix = p.prefix;
        if (p.key_map) {
            for (const auto& e : files.at(p.key_map).at("key_map"))
                add(prefix + e.at("file_key").get<std::string>(),
                    apply_op(file, e, src.get(e.value("component", std::string(p.component)))));
        } else {
            const SafeTensors& st = src.get(p.component);
            for (const auto& i : st.tensors()) add(prefix + i.name, st.read(i.name));
            if (p.tie_t5 && !st.find("encoder.embed_tokens.weight"))
                add(prefix + "encoder.embed_tokens.weight", st.read("shared.weight"));
        }
    }
    write_python_safetensors(path, out);
}

std::string single_file(const std::string& c, const std::string& file) {
    if (!find_recipe(c, file)) return case_dir(c) + "/" + file;
    // The build tree's cache; several test executables may make the same file at once, so each writes a name of its
    // own and renames it into place (atomic), and a file already there is checked once per process.
    static std::mutex m;
    static std::set<std::string> checked;
    const fs::path dir = fs::path(KILN_BUILD_DIR) / "test-data" / (c + "_pipeline_singlefile");
    const std::string path = (dir / file).string();
    std::lock_guard<std::mutex> lock(m);
    if (checked.count(path)) return path;
    std::error_code ec;
    fs::create_directories(dir, ec);
    KILN_CHECK(!ec, dir.string(), ": cannot create: ", ec.message());
    bool ok = false;
    if (fs::exists(path)) {
        try {
            check_file(c, file, path);
            ok = true;
        } catch (const Error&) {  // a stale file (io.json changed): made again below
        }
    }
    if (!ok) {
        static std::atomic<int> n{0};
        const std::string tmp = path + "." + std::to_string(::getpid()) + "_" + std::to_string(n++);
        write_single_file(c, file, tmp);
        try {
            check_file(c, file, tmp);
        } catch (...) {
            fs::remove(tmp, ec);
            throw;
        }
        fs::rename(tmp, path, ec);
        KILN_CHECK(!ec, path, ": cannot rename ", tmp, ": ", ec.message());
    }
    checked.insert(path);
    return path;
}

std::string file_sha256(const std::string& path) {
#if KILN_TEST_SHA256
    std::ifstream f(path, std::ios::binary);
    KILN_CHECK(f.good(), path, ": cannot open");
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    KILN_CHECK(ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1, "OpenSSL: cannot start SHA-256");
    std::vector<char> buf(1 << 16);
    while (f) {
        f.read(buf.data(), (std::streamsize)buf.size());
        if (f.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), (size_t)f.gcount());
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    static const char* hex = "0123456789abcdef";
    std::string s;
    for (unsigned i = 0; i < len; ++i) s += {hex[md[i] >> 4], hex[md[i] & 15]};
    return s;
#else
    (void)path;
    return "";
#endif
}

}  // namespace kiln::test
