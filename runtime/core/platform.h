#pragma once
// The operating system behind one small interface: files read at an offset and mapped read-only, file identity,
// the environment, terminals and host memory. POSIX (Linux, macOS, Android) and Windows implement it in
// platform.cpp; nothing else in Kiln includes <unistd.h>, <sys/*.h> or <windows.h>. Paths are UTF-8 everywhere
// (on Windows they are widened here, so any file name opens).
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>

namespace kiln::platform {

// Opens `path` for reading (shared with readers, writers and renames, not inherited by child processes). Returns a
// descriptor, or -1 with errno set.
int open_read(const std::string& path);
void close_file(int fd);

// Reads up to n bytes at offset off without moving a shared file position (safe from several threads). Returns
// the bytes read, 0 at the end of the file, -1 with errno set on an error (EINTR: try again).
int64_t pread(int fd, void* dst, uint64_t n, uint64_t off);

// What identifies a file's contents: size, last write time, and identity (device + inode; on Windows the volume
// serial number + file index). regular: a plain file (not a folder or a device).
struct FileInfo {
    uint64_t size = 0, dev = 0, ino = 0;
    int64_t mtime_ns = 0;
    bool regular = false;
};
bool file_info(int fd, FileInfo* out);                   // false with errno set
bool file_info(const std::string& path, FileInfo* out);  // false with errno set

// The whole file (size bytes, size > 0) mapped read-only and shared with the page cache; nullptr with errno set.
// On Windows a mapped file cannot be truncated by others (the system refuses); on POSIX it can (see MappedFile).
const uint8_t* map_read(int fd, uint64_t size);
void unmap(const uint8_t* data, uint64_t size);
// Drops the pages from the one holding `data` up to (not including) the one holding data + n from this process's
// resident set; they stay in the page cache.
void drop_pages(const uint8_t* data, uint64_t n);
uint64_t page_size();

// Whether the process may create files in the folder `dir`.
bool writable_dir(const std::filesystem::path& dir);
// Renames `from` to `to`, replacing `to` atomically even while others hold it open (POSIX rename; on Windows the
// POSIX-semantics rename of Windows 10 1709+, else MoveFileEx). false with errno set.
bool rename_replace(const std::string& from, const std::string& to);
// std::fopen with a UTF-8 path.
std::FILE* fopen(const std::string& path, const char* mode);
// Flushes a stdio stream's file to the disk (fsync / _commit); 0 on success.
int sync_file(std::FILE* f);
bool is_terminal(std::FILE* f);
int process_id();
// CPU time of the calling thread, and of the whole process (every thread), in ms.
double thread_cpu_ms();
double process_cpu_ms();
// The calendar time t in UTC (gmtime, thread-safe).
std::tm utc_time(std::time_t t);
// The CPU's model name ("" when unknown): /proc/cpuinfo on Linux, PROCESSOR_IDENTIFIER on Windows.
std::string cpu_name();
// Physical memory of the host in bytes; 0 when unknown.
uint64_t physical_memory();

// The environment variable `name` as UTF-8, or nothing when unset.
std::optional<std::string> env(const char* name);

// Sets (value) or removes (nullopt) an environment variable of this process: the tests' knobs.
void set_env(const char* name, const std::optional<std::string>& value);
// The largest resident set (working set) this process has had, in bytes; 0 when unknown.
uint64_t peak_rss();
// "N of M open files": this process's file descriptors (Linux: /proc/self/fd) and RLIMIT_NOFILE; "" when unknown.
// Error messages name it where a driver may report running out of them as out of memory.
std::string open_files();
// Raises this process's soft limit on open files to its hard limit (Linux, macOS; nothing elsewhere). GPU
// drivers may hold a file descriptor per device memory object (ROCm's hipMemCreate does; the H200 runs refused 1 MiB
// allocations with an empty heap after a test process had made many contexts) and report the 1024 of a default
// soft limit as out of device memory. Returns the soft limit in force after it (0: unknown).
uint64_t raise_open_file_limit();

// fnmatch(pattern, name, 0): '*' any run of characters (slashes too), '?' one, [abc] [a-z] [!a] a set, '\' escapes.
bool glob_match(const std::string& pattern, const std::string& name);
// The implementation glob_match uses where the C library has no fnmatch (Windows); on all systems, for the tests.
bool glob_match_builtin(const std::string& pattern, const std::string& name);

// A UTF-8 string as a filesystem path (on Windows through UTF-16, not the ANSI code page).
std::filesystem::path utf8_path(const std::string& utf8);
// A path as UTF-8 (the inverse of utf8_path).
std::string utf8_string(const std::filesystem::path& p);

// The operating systems whose users install Vulkan differently. Android and Apple are apart from gnu_linux (a desktop
// Linux with a package manager) because nothing there is installed with apt-get. (Not `linux`: GCC's GNU dialects
// define it as a macro.)
enum class Os { gnu_linux, windows, apple, android };
// The system this build targets.
constexpr Os this_os() {
#if defined(_WIN32)
    return Os::windows;
#elif defined(__APPLE__)
    return Os::apple;
#elif defined(__ANDROID__)
    return Os::android;
#else
    return Os::gnu_linux;
#endif
}
// What a user of `os` does to get a Vulkan driver, and a Vulkan loader: the advice that ends Kiln's one line when
// Vulkan cannot run ("no Vulkan device (<why>; <advice>)", "no Vulkan loader found (tried ...; <advice>)"). The one
// place this text is decided; the CLI and the C API print it as it is.
std::string vulkan_driver_advice(Os os = this_os());
std::string vulkan_loader_advice(Os os = this_os());

// A decimal number in the C locale ("0.5", "1e-3", "-2"), whatever locale the host app set: the whole string must be
// the number. false when it is not one.
bool parse_double(const std::string& s, double* out);

}  // namespace kiln::platform
