#include "runtime/core/platform.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <fcntl.h>
#include <io.h>
#include <windows.h>
// (after windows.h)
#include <psapi.h>
#else
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace kiln::platform {

// Debian/Ubuntu names on a desktop Linux (the packages CI and README.md use). Windows has no Vulkan package: the GPU
// vendor's graphics driver installs both the Vulkan driver (ICD) and the loader, vulkan-1.dll. macOS and iOS have
// Vulkan only through MoltenVK; Android's system image carries the loader and the vendor's driver.
std::string vulkan_driver_advice(Os os) {
    switch (os) {
        case Os::windows:
            return "install or update your GPU vendor's graphics driver (NVIDIA, AMD or Intel), which includes its "
                   "Vulkan driver";
        case Os::apple:
            return "install MoltenVK (the LunarG Vulkan SDK, or Homebrew's molten-vk)";
        case Os::android:
            return "this device's GPU driver does not offer Vulkan 1.2";
        case Os::gnu_linux:
            break;
    }
    return "install your GPU's Vulkan driver, or Mesa's lavapipe for a CPU device: apt-get install mesa-vulkan-drivers";
}

std::string vulkan_loader_advice(Os os) {
    switch (os) {
        case Os::windows:
            return "install or update your GPU vendor's graphics driver (NVIDIA, AMD or Intel), which installs "
                   "vulkan-1.dll, or set KILN_VULKAN_LOADER to its path";
        case Os::apple:
            return "install the LunarG Vulkan SDK, or Homebrew's vulkan-loader and molten-vk, or set "
                   "KILN_VULKAN_LOADER to its path";
        case Os::android:
            return "Android 7.0 and later have one in the system image; or set KILN_VULKAN_LOADER to its path";
        case Os::gnu_linux:
            break;
    }
    return "install one, e.g. Debian's libvulkan1, or set KILN_VULKAN_LOADER to its path";
}

bool parse_double(const std::string& s, double* out) {
    // from_chars does not accept a leading '+', which strtod did: skip one (never before a '-').
    const char* b = s.data();
    const char* e = b + s.size();
    if (b != e && *b == '+' && (e - b) > 1 && b[1] != '-') ++b;
    auto [p, ec] = std::from_chars(b, e, *out);
    return ec == std::errc() && p == e && b != e;
}

namespace {
// fnmatch without flags, for the C libraries that lack it: recursive on '*', which patterns keep short.
bool glob_at(const char* p, const char* s) {
    for (; *p; ++p, ++s) {
        if (*p == '*') {
            while (p[1] == '*') ++p;
            for (const char* t = s;; ++t) {
                if (glob_at(p + 1, t)) return true;
                if (!*t) return false;
            }
        }
        if (!*s) return false;
        if (*p == '?') continue;
        if (*p == '[') {
            const char* q = p + 1;
            const bool neg = *q == '!' || *q == '^';
            if (neg) ++q;
            bool hit = false;
            const char* first = q;
            for (; *q && (*q != ']' || q == first); ++q) {
                if (q[1] == '-' && q[2] && q[2] != ']') {
                    hit |= (unsigned char)*s >= (unsigned char)q[0] && (unsigned char)*s <= (unsigned char)q[2];
                    q += 2;
                } else {
                    hit |= *q == *s;
                }
            }
            if (*q == ']') {  // a closed set; an unclosed '[' is a literal, as in fnmatch
                if (hit == neg) return false;
                p = q;
                continue;
            }
        }
        if (*p == '\\' && p[1]) ++p;
        if (*p != *s) return false;
    }
    return !*s;
}
}  // namespace

bool glob_match_builtin(const std::string& pattern, const std::string& name) {
    return glob_at(pattern.c_str(), name.c_str());
}

#ifdef _WIN32

namespace {
std::wstring wide(const std::string& s) {
    if (s.empty()) return {};
    const int n = MultiByteToWideChar(CP_UTF8, 0, s.data(), (int)s.size(), nullptr, 0);
    std::wstring w((size_t)n, L'\0');
    MultiByteToWideChar(CP_UTF8, 0, s.data(), (int)s.size(), w.data(), n);
    return w;
}

std::string narrow(const wchar_t* w) {
    const int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, nullptr, 0, nullptr, nullptr);
    std::string s(n > 0 ? (size_t)n - 1 : 0, '\0');
    if (n > 1) WideCharToMultiByte(CP_UTF8, 0, w, -1, s.data(), n, nullptr, nullptr);
    return s;
}

// errno for the last Win32 error, so that callers report strerror() alike on every system.
void set_errno_from_win32() {
    switch (GetLastError()) {
        case ERROR_FILE_NOT_FOUND:
        case ERROR_PATH_NOT_FOUND:
        case ERROR_INVALID_NAME:
            errno = ENOENT;
            break;
        case ERROR_ACCESS_DENIED:
        case ERROR_SHARING_VIOLATION:
            errno = EACCES;
            break;
        case ERROR_NOT_ENOUGH_MEMORY:
        case ERROR_OUTOFMEMORY:
            errno = ENOMEM;
            break;
        default:
            errno = EIO;
    }
}

HANDLE handle_of(int fd) { return (HANDLE)_get_osfhandle(fd); }

bool info_of(HANDLE h, FileInfo* out) {
    BY_HANDLE_FILE_INFORMATION bi;
    if (!GetFileInformationByHandle(h, &bi)) return set_errno_from_win32(), false;
    out->size = ((uint64_t)bi.nFileSizeHigh << 32) | bi.nFileSizeLow;
    out->dev = bi.dwVolumeSerialNumber;
    out->ino = ((uint64_t)bi.nFileIndexHigh << 32) | bi.nFileIndexLow;
    // FILETIME: 100 ns ticks since 1601-01-01.
    const uint64_t t = ((uint64_t)bi.ftLastWriteTime.dwHighDateTime << 32) | bi.ftLastWriteTime.dwLowDateTime;
    out->mtime_ns = (int64_t)t * 100;
    out->regular = !(bi.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) && GetFileType(h) == FILE_TYPE_DISK;
    return true;
}
}  // namespace

