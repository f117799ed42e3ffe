#pragma once
// Puts fuzzer bytes in an anonymous in-memory file and returns a path to it (/proc/self/fd/N),
// since the readers take paths.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace kiln::fuzz {

struct MemFile {
    int fd = -1;
    std::string path;
    MemFile(const uint8_t* data, size_t size) {
        fd = ::memfd_create("kiln_fuzz", MFD_CLOEXEC);
        if (fd < 0) return;
        size_t off = 0;
        while (off < size) {
            ssize_t n = ::write(fd, data + off, size - off);
            if (n <= 0) break;
            off += (size_t)n;
        }
        path = "/proc/self/fd/" + std::to_string(fd);
    }
    ~MemFile() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace kiln::fuzz
