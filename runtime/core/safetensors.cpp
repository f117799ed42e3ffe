#include "runtime/core/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/file_io.h"
#include "runtime/core/platform.h"

namespace kiln {

namespace {
using json = nlohmann::json;

constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit is 100 MB

DType st_dtype(const std::string& s, const std::string& file, const std::string& name) {
    if (s == "F32") return DType::f32;
    if (s == "F16") return DType::f16;
    if (s == "BF16") return DType::bf16;
    if (s == "I32") return DType::i32;
    if (s == "I64") return DType::i64;
    if (s == "U8") return DType::u8;
    if (s == "F8_E4M3") return DType::f8_e4m3;  // torch.float8_e4m3fn
    if (s == "F8_E5M2") return DType::f8_e5m2;
    KILN_FAIL(file, ": tensor '", name, "' has unsupported dtype '", s,
              "' (supported: F32, F16, BF16, I32, I64, U8, F8_E4M3, F8_E5M2)");
}

const char* st_name(DType t) {
    switch (t) {
        case DType::f32:
            return "F32";
        case DType::f16:
            return "F16";
        case DType::bf16:
            return "BF16";
        case DType::i32:
            return "I32";
        case DType::i64:
            return "I64";
        case DType::u8:
            return "U8";
        case DType::f8_e4m3:
            return "F8_E4M3";
        case DType::f8_e5m2:
            return "F8_E5M2";
        default:
            KILN_FAIL("safetensors cannot hold ", dtype_name(t), " tensors");
    }
}

}  // namespace

SafeTensors::SafeTensors(SafeTensors&& o) noexcept { *this = std::move(o); }
SafeTensors& SafeTensors::operator=(SafeTensors&& o) noexcept {
    std::swap(paths_, o.paths_);
    std::swap(fds_, o.fds_);
    std::swap(tensors_, o.tensors_);
    std::swap(index_, o.index_);
    std::swap(metadata_, o.metadata_);
    return *this;
}
SafeTensors::~SafeTensors() {
    for (int fd : fds_) platform::close_file(fd);
}

SafeTensors SafeTensors::open(const std::string& path) {
    SafeTensors st;
    const std::string suffix = ".index.json";
    if (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
        std::ifstream f(path);
        KILN_CHECK(f.good(), path, ": cannot open sharded index");
        json j;
        try {
            j = json::parse(f);
        } catch (const std::exception& e) {
            KILN_FAIL(path, ": invalid JSON in sharded index: ", e.what());
        }
        KILN_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), path,
                   ": sharded index has no 'weight_map' object");
        std::map<std::string, std::vector<std::string>> by_shard;
        for (auto& [name, shard] : j["weight_map"].items()) {
            KILN_CHECK(shard.is_string(), path, ": weight_map entry '", name, "' is not a file name");
            std::string s = shard.get<std::string>();
            KILN_CHECK(s.find('/') == std::string::npos && s.find("..") == std::string::npos, path,
                       ": weight_map entry '", name, "' points outside the folder: ", s);
            by_shard[s].push_back(name);
        }
        KILN_CHECK(!by_shard.empty(), path, ": weight_map is empty");
        auto dir = std::filesystem::path(path).parent_path();
        for (auto& [shard, names] : by_shard) {
            auto sp = (dir / shard).string();
            KILN_CHECK(std::filesystem::exists(sp), path, ": shard '", shard, "' (holding '", names.front(),
                       "') is missing");
            st.add_file(sp, &names);
        }
    } else {
        st.add_file(path, nullptr);
    }
    return st;
}

