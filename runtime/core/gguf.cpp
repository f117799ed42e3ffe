#include "runtime/core/gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/core/error.h"
#include "runtime/core/file_io.h"
#include "runtime/core/platform.h"

namespace kiln {

namespace {

constexpr uint64_t kMaxString = 1ull << 30;  // a sane cap; every length is also bounds-checked
constexpr int kMaxArrayDepth = 4;

const char* type_name(GgufType t) {
    switch (t) {
        case GgufType::u8:
            return "u8";
        case GgufType::i8:
            return "i8";
        case GgufType::u16:
            return "u16";
        case GgufType::i16:
            return "i16";
        case GgufType::u32:
            return "u32";
        case GgufType::i32:
            return "i32";
        case GgufType::f32:
            return "f32";
        case GgufType::boolean:
            return "bool";
        case GgufType::string:
            return "string";
        case GgufType::array:
            return "array";
        case GgufType::u64:
            return "u64";
        case GgufType::i64:
            return "i64";
        case GgufType::f64:
            return "f64";
    }
    return "?";
}

size_t scalar_size(GgufType t) {
    switch (t) {
        case GgufType::u8:
        case GgufType::i8:
        case GgufType::boolean:
            return 1;
        case GgufType::u16:
        case GgufType::i16:
            return 2;
        case GgufType::u32:
        case GgufType::i32:
        case GgufType::f32:
            return 4;
        case GgufType::u64:
        case GgufType::i64:
        case GgufType::f64:
            return 8;
        default:
            return 0;
    }
}

bool is_int(GgufType t) {
    return t == GgufType::u8 || t == GgufType::i8 || t == GgufType::u16 || t == GgufType::i16 || t == GgufType::u32 ||
           t == GgufType::i32 || t == GgufType::u64 || t == GgufType::i64;
}
bool is_unsigned(GgufType t) {
    return t == GgufType::u8 || t == GgufType::u16 || t == GgufType::u32 || t == GgufType::u64;
}

bool dtype_of_ggml(uint32_t g, DType* out) {
    switch (g) {
        case 0:
            *out = DType::f32;
            return true;
        case 1:
            *out = DType::f16;
            return true;
        case 26:
            *out = DType::i32;
            return true;
        case 27:
            *out = DType::i64;
            return true;
        case 2:
            *out = DType::q4_0;
            return true;
        case 3:
            *out = DType::q4_1;
            return true;
        case 6:
            *out = DType::q5_0;
            return true;
        case 7:
            *out = DType::q5_1;
            return true;
        case 8:
            *out = DType::q8_0;
            return true;
        case 12:
            *out = DType::q4_k;
            return true;
        case 14:
            *out = DType::q6_k;
            return true;
        case 10:
            *out = DType::q2_k;
            return true;
        case 11:
            *out = DType::q3_k;
            return true;
        case 13:
            *out = DType::q5_k;
            return true;
        case 30:
            *out = DType::bf16;
            return true;
        default:
            return false;
    }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Bounds-checked sequential reader over the file header, buffered in 64 KiB windows.
class Cursor {
public:
    Cursor(int fd, uint64_t size, const std::string& path) : fd_(fd), size_(size), path_(path) {}
    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }
    void read(void* dst, uint64_t n, const std::string& what) {
        KILN_CHECK(n <= remaining(), path_, ": truncated header: ", what, " needs ", n, " bytes at offset ", pos_,
                   " but the file has ", size_, " bytes");
        auto* d = static_cast<uint8_t*>(dst);
        while (n) {
            if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) {
                buf_start_ = pos_;
                buf_.resize((size_t)std::min<uint64_t>(kWindow, size_ - pos_));
                pread_all(fd_, buf_.data(), buf_.size(), pos_, path_);
            }
            uint64_t k = std::min<uint64_t>(n, buf_start_ + buf_.size() - pos_);
            std::memcpy(d, buf_.data() + (pos_ - buf_start_), (size_t)k);
            d += k;
            n -= k;
            pos_ += k;
        }
    }
    template <class T>
    T get(const std::string& what) {
        T v;
        read(&v, sizeof(T), what);  // little-endian host assumed (x86, ARM)
        return v;
    }
    std::string string(const std::string& what) {
        uint64_t n = get<uint64_t>(what + " length");
        KILN_CHECK(n <= kMaxString && n <= remaining(), path_, ": ", what, " has length ", n,
                   " which runs past the end of the file (offset ", pos_, ", file ", size_, " bytes)");
        std::string s((size_t)n, '\0');
        read(s.data(), n, what);
        return s;
    }

private:
    static constexpr uint64_t kWindow = 64 << 10;
    int fd_;
    uint64_t size_, pos_ = 0, buf_start_ = 0;
    const std::string& path_;
    std::vector<uint8_t> buf_;
};

GgufValue read_value(Cursor& c, GgufType t, const std::string& key, const std::string& path, int depth) {
    GgufValue v;
    v.type = t;
    const std::string what = "value of key '" + key + "'";
    switch (t) {
        case GgufType::u8:
            v.u = c.get<uint8_t>(what);
            break;
        case GgufType::i8:
            v.i = c.get<int8_t>(what);
            break;
        case GgufType::u16:
            v.u = c.get<uint16_t>(what);
            break;
        case GgufType::i16:
            v.i = c.get<int16_t>(what);
            break;
        case GgufType::u32:
            v.u = c.get<uint32_t>(what);
            break;
        case GgufType::i32:
            v.i = c.get<int32_t>(what);
            break;
        case GgufType::u64:
            v.u = c.get<uint64_t>(what);
            break;
        case GgufType::i64:
            v.i = c.get<int64_t>(what);
            break;
        case GgufType::f32:
            v.f = c.get<float>(what);
            break;
        case GgufType::f64:
            v.f = c.get<double>(what);
            break;
        case GgufType::boolean: {
            uint8_t b = c.get<uint8_t>(what);
            KILN_CHECK(b <= 1, path, ": metadata key '", key, "': bool value ", (int)b, " is not 0 or 1");
            v.i = b;
            break;
        }
        case GgufType::string:
            v.s = c.string(what);
            break;
        case GgufType::array: {
            KILN_CHECK(depth < kMaxArrayDepth, path, ": metadata key '", key, "': arrays nested deeper than ",
                       kMaxArrayDepth);
            uint32_t et = c.get<uint32_t>(what + " element type");
            KILN_CHECK(et <= 12, path, ": metadata key '", key, "': bad array element type ", et);
            v.elem = (GgufType)et;
            uint64_t n = c.get<uint64_t>(what + " array length");
            // Each element takes at least 1 byte (strings 8), so n is bounded by the bytes left.
            uint64_t min_elem = v.elem == GgufType::string || v.elem == GgufType::array ? 8 : scalar_size(v.elem);
            KILN_CHECK(n <= c.remaining() / min_elem, path, ": metadata key '", key, "': array of ", n, " ",
                       type_name(v.elem), " runs past the end of the file");
            v.arr.reserve((size_t)n);
            for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(c, v.elem, key, path, depth + 1));
            break;
        }
        default:
            KILN_FAIL(path, ": metadata key '", key, "' has bad value type ", (uint32_t)t);
    }
    return v;
}

}  // namespace

