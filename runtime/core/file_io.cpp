#include "runtime/core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/core/error.h"

namespace kiln {

void check_output_path(const std::string& out, const char* flag) {
    namespace fs = std::filesystem;
    fs::path dir = fs::path(out).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    KILN_CHECK(fs::exists(dir, ec), flag, " ", out, ": folder '", dir.string(), "' does not exist");
    KILN_CHECK(fs::is_directory(dir, ec), flag, " ", out, ": '", dir.string(), "' is not a folder");
    KILN_CHECK(::access(dir.c_str(), W_OK) == 0, flag, " ", out, ": folder '", dir.string(), "' is not writable");
    KILN_CHECK(!fs::is_directory(out, ec), flag, " ", out, " is a folder (give a file name)");
}
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
int64_t mtime_ns(const struct stat& sb) { return (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec; }
uint64_t page_size() { return (uint64_t)::sysconf(_SC_PAGESIZE); }
}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
    std::shared_ptr<MappedFile> m(new MappedFile);
    m->path_ = path;
    m->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    KILN_CHECK(m->fd_ >= 0, path, ": cannot open: ", std::strerror(errno));
    struct stat sb {};
    KILN_CHECK(::fstat(m->fd_, &sb) == 0, path, ": cannot stat");
    m->size_ = (uint64_t)sb.st_size;
    m->mtime_ns_ = mtime_ns(sb);
    m->ino_ = sb.st_ino;
    const uint64_t ps = page_size();
    m->map_size_ = (m->size_ + ps - 1) / ps * ps;
    if (m->map_size_) {
        void* p = ::mmap(nullptr, m->map_size_, PROT_READ, MAP_SHARED, m->fd_, 0);
        KILN_CHECK(p != MAP_FAILED, path, ": cannot map: ", std::strerror(errno));
        m->data_ = static_cast<const uint8_t*>(p);
    }
    return m;
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), map_size_);
    if (fd_ >= 0) ::close(fd_);
}

void MappedFile::check() const {
    // Truncating the mapped inode is what makes touching the mapping fatal; replacing the file at `path`
    // (a new inode) leaves the mapping valid but stale. Both are reported.
    struct stat fd_sb {};
    struct stat path_sb {};
    if (::fstat(fd_, &fd_sb) != 0) KILN_FAIL_AS(io, path_, ": cannot stat the model file while in use");
    if ((uint64_t)fd_sb.st_size != size_ || mtime_ns(fd_sb) != mtime_ns_)
        KILN_FAIL_AS(io, path_, ": the model file changed on disk while in use (", size_, " -> ",
                     (uint64_t)fd_sb.st_size, " bytes); reopen it");
    if (::stat(path_.c_str(), &path_sb) != 0 || path_sb.st_ino != ino_)
        KILN_FAIL_AS(io, path_, ": the model file was replaced or removed while in use; reopen it");
}

void MappedFile::read(void* dst, uint64_t n, uint64_t off) const {
    KILN_CHECK(off <= size_ && n <= size_ - off, path_, ": read of ", n, " bytes at offset ", off, " past the end (",
               size_, " bytes)");
    check();
    std::memcpy(dst, data_ + off, n);
    const uint64_t ps = page_size(), first = off / ps * ps, last = (off + n) / ps * ps;
    if (last > first) ::madvise(const_cast<uint8_t*>(data_) + first, last - first, MADV_DONTNEED);
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