int open_read(const std::string& path) {
    // FILE_SHARE_DELETE as well: another process may rename over or delete the file while Kiln holds it, as POSIX
    // allows (readers then report the change through FileStamp / MappedFile::check()).
    HANDLE h = CreateFileW(wide(path).c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    if (h == INVALID_HANDLE_VALUE) return set_errno_from_win32(), -1;
    const int fd = _open_osfhandle((intptr_t)h, _O_RDONLY | _O_BINARY);
    if (fd < 0) CloseHandle(h);
    return fd;
}

void close_file(int fd) { _close(fd); }

int64_t pread(int fd, void* dst, uint64_t n, uint64_t off) {
    // ReadFile at an OVERLAPPED offset is the positioned read; one call reads at most 2^32 - 1 bytes.
    OVERLAPPED ov{};
    ov.Offset = (DWORD)off;
    ov.OffsetHigh = (DWORD)(off >> 32);
    DWORD got = 0;
    const DWORD want = (DWORD)(n < 0x40000000u ? n : 0x40000000u);
    if (!ReadFile(handle_of(fd), dst, want, &got, &ov)) {
        if (GetLastError() == ERROR_HANDLE_EOF) return 0;
        return set_errno_from_win32(), -1;
    }
    return (int64_t)got;
}

bool file_info(int fd, FileInfo* out) { return info_of(handle_of(fd), out); }

bool file_info(const std::string& path, FileInfo* out) {
    // No access rights asked: the attributes only, whoever holds the file. BACKUP_SEMANTICS opens folders too.
    HANDLE h = CreateFileW(wide(path).c_str(), 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                           OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, nullptr);
    if (h == INVALID_HANDLE_VALUE) return set_errno_from_win32(), false;
    const bool ok = info_of(h, out);
    CloseHandle(h);
    return ok;
}

const uint8_t* map_read(int fd, uint64_t size) {
    HANDLE m = CreateFileMappingW(handle_of(fd), nullptr, PAGE_READONLY, 0, 0, nullptr);
    if (!m) return set_errno_from_win32(), nullptr;
    void* p = MapViewOfFile(m, FILE_MAP_READ, 0, 0, (SIZE_T)size);
    if (!p) set_errno_from_win32();
    CloseHandle(m);  // the view keeps the mapping alive
    return static_cast<const uint8_t*>(p);
}

void unmap(const uint8_t* data, uint64_t) { UnmapViewOfFile(data); }

void drop_pages(const uint8_t* data, uint64_t n) {
    // VirtualUnlock on pages that are not locked removes them from the working set (documented behaviour); it
    // then reports ERROR_NOT_LOCKED, which is expected.
    const uint64_t ps = page_size();
    const uintptr_t b = (uintptr_t)data / ps * ps, e = ((uintptr_t)data + n) / ps * ps;
    if (e > b) VirtualUnlock((void*)b, (SIZE_T)(e - b));
}

uint64_t page_size() {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwPageSize;
}

bool writable_dir(const std::filesystem::path& dir) { return _waccess(dir.c_str(), 2) == 0; }
bool rename_replace(const std::string& from, const std::string& to) {
    const std::wstring src = wide(from), dst = wide(to);
    HANDLE h = CreateFileW(src.c_str(), DELETE, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    if (h != INVALID_HANDLE_VALUE) {
        // FILE_RENAME_INFO ends in the name: allocate it with room for dst.
        std::string buf(sizeof(FILE_RENAME_INFO) + dst.size() * sizeof(wchar_t), '\0');
        auto* ri = reinterpret_cast<FILE_RENAME_INFO*>(buf.data());
        ri->Flags = FILE_RENAME_FLAG_REPLACE_IF_EXISTS | FILE_RENAME_FLAG_POSIX_SEMANTICS;
        ri->FileNameLength = (DWORD)(dst.size() * sizeof(wchar_t));
        std::memcpy(ri->FileName, dst.c_str(), ri->FileNameLength);
        // FileRenameInfoEx (22): mingw-w64 declares it only for newer _WIN32_WINNT targets than the default.
        const bool ok = SetFileInformationByHandle(h, (FILE_INFO_BY_HANDLE_CLASS)22, ri, (DWORD)buf.size());
        CloseHandle(h);
        if (ok) return true;
    }
    if (MoveFileExW(src.c_str(), dst.c_str(), MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) return true;
    return set_errno_from_win32(), false;
}

std::FILE* fopen(const std::string& path, const char* mode) { return _wfopen(wide(path).c_str(), wide(mode).c_str()); }
int sync_file(std::FILE* f) { return _commit(_fileno(f)); }
bool is_terminal(std::FILE* f) { return _isatty(_fileno(f)) != 0; }

int process_id() { return (int)GetCurrentProcessId(); }

namespace {
double filetime_ms(const FILETIME& f) { return (double)(((uint64_t)f.dwHighDateTime << 32) | f.dwLowDateTime) * 1e-4; }
}  // namespace

double thread_cpu_ms() {
    FILETIME c, e, k, u;
    return GetThreadTimes(GetCurrentThread(), &c, &e, &k, &u) ? filetime_ms(k) + filetime_ms(u) : 0;
}
double process_cpu_ms() {
    FILETIME c, e, k, u;
    return GetProcessTimes(GetCurrentProcess(), &c, &e, &k, &u) ? filetime_ms(k) + filetime_ms(u) : 0;
}

std::tm utc_time(std::time_t t) {
    std::tm tm{};
    gmtime_s(&tm, &t);
    return tm;
}

std::string cpu_name() { return env("PROCESSOR_IDENTIFIER").value_or(""); }

uint64_t physical_memory() {
    MEMORYSTATUSEX ms{};
    ms.dwLength = sizeof ms;
    return GlobalMemoryStatusEx(&ms) ? ms.ullTotalPhys : 0;
}

std::optional<std::string> env(const char* name) {
    const wchar_t* v = _wgetenv(wide(name).c_str());
    if (!v) return std::nullopt;
    return narrow(v);
}

void set_env(const char* name, const std::optional<std::string>& value) {
    // An empty value removes a variable in _wputenv_s, so "" cannot be set: Kiln treats "" as unset anyway.
    _wputenv_s(wide(name).c_str(), value ? wide(*value).c_str() : L"");
}

uint64_t peak_rss() {
    PROCESS_MEMORY_COUNTERS pmc{};
    pmc.cb = sizeof pmc;
    return K32GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc) ? pmc.PeakWorkingSetSize : 0;
}

std::string open_files() { return ""; }

uint64_t raise_open_file_limit() { return 0; }

bool glob_match(const std::string& pattern, const std::string& name) { return glob_match_builtin(pattern, name); }

std::filesystem::path utf8_path(const std::string& utf8) { return std::filesystem::path(wide(utf8)); }
std::string utf8_string(const std::filesystem::path& p) { return narrow(p.c_str()); }

#else  // POSIX

int open_read(const std::string& path) { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }
void close_file(int fd) { ::close(fd); }

int64_t pread(int fd, void* dst, uint64_t n, uint64_t off) { return (int64_t)::pread(fd, dst, n, (off_t)off); }

namespace {
void info_of(const struct stat& sb, FileInfo* out) {
    out->size = (uint64_t)sb.st_size;
    out->dev = (uint64_t)sb.st_dev;
    out->ino = (uint64_t)sb.st_ino;
#ifdef __APPLE__
    out->mtime_ns = (int64_t)sb.st_mtimespec.tv_sec * 1000000000 + sb.st_mtimespec.tv_nsec;
#else
    out->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
#endif
    out->regular = S_ISREG(sb.st_mode);
}
}  // namespace

bool file_info(int fd, FileInfo* out) {
    struct stat sb {};
    if (::fstat(fd, &sb) != 0) return false;
    info_of(sb, out);
    return true;
}

bool file_info(const std::string& path, FileInfo* out) {
    struct stat sb {};
    if (::stat(path.c_str(), &sb) != 0) return false;
    info_of(sb, out);
    return true;
}

const uint8_t* map_read(int fd, uint64_t size) {
    const uint64_t ps = page_size(), len = (size + ps - 1) / ps * ps;
    void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : static_cast<const uint8_t*>(p);
}

void unmap(const uint8_t* data, uint64_t size) {
    const uint64_t ps = page_size(), len = (size + ps - 1) / ps * ps;
    ::munmap(const_cast<uint8_t*>(data), len);
}

void drop_pages(const uint8_t* data, uint64_t n) {
    const uint64_t ps = page_size();
    const uintptr_t b = (uintptr_t)data / ps * ps, e = ((uintptr_t)data + n) / ps * ps;
    if (e > b) ::madvise((void*)b, e - b, MADV_DONTNEED);
}

uint64_t page_size() { return (uint64_t)::sysconf(_SC_PAGESIZE); }

bool writable_dir(const std::filesystem::path& dir) { return ::access(dir.c_str(), W_OK) == 0; }
bool rename_replace(const std::string& from, const std::string& to) { return ::rename(from.c_str(), to.c_str()) == 0; }
std::FILE* fopen(const std::string& path, const char* mode) { return std::fopen(path.c_str(), mode); }
int sync_file(std::FILE* f) { return ::fsync(::fileno(f)); }
bool is_terminal(std::FILE* f) { return ::isatty(::fileno(f)) != 0; }

int process_id() { return (int)::getpid(); }

double thread_cpu_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
double process_cpu_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

std::tm utc_time(std::time_t t) {
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    return tm;
}

std::string cpu_name() {
    std::ifstream f("/proc/cpuinfo");  // Linux; elsewhere nothing is read
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
            return line.substr(line.find(':') + 2);
    return "";
}

uint64_t physical_memory() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), ps = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && ps > 0 ? (uint64_t)pages * (uint64_t)ps : 0;
}