uint32_t ggml_type_of(DType t) {
    switch (t) {
        case DType::f32:
            return 0;
        case DType::f16:
            return 1;
        case DType::i32:
            return 26;
        case DType::i64:
            return 27;
        case DType::bf16:
            return 30;
        case DType::q4_0:
            return 2;
        case DType::q4_1:
            return 3;
        case DType::q5_0:
            return 6;
        case DType::q5_1:
            return 7;
        case DType::q8_0:
            return 8;
        case DType::q4_k:
            return 12;
        case DType::q6_k:
            return 14;
        case DType::q2_k:
            return 10;
        case DType::q3_k:
            return 11;
        case DType::q5_k:
            return 13;
        case DType::u8:
        case DType::f8_e4m3:
        case DType::f8_e5m2:
            break;
    }
    KILN_FAIL(
        "GGUF: dtype ", dtype_name(t),
        " has no GGUF tensor type (supported: f32, f16, bf16, i32, i64, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, "
        "q4_k, q5_k, q6_k)");
}

// ggml's type ids (ggml.h enum ggml_type); ids 4, 5 and 31-33, 36-38 were removed from ggml and stay unnamed.
const char* ggml_type_name(uint32_t g) {
    // Ten ids a line.
    // clang-format off
    static const char* const names[] = {
        "F32",    "F16",   "Q4_0",   "Q4_1",   nullptr, nullptr, "Q5_0",    "Q5_1",   "Q8_0",    "Q8_1",   //  0
        "Q2_K",   "Q3_K",  "Q4_K",   "Q5_K",   "Q6_K",  "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",  // 10
        "IQ4_NL", "IQ3_S", "IQ2_S",  "IQ4_XS", "I8",    "I16",   "I32",     "I64",    "F64",     "IQ1_M",  // 20
        "BF16",   nullptr, nullptr,  nullptr,  "TQ1_0", "TQ2_0", nullptr,   nullptr,  nullptr,   "MXFP4",  // 30
        "NVFP4",  "Q1_0",  "Q2_0"};                                                                        // 40
    // clang-format on
    const char* n = g < sizeof(names) / sizeof(names[0]) ? names[g] : nullptr;
    return n ? n : "unknown";
}

