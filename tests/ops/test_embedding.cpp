// embedding: rows of a table stored f32/f16/bf16 (the CPU sees the same rounded table): exact.
// Out-of-range ids are clamped on the GPU (no out-of-bounds read) while the CPU reference throws.
#include "tests/ops/op_harness.h"

using namespace kiln;

namespace {
Tensor ids_tensor(const std::vector<int32_t>& v) {
    Tensor t(DType::i32, {(int64_t)v.size()});
    for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
    return t;
}
}  // namespace

TEST_CASE("embedding matches the CPU reference", "[op:embedding]") {
    auto [V, D] =
        GENERATE(std::make_pair(1, 1), std::make_pair(3, 13), std::make_pair(1000, 127), std::make_pair(13, 300));
    DType wt = GENERATE(DType::f32, DType::f16, DType::bf16);
    CAPTURE(V, D, dtype_name(wt));
    std::vector<int32_t> ids;
    for (int i = 0; i < 37; ++i) ids.push_back((i * 7919 + 3) % V);
    ir::Graph g;
    auto t = g.weight("table", {V, D}, wt);
    auto id = g.input("ids", {(int64_t)ids.size()}, DType::i32);
    g.output(g.embedding(t, id), "y");
    auto r = test::run_op(g, {{"ids", ids_tensor(ids)}}, {{"table", test::random_weight({V, D}, wt, 60)}});
    CHECK(test::max_err(r.gpu, r.cpu) == 0);
}

TEST_CASE("embedding clamps out-of-range ids on the GPU", "[op:embedding][bad]") {
    const int64_t V = 5, D = 3;
    ir::Graph g;
    auto t = g.weight("table", {V, D});
    auto id = g.input("ids", {4}, DType::i32);
    g.output(g.embedding(t, id), "y");
    Tensor table = test::random_tensor({V, D}, 61);
    auto wbytes = [&](const ir::Value&, void* dst, size_t n) { std::memcpy(dst, table.bytes.data(), n); };
    auto ids = ids_tensor({-7, 2, 5, 1 << 30});
    auto out = exec::run_graph(test::op_ctx(), g, wbytes, {{"ids", ids}}).at("y").to_f32();
    const float* tb = table.data<float>();
    int64_t expect[4] = {0, 2, V - 1, V - 1};
    for (int64_t i = 0; i < 4; ++i)
        for (int64_t d = 0; d < D; ++d) CHECK(out[(size_t)(i * D + d)] == tb[expect[i] * D + d]);
    CHECK(vk::Context::validation_errors() == 0);
    REQUIRE_THROWS_WITH(cpu::run(g, {{"ids", ids}}, [&](const ir::Value&) { return table; }),
                        Catch::Contains("embedding") && Catch::Contains("out of range"));
}

TEST_CASE("embedding rejects bad ids and table dtype", "[op:embedding][bad]") {
    ir::Graph g;
    auto t = g.weight("table", {5, 3});
    auto fid = g.input("fid", {4});
    REQUIRE_THROWS_WITH(g.embedding(t, fid), Catch::Contains("embedding") && Catch::Contains("i32"));
    auto it = g.input("itable", {5, 3}, DType::i32);
    auto id = g.input("ids", {4}, DType::i32);
    auto y = g.embedding(it, id);
    REQUIRE_THROWS_WITH(vk::lower(g, g.nodes()[(size_t)g.value(y).producer]),
                        Catch::Contains("embedding") && Catch::Contains("i32"));
}
