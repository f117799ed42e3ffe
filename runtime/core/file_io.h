#pragma once
// Positioned reads shared by the safetensors and GGUF readers, read-only file mappings, and the stamp that tells
// a reader its file changed.
#include <cstdint>
#include <memory>
#include <string>

namespace kiln {
// An output path is checked before any work (before a model or input is read): its folder must exist and be
// writable, and it must not be a folder itself. `flag` names the option in the error ("-o").
void check_output_path(const std::string& path, const char* flag);

// Reads exactly n bytes at offset off (retrying short reads and EINTR); throws kiln::Error (ErrorKind::io) naming
// `file` on an I/O error or an unexpected end of file.
void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const std::string& file);

// A whole file mapped read-only and shared with the page cache: its bytes are never copied into anonymous memory,
// and pages are read on first touch. Touching a page beyond the end of a file truncated after mapping raises
// SIGBUS on POSIX (Windows refuses to truncate a mapped file), so users call check() before they read (or let the
// device read) the mapping: it throws kiln::Error when the file's size, modification time or inode changed since it was
// mapped.
class MappedFile {
public:
    static std::shared_ptr<const MappedFile> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }
    const std::string& path() const { return path_; }
    void check() const;
    // Copies n bytes at offset off to dst after check(), then drops those pages from this process's resident set
    // (they stay in the page cache): reading a model through the mapping leaves no copy behind.
    void read(void* dst, uint64_t n, uint64_t off) const;

private:
    MappedFile() = default;
    std::string path_;
    int fd_ = -1;
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
    int64_t mtime_ns_ = 0;
    uint64_t ino_ = 0;
};

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
