#pragma once
// Positioned reads shared by the safetensors and GGUF readers.
#include <cstdint>
#include <string>

namespace kiln {
// Reads exactly n bytes at offset off (retrying short reads and EINTR); throws kiln::Error naming
// `file` on an I/O error or an unexpected end of file.
void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const std::string& file);
}  // namespace kiln
