// Every op of the table has its four pieces: a shader (compute ops), a CPU reference and a Vulkan
// lowering (both referenced here, so a missing one fails to link), a Catch2 test tagged [op:<name>] and
// a bad-input test tagged [op:<name>][bad].
#include <algorithm>
#include <set>

#include "runtime/vulkan/pipeline.h"
#include "tests/ops/op_harness.h"

using namespace kiln;

TEST_CASE("every op has a shader, a CPU reference, a lowering and a test", "[registry]") {
    using CpuFn = void (*)(const ir::Graph&, const ir::Node&, cpu::Vals&);
    using LowerFn = vk::Dispatch (*)(const ir::Graph&, const ir::Node&);
    struct Entry {
        const char* name;
        ir::OpKind kind;
        CpuFn cpu;
        LowerFn lower;
    };
    const Entry ops[] = {
#define KILN_X(name, kind) {#name, ir::OpKind::kind, &cpu::name, &vk::lower_##name},
        KILN_OPS(KILN_X)
#undef KILN_X
    };
    std::set<std::string> tags, bad;  // ops with a test; ops with a bad-input test ([op:x][bad])
    for (const auto& tc : Catch::getAllTestCasesSorted(*Catch::getCurrentContext().getConfig())) {
        const auto& t = tc.getTestCaseInfo().tags;
        bool is_bad = std::find(t.begin(), t.end(), "bad") != t.end();
        for (const auto& x : t) {
            tags.insert(x);
            if (is_bad) bad.insert(x);
        }
    }
    REQUIRE(tags.count("registry"));  // the registry query itself works (tags are stored without brackets)
    for (const Entry& e : ops) {
        CAPTURE(e.name);
        CHECK(e.cpu != nullptr);
        CHECK(e.lower != nullptr);
        if (e.kind == ir::OpKind::compute)
            CHECK((vk::has_shader(e.name) || vk::has_shader(std::string(e.name) + "_f32")));
        CHECK(tags.count(std::string("op:") + e.name));
        CHECK(bad.count(std::string("op:") + e.name));
    }
}

TEST_CASE("weight-dtype ops have every variant", "[registry]") {
    for (const char* op : {"linear", "conv2d", "embedding"})
        for (const char* v : {"_f32", "_f16", "_bf16"}) {
            CAPTURE(op, v);
            CHECK(vk::has_shader(std::string(op) + v));
        }
}
