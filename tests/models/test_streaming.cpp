// The fixture transformers under a budget that forces their block weights to stream (the minimum working set:
// two block slots per kind), at f16 and q4_0, through the ring, the copy window and in-place reads: the output is
// bitwise that of the all-resident run. Flux has two block kinds (double and single), SD3 a different last block.
#include <cstdlib>

#include "tests/models/model_harness.h"

using namespace kiln;

namespace {
struct Env {  // sets an environment variable for one scope
    std::string name;
    Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~Env() { unsetenv(name.c_str()); }
};
}  // namespace

TEST_CASE("fixture transformers stream their blocks under a budget, bitwise equal", "[models][stream]") {
    const std::string fx = GENERATE("dit", "sd3", "flux");
    const DType dt = GENERATE(DType::f16, DType::q4_0);
    const std::string path = GENERATE("copy", "ring", "in-place");
    CAPTURE(fx, dtype_name(dt), path);
    auto io = SafeTensors::open(test::data_path("fixtures/" + fx + "/io.safetensors"));
    std::map<std::string, Tensor> in;
    for (const char* n : {"hidden_states", "timestep", "class_labels", "encoder_hidden_states",
                          "encoder_attention_mask", "pooled_projections", "img_ids", "txt_ids", "guidance"})
        if (io.find(n)) in[n] = io.read(n);
    auto dir = std::filesystem::temp_directory_path() / "kiln_test_models";
    std::filesystem::create_directories(dir);
    const std::string file = (dir / (fx + "_stream_" + dtype_name(dt) + ".kiln")).string();
    if (!std::filesystem::exists(file)) {
        converter::Options opt;
        opt.dtype = dt;
        opt.quiet = true;
        converter::convert_folder(test::data_path("fixtures/" + fx), file, opt);
    }
    auto src = models::ModelSource::open(file);
    vk::Context& ctx = test::context();
    Env sel("KILN_BLOCK_WEIGHTS", path == "copy" ? "copy" : "device");
    Tensor ref, out;
    {
        Env upload("KILN_STREAM_IN_PLACE", "0");  // the reference: every weight uploaded, all resident
        ctx.set_vram_budget(uint64_t(1) << 50);
        ref = models::forward_component(&ctx, src, "transformer", in, exec::Mode::regional)["sample"];
    }
    {
        // ring: host copies streamed through device slots; copy and in-place: the mapped file imported
        // (VK_EXT_external_memory_host), copied into the window or read where it lies.
        Env ring("KILN_STREAM_IN_PLACE", path == "ring" ? "0" : "1");
        ctx.set_vram_budget(1);  // raised to the minimum working set, with a warning
        out = models::forward_component(&ctx, src, "transformer", in, exec::Mode::regional)["sample"];
        ctx.set_vram_budget(0);
    }
    CHECK(out.bytes == ref.bytes);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("a model file truncated while mapped gives a clear error, no crash", "[models][stream]") {
    auto dir = std::filesystem::temp_directory_path() / "kiln_test_models";
    std::filesystem::create_directories(dir);
    const std::string file = (dir / "dit_truncated.kiln").string();
    converter::Options opt;
    opt.dtype = DType::f16;
    opt.quiet = true;
    converter::convert_folder(test::data_path("fixtures/dit"), file, opt);
    auto src = models::ModelSource::open(file);
    auto ws = src.weights("transformer");
    auto io = SafeTensors::open(test::data_path("fixtures/dit/io.safetensors"));
    std::map<std::string, Tensor> raw;
    for (const char* n : {"hidden_states", "timestep", "class_labels"}) raw[n] = io.read(n);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, src.class_of("transformer"), src.config("transformer"), raw);
    for (auto mode : {exec::Mode::regional, exec::Mode::full}) {
        exec::Executor ex(test::context(), g, b.weight_fn(), mode);
        for (auto& [n, t] : in) ex.set_input(n, t);
        ex.run();
        if (test::context().info().host_import && test::context().info().unified_memory)
            CHECK(ex.counters().in_place_bytes > 0);  // weights read where they lie in the mapped file
    }
    exec::Executor ex(test::context(), g, b.weight_fn(), exec::Mode::regional);
    for (auto& [n, t] : in) ex.set_input(n, t);
    std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
    CHECK_THROWS_WITH(ex.run(), Catch::Contains("changed on disk"));
    std::string stored;  // a tensor of the file: reading it now fails the same way
    for (auto& v : g.values())
        if (v.role == ir::Role::weight && ws->find(v.name)) stored = v.name;
    REQUIRE(!stored.empty());
    CHECK_THROWS_WITH(ws->read(stored), Catch::Contains("changed on disk"));
    std::filesystem::remove(file);
}
