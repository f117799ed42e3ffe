#pragma once
// Shared by the layouts tests: a TensorSet checked against a diffusers folder's safetensors file.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "models/layouts/layouts.h"
#include "runtime/core/safetensors.h"
#include "tests/support/single_files.h"
#include "tests/support/test_support.h"

namespace kiln::test {

// A file of the single-file fixture `c`: the safetensors made from the diffusers folder, the rest committed.
inline std::string single(const std::string& c, const std::string& f) { return single_file(c, f); }
inline std::string folder(const std::string& c, const std::string& comp) {
    return data_path(
        "fixtures/" + c + "_pipeline/" + comp + "/" +
        (comp.rfind("text_encoder", 0) == 0 ? "model.safetensors" : "diffusion_pytorch_model.safetensors"));
}
inline nlohmann::json io_json(const std::string& c) {
    std::ifstream f(single(c, "io.json"));
    return nlohmann::json::parse(f);
}

// Wherever view() gives bytes, they are read()'s bytes; returns how many tensors had a view.
inline size_t check_views(const layouts::TensorSet& set) {
    size_t n = 0;
    for (const auto& i : set.tensors()) {
        layouts::Mapped m = set.view(i.name);
        if (!m.file) continue;
        ++n;
        Tensor t = set.read(i.name);
        INFO(set.source() << ": view of " << i.name);
        REQUIRE(m.offset + t.nbytes() <= m.file->size());
        CHECK(std::memcmp(m.file->data() + m.offset, t.bytes.data(), t.nbytes()) == 0);
    }
    return n;
}

// Every tensor of the diffusers file is in the set with its shape, dtype and bytes; the set has no other tensor
// than `extras`.
inline void check_same(const layouts::TensorSet& set, const std::string& ref_path,
                       const std::set<std::string>& extras = {}) {
    SafeTensors ref = SafeTensors::open(ref_path);
    size_t same = 0;
    for (const auto& t : ref.tensors()) {
        INFO(set.source() << ": " << t.name);
        const layouts::TensorInfo* i = set.find(t.name);
        REQUIRE(i);
        CHECK(i->shape == t.shape);
        CHECK(i->dtype == t.dtype);
        Tensor a = set.read(t.name), b = ref.read(t.name);
        CHECK(a.shape == b.shape);
        same += a.bytes == b.bytes;
        CHECK(a.bytes == b.bytes);
    }
    CHECK(same == ref.tensors().size());
    for (const auto& i : set.tensors()) {
        INFO(set.source() << " has extra tensor " << i.name);
        CHECK((ref.find(i.name) || extras.count(i.name)));
    }
    CHECK(set.tensors().size() == ref.tensors().size() + extras.size());
    check_views(set);
}

}  // namespace kiln::test
