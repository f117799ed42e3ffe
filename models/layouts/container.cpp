// The tensor listing of a .safetensors or .gguf file (headers only), and the test for a Kiln model file.
#include <cstring>

#include "models/layouts/layout_map.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"
#include "runtime/core/platform.h"
#include "runtime/core/safetensors.h"

namespace kiln::layouts::detail {

namespace {

bool has_gguf_magic(const std::string& path) {
    int fd = platform::open_read(path);
    if (fd < 0) return false;
    uint32_t magic = 0;
    bool ok = platform::pread(fd, &magic, 4, 0) == 4 && magic == kGgufMagic;
    platform::close_file(fd);
    return ok;
}

// city96's convert.py stores tensors of more than 4 dims flattened and records the torch shape under this key
// (ComfyUI-GGUF reads it back); the shapes of Flux and SD3 never need it, but a file that has it is honoured.
Shape gguf_shape(const GgufFile& g, const GgufTensor& t) {
    const std::string key = "comfy.gguf.orig_shape." + t.name;
    if (!g.has(key)) return t.shape;
    auto dims = g.get_int_array(key);
    Shape s(dims.begin(), dims.end());
    KILN_CHECK(shape_numel(s) == shape_numel(t.shape), g.path(), ": ", key, " ", shape_str(s),
               " does not hold the tensor's ", shape_numel(t.shape), " values");
    return s;
}

}  // namespace

Container read_container(const std::string& path) {
    Container c;
    c.path = path;
    if (has_gguf_magic(path)) {
        GgufFile g = GgufFile::open(path);
        c.kind = "gguf";
        c.files = {path};
        if (g.has("general.architecture")) c.arch = g.get_string("general.architecture");
        c.kiln = g.has("kiln.components");
        for (const auto& t : g.tensors())
            c.tensors.push_back({t.name, t.dtype, gguf_shape(g, t), t.offset, t.nbytes, 0});
        return c;
    }
    SafeTensors st = SafeTensors::open(path);
    c.kind = "safetensors";
    c.files = st.files();
    for (const auto& t : st.tensors()) c.tensors.push_back({t.name, t.dtype, t.shape, t.offset, t.nbytes, t.file});
    return c;
}

}  // namespace kiln::layouts::detail

namespace kiln::layouts {

// A Kiln model file is a GGUF with kiln.components. Any other file, or a GGUF this reader cannot open, is not.
bool is_kiln_file(const std::string& path) {
    if (!detail::has_gguf_magic(path)) return false;
    try {
        return GgufFile::open(path).has("kiln.components");
    } catch (const Error&) {
        return false;  // inspect() reports what is wrong with it
    }
}

}  // namespace kiln::layouts