// ---------------------------------------------------------------------------------------- reader

GgufFile::GgufFile(GgufFile&& o) noexcept { *this = std::move(o); }
GgufFile& GgufFile::operator=(GgufFile&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(fd_, o.fd_);
    std::swap(file_size_, o.file_size_);
    std::swap(data_offset_, o.data_offset_);
    std::swap(alignment_, o.alignment_);
    std::swap(kv_, o.kv_);
    std::swap(kv_index_, o.kv_index_);
    std::swap(tensors_, o.tensors_);
    std::swap(index_, o.index_);
    return *this;
}
GgufFile::~GgufFile() {
    if (fd_ >= 0) platform::close_file(fd_);
}

GgufFile GgufFile::open(const std::string& path) {
    GgufFile g;
    g.path_ = path;
    g.fd_ = platform::open_read(path);
    KILN_CHECK(g.fd_ >= 0, path, ": cannot open: ", std::strerror(errno));
    platform::FileInfo fi;
    KILN_CHECK(platform::file_info(g.fd_, &fi), path, ": cannot stat");
    KILN_CHECK(fi.regular, path, ": not a regular file");
    g.file_size_ = fi.size;
    Cursor c(g.fd_, g.file_size_, g.path_);
    KILN_CHECK(g.file_size_ >= 24, path, ": truncated (", g.file_size_, " bytes; a GGUF header has at least 24)");
    uint32_t magic = c.get<uint32_t>("magic");
    KILN_CHECK(magic == kGgufMagic, path, ": bad magic (not a GGUF file)");
    uint32_t version = c.get<uint32_t>("version");
    KILN_CHECK(version == 3, path, ": unsupported GGUF version ", version, " (Kiln reads version 3)");
    uint64_t n_tensors = c.get<uint64_t>("tensor count");
    uint64_t n_kv = c.get<uint64_t>("metadata count");
    // A KV takes >= 13 bytes (key length, 1-char key, type, 1-byte value); a tensor info >= 24.
    KILN_CHECK(n_kv <= c.remaining() / 13, path, ": metadata count ", n_kv, " is impossible for a file of ",
               g.file_size_, " bytes (truncated or corrupt)");
    KILN_CHECK(n_tensors <= c.remaining() / 24, path, ": tensor count ", n_tensors, " is impossible for a file of ",
               g.file_size_, " bytes (truncated or corrupt)");

    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.string("metadata key #" + std::to_string(k));
        KILN_CHECK(!key.empty(), path, ": metadata key #", k, " is empty");
        KILN_CHECK(!g.kv_index_.count(key), path, ": metadata key '", key, "' appears twice");
        uint32_t t = c.get<uint32_t>("type of key '" + key + "'");
        KILN_CHECK(t <= 12, path, ": metadata key '", key, "' has bad value type ", t);
        GgufValue v = read_value(c, (GgufType)t, key, path, 0);
        g.kv_index_[key] = g.kv_.size();
        g.kv_.emplace_back(std::move(key), std::move(v));
    }
    if (g.has("general.alignment")) {
        const GgufValue& a = g.value("general.alignment");
        KILN_CHECK(a.type == GgufType::u32, path, ": metadata key 'general.alignment' must be u32, not ",
                   type_name(a.type));
        KILN_CHECK(a.u >= 8 && (a.u & (a.u - 1)) == 0, path, ": general.alignment ", a.u,
                   " is not a power of two >= 8");
        g.alignment_ = (uint32_t)a.u;
    }

    std::vector<uint64_t> rel_offsets;
    for (uint64_t k = 0; k < n_tensors; ++k) {
        GgufTensor t;
        t.name = c.string("tensor #" + std::to_string(k) + " name");
        const std::string w = "tensor '" + t.name + "'";
        KILN_CHECK(!t.name.empty(), path, ": tensor #", k, " has an empty name");
        KILN_CHECK(!g.index_.count(t.name), path, ": ", w, " appears twice");
        uint32_t nd = c.get<uint32_t>(w + " n_dims");
        KILN_CHECK(nd <= kGgufMaxDims, path, ": ", w, " has ", nd, " dims (at most ", kGgufMaxDims, ")");
        uint64_t numel = 1;
        t.shape.assign(nd, 0);
        for (uint32_t d = 0; d < nd; ++d) {
            uint64_t dim = c.get<uint64_t>(w + " dims");
            KILN_CHECK(dim <= (1ull << 48) && (dim == 0 || numel <= (1ull << 48) / dim), path, ": ", w,
                       " shape overflows");
            numel *= dim;
            t.shape[nd - 1 - d] = (int64_t)dim;  // GGUF is innermost first
        }
        uint32_t gt = c.get<uint32_t>(w + " type");
        KILN_CHECK(dtype_of_ggml(gt, &t.dtype), path, ": ", w, " has GGUF type ", gt, " (", ggml_type_name(gt),
                   "), which Kiln does not read (supported: F32, F16, BF16, I32, I64, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                   "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
        uint64_t off = c.get<uint64_t>(w + " offset");
        KILN_CHECK(off % g.alignment_ == 0, path, ": ", w, " offset ", off, " is not a multiple of the alignment ",
                   g.alignment_);
        // Block-quantized rows (the innermost dim) are whole blocks, as ggml requires.
        const int64_t blk = dtype_block(t.dtype);
        KILN_CHECK(blk == 1 || (nd >= 1 && t.shape[nd - 1] % blk == 0), path, ": ", w, " of type ", ggml_type_name(gt),
                   " has row length ", nd ? t.shape[nd - 1] : 0, ", not a multiple of its ", blk, "-value block");
        t.nbytes = dtype_nbytes(t.dtype, (int64_t)numel);
        rel_offsets.push_back(off);
        g.index_[t.name] = g.tensors_.size();
        g.tensors_.push_back(std::move(t));
    }
    g.data_offset_ = align_up(c.pos(), g.alignment_);
    KILN_CHECK(n_tensors == 0 || g.data_offset_ <= g.file_size_, path, ": truncated: the data section would start at ",
               g.data_offset_, " but the file has ", g.file_size_, " bytes");
    const uint64_t data_size = g.file_size_ >= g.data_offset_ ? g.file_size_ - g.data_offset_ : 0;
    std::vector<std::pair<uint64_t, size_t>> spans;
    for (size_t k = 0; k < g.tensors_.size(); ++k) {
        auto& t = g.tensors_[k];
        uint64_t off = rel_offsets[k];
        KILN_CHECK(off <= data_size && t.nbytes <= data_size - off, path, ": tensor '", t.name, "' data [", off, ", ",
                   off + t.nbytes, ") runs past the end of the data section (", data_size, " bytes; file truncated?)");
        t.offset = g.data_offset_ + off;
        if (t.nbytes) spans.push_back({off, k});
    }
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k) {
        const auto& a = g.tensors_[spans[k - 1].second];
        const auto& b = g.tensors_[spans[k].second];
        KILN_CHECK(a.offset + a.nbytes <= b.offset, path, ": tensor data of '", a.name, "' and '", b.name, "' overlap");
    }
    return g;
}

