#include "runtime/core/file_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/core/error.h"
#include "runtime/core/platform.h"

namespace kiln {

void check_output_path(const std::string& out, const char* flag) {
    namespace fs = std::filesystem;
    const fs::path p = platform::utf8_path(out);
    fs::path dir = p.parent_path();
    if (dir.empty()) dir = ".";
    const std::string dir_name = platform::utf8_string(dir);
    std::error_code ec;
    KILN_CHECK(fs::exists(dir, ec), flag, " ", out, ": folder '", dir_name, "' does not exist");
    KILN_CHECK(fs::is_directory(dir, ec), flag, " ", out, ": '", dir_name, "' is not a folder");
    KILN_CHECK(platform::writable_dir(dir), flag, " ", out, ": folder '", dir_name, "' is not writable");
    KILN_CHECK(!fs::is_directory(p, ec), flag, " ", out, " is a folder (give a file name)");
}
void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const std::string& file) {
    auto* p = static_cast<uint8_t*>(dst);
    while (n) {
        const int64_t r = platform::pread(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            KILN_FAIL_AS(io, file, ": read failed at offset ", off, (r == 0 ? " (unexpected end of file)" : ""));
        p += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
    std::shared_ptr<MappedFile> m(new MappedFile);
    m->path_ = path;
    m->fd_ = platform::open_read(path);
    KILN_CHECK(m->fd_ >= 0, path, ": cannot open: ", std::strerror(errno));
    platform::FileInfo fi;
    KILN_CHECK(platform::file_info(m->fd_, &fi), path, ": cannot stat");
    m->size_ = fi.size;
    m->mtime_ns_ = fi.mtime_ns;
    m->ino_ = fi.ino;
    if (m->size_) {
        m->data_ = platform::map_read(m->fd_, m->size_);
        KILN_CHECK(m->data_, path, ": cannot map: ", std::strerror(errno));
    }
    return m;
}

MappedFile::~MappedFile() {
    if (data_) platform::unmap(data_, size_);
    if (fd_ >= 0) platform::close_file(fd_);
}

void MappedFile::check() const {
    // Truncating the mapped inode is what makes touching the mapping fatal; replacing the file at `path`
    // (a new inode) leaves the mapping valid but stale. Both are reported.
    platform::FileInfo fd_fi, path_fi;
    if (!platform::file_info(fd_, &fd_fi)) KILN_FAIL_AS(io, path_, ": cannot stat the model file while in use");
    if (fd_fi.size != size_ || fd_fi.mtime_ns != mtime_ns_)
        KILN_FAIL_AS(io, path_, ": the model file changed on disk while in use (", size_, " -> ", fd_fi.size,
                     " bytes); reopen it");
    if (!platform::file_info(path_, &path_fi) || path_fi.ino != ino_)
        KILN_FAIL_AS(io, path_, ": the model file was replaced or removed while in use; reopen it");
}

void MappedFile::read(void* dst, uint64_t n, uint64_t off) const {
    KILN_CHECK(off <= size_ && n <= size_ - off, path_, ": read of ", n, " bytes at offset ", off, " past the end (",
               size_, " bytes)");
    check();
    std::memcpy(dst, data_ + off, n);
    platform::drop_pages(data_ + off, n);
}

namespace {
bool stat_stamp(const std::string& path, FileStamp* s) {
    platform::FileInfo fi;
    if (!platform::file_info(path, &fi)) return false;
    s->size = fi.size;
    s->dev = fi.dev;
    s->ino = fi.ino;
    s->mtime_ns = fi.mtime_ns;
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