std::optional<std::string> env(const char* name) {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
}

void set_env(const char* name, const std::optional<std::string>& value) {
    if (value)
        ::setenv(name, value->c_str(), 1);
    else
        ::unsetenv(name);
}

uint64_t peak_rss() {
    rusage ru{};
    if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
#ifdef __APPLE__
    return (uint64_t)ru.ru_maxrss;  // bytes on macOS
#else
    return (uint64_t)ru.ru_maxrss * 1024;  // KiB on Linux
#endif
}

std::string open_files() {
    std::error_code ec;
    std::filesystem::directory_iterator it("/proc/self/fd", ec), end;
    if (ec) return "";
    long n = 0;
    for (; it != end; it.increment(ec)) {
        if (ec) return "";
        ++n;
    }
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return std::to_string(n) + " open files";
    return std::to_string(n) + " of " + std::to_string((unsigned long long)rl.rlim_cur) + " open files";
}

uint64_t raise_open_file_limit() {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur != rl.rlim_max) {
        rlimit up = rl;
        up.rlim_cur = rl.rlim_max;
#ifdef __APPLE__
        up.rlim_cur = std::min<rlim_t>(rl.rlim_max, OPEN_MAX);  // macOS refuses more than OPEN_MAX
#endif
        if (::setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
    }
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

bool glob_match(const std::string& pattern, const std::string& name) {
    return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::filesystem::path utf8_path(const std::string& utf8) { return std::filesystem::path(utf8); }
std::string utf8_string(const std::filesystem::path& p) { return p.string(); }

#endif

}  // namespace kiln::platform