bool GgufFile::has(const std::string& key) const { return kv_index_.count(key) != 0; }

const GgufValue& GgufFile::value(const std::string& key) const {
    auto it = kv_index_.find(key);
    KILN_CHECK(it != kv_index_.end(), path_, ": missing metadata key '", key, "'");
    return kv_[it->second].second;
}

std::string GgufFile::get_string(const std::string& key) const {
    const auto& v = value(key);
    KILN_CHECK(v.type == GgufType::string, path_, ": metadata key '", key, "' is ", type_name(v.type), ", not string");
    return v.s;
}

namespace {
int64_t as_int(const GgufValue& v, const std::string& path, const std::string& key) {
    KILN_CHECK(is_int(v.type), path, ": metadata key '", key, "' is ", type_name(v.type), ", not an integer");
    if (!is_unsigned(v.type)) return v.i;
    KILN_CHECK(v.u <= (uint64_t)INT64_MAX, path, ": metadata key '", key, "' value ", v.u, " does not fit in i64");
    return (int64_t)v.u;
}
}  // namespace

int64_t GgufFile::get_int(const std::string& key) const { return as_int(value(key), path_, key); }

double GgufFile::get_float(const std::string& key) const {
    const auto& v = value(key);
    if (v.type == GgufType::f32 || v.type == GgufType::f64) return v.f;
    KILN_CHECK(is_int(v.type), path_, ": metadata key '", key, "' is ", type_name(v.type), ", not a number");
    return (double)as_int(v, path_, key);
}

