#include "runtime/core/file_io.h"

#include <unistd.h>

#include <cerrno>

#include "runtime/core/error.h"

namespace kiln {
void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const std::string& file) {
    auto* p = static_cast<uint8_t*>(dst);
    while (n) {
        ssize_t r = ::pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        KILN_CHECK(r > 0, file, ": read failed at offset ", off, (r == 0 ? " (unexpected end of file)" : ""));
        p += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
}
}  // namespace kiln
