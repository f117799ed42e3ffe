// libFuzzer target: SafeTensors::open must either throw kiln::Error or return tensors that read in bounds.
#include <vector>

#include "converter/fuzz/fuzz_input.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kiln::fuzz::MemFile f(data, size);
    if (f.path.empty()) return 0;
    try {
        auto st = kiln::SafeTensors::open(f.path);
        std::vector<uint8_t> buf;
        for (auto& t : st.tensors()) {
            if (t.nbytes > (64u << 20)) continue;
            buf.resize(t.nbytes);
            st.read_bytes(t, buf.data());
        }
    } catch (const kiln::Error&) {
    }
    return 0;
}