bool GgufFile::get_bool(const std::string& key) const {
    const auto& v = value(key);
    KILN_CHECK(v.type == GgufType::boolean, path_, ": metadata key '", key, "' is ", type_name(v.type), ", not bool");
    return v.i != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
    const auto& v = value(key);
    KILN_CHECK(v.type == GgufType::array && v.elem == GgufType::string, path_, ": metadata key '", key,
               "' is not a string array");
    std::vector<std::string> out;
    for (auto& e : v.arr) out.push_back(e.s);
    return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
    const auto& v = value(key);
    KILN_CHECK(v.type == GgufType::array && is_int(v.elem), path_, ": metadata key '", key,
               "' is not an integer array");
    std::vector<int64_t> out;
    for (auto& e : v.arr) out.push_back(as_int(e, path_, key));
    return out;
}

std::vector<std::string> GgufFile::keys() const {
    std::vector<std::string> out;
    for (auto& kv : kv_) out.push_back(kv.first);
    return out;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::at(const std::string& name) const {
    auto* t = find(name);
    KILN_CHECK(t, "missing tensor '", name, "' in ", path_);
    return *t;
}

void GgufFile::read_bytes(const GgufTensor& t, void* dst) const { pread_all(fd_, dst, t.nbytes, t.offset, path_); }

Tensor GgufFile::read(const std::string& name) const {
    const auto& info = at(name);
    Tensor t(info.dtype, info.shape);
    read_bytes(info, t.bytes.data());
    return t;
}

}  // namespace kiln
