#pragma once
// Bounds-checked safetensors reader (one file, or a sharded set through its index.json) and writer.
// Tensors are read on demand with pread, so peak memory is one tensor, not the file.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"

namespace kiln {

struct SafeTensorInfo {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t offset = 0;  // absolute byte offset in its file
    uint64_t nbytes = 0;
    int file = 0;  // index into SafeTensors::files()
};

class SafeTensors {
public:
    // Opens a .safetensors file, or a *.safetensors.index.json of a sharded checkpoint.
    // Validates everything before returning; throws kiln::Error naming file, tensor and problem.
    static SafeTensors open(const std::string& path);
    SafeTensors(SafeTensors&&) noexcept;
    SafeTensors& operator=(SafeTensors&&) noexcept;
    ~SafeTensors();

    const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
    const SafeTensorInfo* find(const std::string& name) const;
    const SafeTensorInfo& at(const std::string& name) const;  // throws naming the missing tensor
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::vector<std::string>& files() const { return paths_; }

    Tensor read(const std::string& name) const;
    void read_bytes(const SafeTensorInfo& t, void* dst) const;  // dst holds t.nbytes

private:
    SafeTensors() = default;
    void add_file(const std::string& path, const std::vector<std::string>* expected_names);
    std::vector<std::string> paths_;
    std::vector<int> fds_;
    std::vector<SafeTensorInfo> tensors_;
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

// Writes tensors (name order as given) to path atomically: path.tmp then rename.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln
