// libFuzzer target: GgufFile::open must either throw kiln::Error or return a file whose metadata and
// tensors can all be read in bounds.
#include <vector>

#include "converter/fuzz/fuzz_input.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kiln::fuzz::MemFile f(data, size);
    if (f.path.empty()) return 0;
    try {
        auto g = kiln::GgufFile::open(f.path);
        for (auto& k : g.keys()) {
            const auto& v = g.value(k);
            (void)v;
            try {
                g.get_int(k);
            } catch (const kiln::Error&) {
            }
        }
        std::vector<uint8_t> buf;
        for (auto& t : g.tensors()) {
            if (t.nbytes > (64u << 20)) continue;
            buf.resize(t.nbytes);
            g.read_bytes(t, buf.data());
        }
    } catch (const kiln::Error&) {
    }
    return 0;
}
