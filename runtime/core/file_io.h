#pragma once
// Positioned reads shared by the safetensors and GGUF readers, and the stamp that tells a reader its file changed.
#include <cstdint>
#include <string>

namespace kiln {
// Reads exactly n bytes at offset off (retrying short reads and EINTR); throws kiln::Error (ErrorKind::io) naming
// `file` on an I/O error or an unexpected end of file.
void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const std::string& file);

// What a file was when a reader opened it: size, modification time and identity (device, inode). A reader that
// reads the file again later (weights at each generation, or through a mapping) calls check() first: a file
// truncated, rewritten or replaced since is an ErrorKind::io error naming it, not a short read or, through a
// mapping, SIGBUS.
struct FileStamp {
    uint64_t size = 0, dev = 0, ino = 0;
    int64_t mtime_ns = 0;
    static FileStamp of(const std::string& path);  // throws ErrorKind::io when the file cannot be stat'ed
    void check(const std::string& path) const;     // throws ErrorKind::io when `path` is no longer this
    bool operator==(const FileStamp&) const = default;
};
}  // namespace kiln
