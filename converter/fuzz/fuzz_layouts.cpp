// libFuzzer target: a single file in another project's layout (models/layouts). inspect() must either throw
// kiln::Error or describe the file; every component it names must open, and each of its tensors read (and its
// in-place view, when given, lie inside the file) or throw kiln::Error.
#include <vector>

#include "converter/fuzz/fuzz_input.h"
#include "models/layouts/layouts.h"
#include "runtime/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kiln::fuzz::MemFile f(data, size);
    if (f.path.empty()) return 0;
    try {
        const kiln::layouts::FileInfo info = kiln::layouts::inspect(f.path);
        for (const auto& c : info.components) {
            try {
                auto set = kiln::layouts::open_component(f.path, c.role);
                for (const auto& t : set->tensors()) {
                    if (kiln::shape_numel(t.shape) > (16 << 20)) continue;
                    const kiln::Tensor x = set->read(t.name);
                    const kiln::layouts::Mapped m = set->view(t.name);
                    if (m.file && m.offset + x.bytes.size() > m.file->size()) __builtin_trap();
                }
            } catch (const kiln::Error&) {
            }
        }
    } catch (const kiln::Error&) {
    }
    return 0;
}
