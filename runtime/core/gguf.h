#pragma once
// GGUF v3 reader and streaming writer: the container of a Kiln model file.
//
// Layout: "GGUF", u32 version=3, u64 n_tensors, u64 n_kv, the metadata KVs, the tensor infos
// (name, u32 n_dims, u64 dims innermost first, u32 ggml type, u64 offset relative to the data
// section), zero padding to `general.alignment`, then the data section.
// Kiln writes general.alignment = 4096 (u32) and aligns EVERY tensor's offset to it, so each
// tensor can be mapped or uploaded with a page/buffer-offset-aligned start (tiny models pay at most
// 4 KiB per tensor; the fixtures stay well under 3 MB). The reader accepts any power-of-two
// alignment >= 8 (default 32, as the GGUF spec says, when the key is absent).
// Supported ggml types: F32=0, F16=1, I32=26, I64=27, BF16=30, and the block-quantized Q4_0=2, Q4_1=3,
// Q5_0=6, Q5_1=7, Q8_0=8, Q2_K=10, Q3_K=11, Q4_K=12, Q5_K=13, Q6_K=14 (ggml's block layouts,
// runtime/core/quant.h; rows whole blocks). Any other type fails at open, naming it (ggml_type_name).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"

namespace kiln {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kGgufAlignment = 4096;
constexpr uint32_t kGgufMaxDims = 8;

enum class GgufType : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};

// One metadata value. Scalars live in i/u/f/b, strings in s, arrays in arr (all of type elem).
struct GgufValue {
    GgufType type = GgufType::u8;
    int64_t i = 0;   // signed ints (and bool as 0/1)
    uint64_t u = 0;  // unsigned ints
    double f = 0;    // f32/f64
    std::string s;
    GgufType elem = GgufType::u8;  // arrays: element type
    std::vector<GgufValue> arr;
};

struct GgufTensor {
    std::string name;
    DType dtype;
    Shape shape;          // PyTorch order, outermost first
    uint64_t offset = 0;  // absolute file offset
    uint64_t nbytes = 0;
};

class GgufFile {
public:
    // Opens and validates the whole header (magic, version, every metadata type and length,
    // tensor infos, dims overflow, alignment, offsets and sizes inside the file, overlaps,
    // duplicates) before returning. Throws kiln::Error naming the file, key/tensor and problem.
    static GgufFile open(const std::string& path);
    GgufFile(GgufFile&&) noexcept;
    GgufFile& operator=(GgufFile&&) noexcept;
    ~GgufFile();

    // Metadata getters throw kiln::Error naming the key if it is absent or of the wrong type.
    bool has(const std::string& key) const;
    const GgufValue& value(const std::string& key) const;
    std::string get_string(const std::string& key) const;
    int64_t get_int(const std::string& key) const;   // any integer type (u64 must fit in i64)
    double get_float(const std::string& key) const;  // f32/f64 (integers are accepted too)
    bool get_bool(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<int64_t> get_int_array(const std::string& key) const;
    std::vector<std::string> keys() const;  // in file order

    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* find(const std::string& name) const;
    const GgufTensor& at(const std::string& name) const;  // throws "missing tensor 'x' in FILE"
    Tensor read(const std::string& name) const;
    void read_bytes(const GgufTensor& t, void* dst) const;  // dst holds t.nbytes
    const std::string& path() const { return path_; }
    uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
    uint32_t alignment() const { return alignment_; }
    uint64_t file_size() const { return file_size_; }

private:
    GgufFile() = default;
    std::string path_;
    int fd_ = -1;
    uint64_t file_size_ = 0, data_offset_ = 0;
    uint32_t alignment_ = 32;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::map<std::string, size_t> kv_index_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string, size_t> index_;
};

// Streaming writer: metadata and tensor descriptions are collected first; write() emits the header
// and then calls each tensor's fill callback in order, so peak memory is about one tensor.
class GgufWriter {
public:
    GgufWriter();
    // Setting a key again replaces its value (the key keeps its first position).
    void set_string(const std::string& key, const std::string& v);
    void set_u32(const std::string& key, uint32_t v);
    void set_i64(const std::string& key, int64_t v);
    void set_f32(const std::string& key, float v);
    void set_bool(const std::string& key, bool v);
    void set_string_array(const std::string& key, const std::vector<std::string>& v);
    void set_i64_array(const std::string& key, const std::vector<int64_t>& v);
    void set_value(const std::string& key, GgufValue v);

    // Adds a tensor; returns its data offset relative to the data section (aligned to 4096).
    // fill(dst) must write exactly dtype_nbytes(dtype, numel(shape)) bytes. u8 is not a GGUF type.
    uint64_t add_tensor(std::string name, DType dtype, Shape shape, std::function<void(void* dst)> fill);
    uint64_t data_size() const { return data_size_; }  // bytes of the data section so far

    // Called after each tensor is written (index, count); for progress bars.
    std::function<void(size_t, size_t)> on_tensor;

    // Writes path + ".tmp" and renames it to path. On any exception (including from a fill
    // callback) the temporary file is removed and no output file is left; the error is rethrown.
    void write(const std::string& path);

private:
    struct Pending {
        std::string name;
        DType dtype;
        Shape shape;
        uint64_t offset, nbytes;
        std::function<void(void*)> fill;
    };
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<Pending> tensors_;
    std::map<std::string, size_t> names_;
    uint64_t data_size_ = 0;
};

// ggml type id <-> DType; ggml_type_of throws for u8.
uint32_t ggml_type_of(DType t);
const char* ggml_type_name(uint32_t ggml_type);

}  // namespace kiln
