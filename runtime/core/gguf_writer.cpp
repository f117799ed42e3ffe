// GGUF v3 writer: metadata and tensor infos first, then each tensor's bytes streamed from its fill
// callback, to PATH.tmp renamed on success (no partial output file on any error).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/platform.h"

namespace kiln {

namespace {
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
}  // namespace

// ---------------------------------------------------------------------------------------- writer

namespace {

class Out {
public:
    explicit Out(const std::string& path) : path_(path) {
        f_ = platform::fopen(path, "wb");
        KILN_CHECK(f_, path, ": cannot open for writing: ", std::strerror(errno));
    }
    ~Out() {
        if (f_) std::fclose(f_);
    }
    void write(const void* p, size_t n) {
        KILN_CHECK(std::fwrite(p, 1, n, f_) == n, path_, ": write failed: ", std::strerror(errno));
        pos_ += n;
    }
    template <class T>
    void put(T v) {
        write(&v, sizeof(T));
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        write(s.data(), s.size());
    }
    void pad_to(uint64_t target) {
        static const uint8_t zeros[4096] = {};
        while (pos_ < target) write(zeros, (size_t)std::min<uint64_t>(sizeof zeros, target - pos_));
    }
    void close() {
        int r1 = std::fflush(f_);
        int r2 = platform::sync_file(f_);
        int r3 = std::fclose(f_);
        f_ = nullptr;
        KILN_CHECK(r1 == 0 && r2 == 0 && r3 == 0, path_, ": write failed on close: ", std::strerror(errno));
    }
    uint64_t pos() const { return pos_; }

private:
    std::string path_;
    std::FILE* f_ = nullptr;
    uint64_t pos_ = 0;
};

void write_value(Out& o, const GgufValue& v) {
    switch (v.type) {
        case GgufType::u8:
            o.put<uint8_t>((uint8_t)v.u);
            break;
        case GgufType::i8:
            o.put<int8_t>((int8_t)v.i);
            break;
        case GgufType::u16:
            o.put<uint16_t>((uint16_t)v.u);
            break;
        case GgufType::i16:
            o.put<int16_t>((int16_t)v.i);
            break;
        case GgufType::u32:
            o.put<uint32_t>((uint32_t)v.u);
            break;
        case GgufType::i32:
            o.put<int32_t>((int32_t)v.i);
            break;
        case GgufType::u64:
            o.put<uint64_t>(v.u);
            break;
        case GgufType::i64:
            o.put<int64_t>(v.i);
            break;
        case GgufType::f32:
            o.put<float>((float)v.f);
            break;
        case GgufType::f64:
            o.put<double>(v.f);
            break;
        case GgufType::boolean:
            o.put<uint8_t>(v.i ? 1 : 0);
            break;
        case GgufType::string:
            o.str(v.s);
            break;
        case GgufType::array:
            o.put<uint32_t>((uint32_t)v.elem);
            o.put<uint64_t>(v.arr.size());
            for (auto& e : v.arr) write_value(o, e);
            break;
    }
}

}  // namespace

GgufWriter::GgufWriter() { set_u32("general.alignment", kGgufAlignment); }

void GgufWriter::set_value(const std::string& key, GgufValue v) {
    KILN_CHECK(!key.empty(), "GGUF writer: empty metadata key");
    for (auto& kv : kv_)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_string(const std::string& key, const std::string& v) {
    GgufValue x;
    x.type = GgufType::string;
    x.s = v;
    set_value(key, std::move(x));
}
void GgufWriter::set_u32(const std::string& key, uint32_t v) {
    GgufValue x;
    x.type = GgufType::u32;
    x.u = v;
    set_value(key, std::move(x));
}
void GgufWriter::set_i64(const std::string& key, int64_t v) {
    GgufValue x;
    x.type = GgufType::i64;
    x.i = v;
    set_value(key, std::move(x));
}
void GgufWriter::set_f32(const std::string& key, float v) {
    GgufValue x;
    x.type = GgufType::f32;
    x.f = v;
    set_value(key, std::move(x));
}
void GgufWriter::set_bool(const std::string& key, bool v) {
    GgufValue x;
    x.type = GgufType::boolean;
    x.i = v ? 1 : 0;
    set_value(key, std::move(x));
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
    GgufValue x;
    x.type = GgufType::array;
    x.elem = GgufType::string;
    for (auto& s : v) {
        GgufValue e;
        e.type = GgufType::string;
        e.s = s;
        x.arr.push_back(std::move(e));
    }
    set_value(key, std::move(x));
}
void GgufWriter::set_i64_array(const std::string& key, const std::vector<int64_t>& v) {
    GgufValue x;
    x.type = GgufType::array;
    x.elem = GgufType::i64;
    for (int64_t i : v) {
        GgufValue e;
        e.type = GgufType::i64;
        e.i = i;
        x.arr.push_back(std::move(e));
    }
    set_value(key, std::move(x));
}

uint64_t GgufWriter::add_tensor(std::string name, DType dtype, Shape shape, std::function<void(void*)> fill) {
    KILN_CHECK(!name.empty(), "GGUF writer: empty tensor name");
    KILN_CHECK(!names_.count(name), "GGUF writer: tensor '", name, "' added twice");
    KILN_CHECK(shape.size() <= kGgufMaxDims, "GGUF writer: tensor '", name, "' has more than ", kGgufMaxDims, " dims");
    ggml_type_of(dtype);  // throws for u8
    for (int64_t d : shape) KILN_CHECK(d >= 0, "GGUF writer: tensor '", name, "' has a negative dim");
    Pending p{std::move(name), dtype, std::move(shape), 0, 0, std::move(fill)};
    KILN_CHECK(dtype_block(dtype) == 1 || (!p.shape.empty() && p.shape.back() % dtype_block(dtype) == 0),
               "GGUF writer: tensor '", p.name, "' ", shape_str(p.shape), " of type ", dtype_name(dtype),
               " has rows that are not whole ", dtype_block(dtype), "-value blocks");
    p.nbytes = dtype_nbytes(dtype, shape_numel(p.shape));
    p.offset = align_up(data_size_, kGgufAlignment);
    data_size_ = p.offset + p.nbytes;
    names_[p.name] = tensors_.size();
    tensors_.push_back(std::move(p));
    return tensors_.back().offset;
}

void GgufWriter::write(const std::string& path) {
    const std::string tmp = path + ".tmp";
    try {
        Out o(tmp);
        o.put<uint32_t>(kGgufMagic);
        o.put<uint32_t>(3);
        o.put<uint64_t>(tensors_.size());
        o.put<uint64_t>(kv_.size());
        for (auto& [key, v] : kv_) {
            o.str(key);
            o.put<uint32_t>((uint32_t)v.type);
            write_value(o, v);
        }
        for (auto& t : tensors_) {
            o.str(t.name);
            o.put<uint32_t>((uint32_t)t.shape.size());
            for (size_t d = t.shape.size(); d-- > 0;) o.put<uint64_t>((uint64_t)t.shape[d]);  // innermost first
            o.put<uint32_t>(ggml_type_of(t.dtype));
            o.put<uint64_t>(t.offset);
        }
        const uint64_t data_start = align_up(o.pos(), kGgufAlignment);
        o.pad_to(data_start);
        std::vector<uint8_t> buf;
        for (size_t k = 0; k < tensors_.size(); ++k) {
            auto& t = tensors_[k];
            o.pad_to(data_start + t.offset);
            buf.resize((size_t)t.nbytes);
            if (t.fill) t.fill(buf.data());
            o.write(buf.data(), buf.size());
            if (on_tensor) on_tensor(k + 1, tensors_.size());
        }
        o.close();
        KILN_CHECK(platform::rename_replace(tmp, path), path, ": cannot rename temporary file: ", std::strerror(errno));
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        throw;
    }
}

}  // namespace kiln
