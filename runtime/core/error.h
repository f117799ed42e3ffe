#pragma once
// The one exception type of Kiln, and the checks that throw it.
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
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
}  // namespace detail

}  // namespace kiln

// Throws kiln::Error with the streamed message when cond is false. For user-facing errors:
// the message must name the file/tensor/op and the problem.
#define KILN_CHECK(cond, ...)                                  \
    do {                                                       \
        if (!(cond)) ::kiln::detail::throw_error(__VA_ARGS__); \
    } while (0)

#define KILN_FAIL(...) ::kiln::detail::throw_error(__VA_ARGS__)
