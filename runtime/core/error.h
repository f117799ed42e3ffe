#pragma once
// The one exception type of Kiln, and the checks that throw it.
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

// What failed, for the callers that act on it (the C API's kiln_status); nearly every error is `generic`.
enum class ErrorKind { generic, io, out_of_memory, device_lost };

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
    Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
    ErrorKind kind() const { return kind_; }

private:
    ErrorKind kind_ = ErrorKind::generic;
};

namespace detail {
template <class... A>
std::string concat(A&&... a) {
    std::ostringstream os;
    (os << ... << a);
    return os.str();
}
template <class... A>
[[noreturn]] void throw_error(A&&... a) {
    throw Error(concat(std::forward<A>(a)...));
}
template <class... A>
[[noreturn]] void throw_error_kind(ErrorKind kind, A&&... a) {
    throw Error(kind, concat(std::forward<A>(a)...));
}
}  // namespace detail

}  // namespace kiln

// Throws kiln::Error with the streamed message when cond is false. For user-facing errors:
// the message must name the file/tensor/op and the problem.
#define KILN_CHECK(cond, ...)                                  \
    do {                                                       \
        if (!(cond)) ::kiln::detail::throw_error(__VA_ARGS__); \
    } while (0)

#define KILN_FAIL(...) ::kiln::detail::throw_error(__VA_ARGS__)

// KILN_FAIL with an ErrorKind: KILN_FAIL_AS(io, path, ": changed on disk").
#define KILN_FAIL_AS(kind, ...) ::kiln::detail::throw_error_kind(::kiln::ErrorKind::kind, __VA_ARGS__)