void SafeTensors::add_file(const std::string& path, const std::vector<std::string>* expected) {
    int fd = platform::open_read(path);
    KILN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
    fds_.push_back(fd);
    paths_.push_back(path);
    int file_idx = (int)paths_.size() - 1;
    platform::FileInfo fi;
    KILN_CHECK(platform::file_info(fd, &fi), path, ": cannot stat");
    KILN_CHECK(fi.regular, path, ": not a regular file");
    uint64_t fsize = fi.size;
    KILN_CHECK(fsize >= 8, path, ": truncated (", fsize,
               " bytes; a safetensors file starts with an 8-byte header length)");
    uint64_t hlen = 0;
    pread_all(fd, &hlen, 8, 0, path);  // little-endian host assumed (x86, ARM)
    KILN_CHECK(std::memcmp(&hlen, "GGUF", 4) != 0, path,
               ": a GGUF file (a Kiln model file or a llama.cpp one), not safetensors");
    KILN_CHECK(hlen <= kMaxHeader, path, ": header length ", hlen,
               " exceeds the 100 MB limit (not a safetensors file?)");
    KILN_CHECK(8 + hlen <= fsize, path, ": header length ", hlen, " runs past the end of the file (", fsize, " bytes)");
    std::string hdr(hlen, '\0');
    pread_all(fd, hdr.data(), hlen, 8, path);
    json j;
    // JSON objects may repeat a key and nlohmann keeps the last silently: a repeated tensor name is
    // caught while parsing (depth 1 = the header object's own keys).
    std::vector<std::string> keys;
    std::string dup;
    auto on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1 && parsed.is_string())
            keys.push_back(parsed.get<std::string>());
        return true;
    };
    try {
        j = json::parse(hdr, on_event);
    } catch (const std::exception& e) {
        KILN_FAIL(path, ": header is not valid JSON: ", e.what());
    }
    KILN_CHECK(j.is_object(), path, ": header is not a JSON object");
    std::sort(keys.begin(), keys.end());
    for (size_t i = 1; i < keys.size(); ++i)
        KILN_CHECK(keys[i] != keys[i - 1], path, ": tensor '", keys[i], "' appears twice in the header");
    const uint64_t data_start = 8 + hlen, data_size = fsize - data_start;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    std::vector<std::string> seen;
    for (auto& [name, v] : j.items()) {
        if (name == "__metadata__") {
            KILN_CHECK(v.is_object(), path, ": __metadata__ is not an object");
            for (auto& [k, mv] : v.items()) {
                KILN_CHECK(mv.is_string(), path, ": __metadata__ value '", k, "' is not a string");
                metadata_[k] = mv.get<std::string>();
            }
            continue;
        }
        KILN_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), path,
                   ": tensor '", name, "' lacks dtype, shape or data_offsets");
        KILN_CHECK(v["dtype"].is_string(), path, ": tensor '", name, "' dtype is not a string");
        SafeTensorInfo t;
        t.name = name;
        t.file = file_idx;
        t.dtype = st_dtype(v["dtype"].get<std::string>(), path, name);
        KILN_CHECK(v["shape"].is_array(), path, ": tensor '", name, "' shape is not an array");
        uint64_t numel = 1;
        for (auto& d : v["shape"]) {
            KILN_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), path, ": tensor '",
                       name, "' has a non-integer or negative dimension");
            uint64_t dim = d.get<uint64_t>();
            KILN_CHECK(dim == 0 || numel <= (1ull << 48) / dim, path, ": tensor '", name, "' shape overflows");
            numel *= dim;
            t.shape.push_back((int64_t)dim);
        }
        auto& off = v["data_offsets"];
        KILN_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                   path, ": tensor '", name, "' data_offsets is not [begin, end]");
        uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
        KILN_CHECK(b <= e, path, ": tensor '", name, "' data_offsets begin ", b, " > end ", e);
        KILN_CHECK(e <= data_size, path, ": tensor '", name, "' data [", b, ", ", e, ") runs past the data area (",
                   data_size, " bytes; file truncated?)");
        uint64_t expect = numel * dtype_size(t.dtype);
        KILN_CHECK(e - b == expect, path, ": tensor '", name, "' has ", e - b, " bytes but shape ", shape_str(t.shape),
                   " x ", st_name(t.dtype), " needs ", expect);
        KILN_CHECK(!index_.count(name), path, ": tensor '", name, "' appears twice (also in ",
                   paths_[tensors_[index_[name]].file], ")");
        t.offset = data_start + b;
        t.nbytes = expect;
        spans.push_back({b, e});
        index_[name] = tensors_.size();
        tensors_.push_back(std::move(t));
        seen.push_back(name);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
        KILN_CHECK(spans[i].first >= spans[i - 1].second || spans[i].first == spans[i].second ||
                       spans[i - 1].first == spans[i - 1].second,
                   path, ": tensor data spans overlap at byte ", spans[i].first);
    if (expected) {
        std::sort(seen.begin(), seen.end());
        for (auto& n : *expected)
            KILN_CHECK(std::binary_search(seen.begin(), seen.end(), n), path, ": the index says tensor '", n,
                       "' is in this shard, but it is not");
    }
}

const SafeTensorInfo* SafeTensors::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafeTensorInfo& SafeTensors::at(const std::string& name) const {
    auto* t = find(name);
    KILN_CHECK(t, (paths_.empty() ? std::string("safetensors") : paths_[0]), ": missing tensor '", name, "'");
    return *t;
}

void SafeTensors::read_bytes(const SafeTensorInfo& t, void* dst) const {
    pread_all(fds_[t.file], dst, t.nbytes, t.offset, paths_[t.file]);
}

Tensor SafeTensors::read(const std::string& name) const {
    const auto& info = at(name);
    Tensor t(info.dtype, info.shape);
    read_bytes(info, t.bytes.data());
    return t;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    json h = json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    uint64_t off = 0;
    for (auto& [name, t] : tensors) {
        h[name] = {{"dtype", st_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes()}}};
        off += t.nbytes();
    }
    std::string hs = h.dump();
    while ((hs.size() + 8) % 8) hs.push_back(' ');
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        KILN_CHECK(f.good(), tmp, ": cannot open for writing");
        uint64_t n = hs.size();
        f.write(reinterpret_cast<const char*>(&n), 8);
        f.write(hs.data(), (std::streamsize)hs.size());
        for (auto& [name, t] : tensors)
            f.write(reinterpret_cast<const char*>(t.bytes.data()), (std::streamsize)t.nbytes());
        KILN_CHECK(f.good(), tmp, ": write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp);
        KILN_FAIL(path, ": cannot rename temporary file: ", ec.message());
    }
}

}  // namespace kiln
