#include "runtime/core/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.h"

namespace kiln {
void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const std::string& file) {
    auto* p = static_cast<uint8_t*>(dst);
    while (n) {
        ssize_t r = ::pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            KILN_FAIL_AS(io, file, ": read failed at offset ", off, (r == 0 ? " (unexpected end of file)" : ""));
        p += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
}

namespace {
bool stat_stamp(const std::string& path, FileStamp* s) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return false;
    s->size = (uint64_t)st.st_size;
    s->dev = (uint64_t)st.st_dev;
    s->ino = (uint64_t)st.st_ino;
    s->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return true;
}
}  // namespace

FileStamp FileStamp::of(const std::string& path) {
    FileStamp s;
    if (!stat_stamp(path, &s)) KILN_FAIL_AS(io, path, ": cannot stat (", std::strerror(errno), ")");
    return s;
}

void FileStamp::check(const std::string& path) const {
    FileStamp now;
    if (!stat_stamp(path, &now))
        KILN_FAIL_AS(io, path, ": gone since it was opened (", std::strerror(errno), "); open the model again");
    if (now == *this) return;
    if (now.size != size)
        KILN_FAIL_AS(io, path, ": changed on disk since it was opened (", size, " bytes then, ", now.size,
                     " now); open the model again");
    KILN_FAIL_AS(io, path, ": changed on disk since it was opened (",
                 now.dev != dev || now.ino != ino ? "replaced" : "rewritten", "); open the model again");
}
}  // namespace kiln
