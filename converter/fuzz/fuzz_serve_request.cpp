// libFuzzer target: kiln serve's request parser (apps/kiln/serve_request.cpp) on arbitrary bodies. It must accept or
// reject every input without a crash, a sanitizer report or an exception, and a rejection must carry an error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "apps/kiln/serve_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kiln::app::serve;
    ImageRequest r;
    ApiError e;
    if (!parse_image_request(std::string_view((const char*)data, size), Limits{}, &r, &e)) {
        if (e.message.empty() || (e.status != 400 && e.status != 413)) __builtin_trap();
        (void)error_json(e);
    } else if (r.n < 1 || r.n > Limits{}.max_n || r.width < 0 || r.height < 0) {
        __builtin_trap();
    }
    return 0;
}
