// The fixture transformers under a budget that forces their block weights to stream (the minimum working set:
// two block slots per kind), at f16 and q4_0, through the ring, the copy window and in-place reads: the output is
// bitwise that of the all-resident run. Flux has two block kinds (double and single), SD3 a different last block.
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/file_io.h"
#include "runtime/vulkan/memory.h"
#include "tests/models/model_harness.h"

using namespace kiln;

namespace {
using Env = test::ScopedEnv;
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

namespace {
// Writes `ts` as a safetensors file whose data starts 8 bytes off a multiple of 16, as many diffusers files do.
void write_misaligned(const std::string& file, const std::vector<std::pair<std::string, Tensor>>& ts) {
    for (int pad = 0; pad < 16; ++pad) {  // metadata length moves the data start in steps of 8 bytes
        write_safetensors(file, ts, {{"pad", std::string((size_t)pad, ' ')}});
        if (SafeTensors::open(file).tensors()[0].offset % 16 == 8) return;
    }
    FAIL("could not misalign the data start");
}

// fixtures/dit grown to three blocks (block 2 a copy of block 1, so that one kind streams at the minimum working
// set), its data misaligned (above); sharded: in two shards by alternate tensors, with an index, so that every
// block reads both mappings.
std::string dit3_misaligned_folder(const std::string& name = "dit3_misaligned", bool sharded = false) {
    auto dir = std::filesystem::temp_directory_path() / "kiln_test_models" / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    auto cfg = nlohmann::json::parse(std::ifstream(test::data_path("fixtures/dit/config.json")));
    cfg["num_layers"] = 3;
    std::ofstream(dir / "config.json") << cfg.dump();
    auto st = SafeTensors::open(test::data_path("fixtures/dit/diffusion_pytorch_model.safetensors"));
    std::vector<std::pair<std::string, Tensor>> ts;
    for (auto& t : st.tensors()) {
        ts.push_back({t.name, st.read(t.name)});
        const std::string b1 = "transformer_blocks.1.";
        if (t.name.rfind(b1, 0) == 0)
            ts.push_back({"transformer_blocks.2." + t.name.substr(b1.size()), ts.back().second});
    }
    if (!sharded) {
        write_misaligned((dir / "diffusion_pytorch_model.safetensors").string(), ts);
        return dir.string();
    }
    std::vector<std::pair<std::string, Tensor>> shard[2];
    nlohmann::json map = nlohmann::json::object();
    for (size_t i = 0; i < ts.size(); ++i) {
        const std::string f = "diffusion_pytorch_model-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
        shard[i % 2].push_back(ts[i]);
        map[ts[i].first] = f;
    }
    for (int s = 0; s < 2; ++s)
        write_misaligned(
            (dir / ("diffusion_pytorch_model-0000" + std::to_string(s + 1) + "-of-00002.safetensors")).string(),
            shard[s]);
    std::ofstream(dir / "diffusion_pytorch_model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
    return dir.string();
}

// Whether the device imports the pages of a mapped model file (VK_EXT_external_memory_host), as the executor's
// import_weight does: lavapipe does; a driver may refuse file-backed pages (the H200's did: its streamed copies
// came from host copies), and the executor then uploads host copies instead.
bool imports_mapped_file(vk::Context& ctx, const std::string& path) {
    const auto& info = ctx.info();
    if (!info.host_import || !info.host_import_align) return false;
    auto f = MappedFile::open(path);
    const uint64_t a = std::max<uint64_t>(info.host_import_align, 4096);
    REQUIRE(f->size() >= a);
    try {
        vk::HostImport h(ctx, f->data(), a);
        return true;
    } catch (const Error&) {
        return false;
    }
}
}  // namespace

TEST_CASE("a diffusers folder streams from its mapped safetensors, bitwise equal", "[models][stream]") {
    // fixtures/flux's tensors start on multiples of 16 bytes, dit3's (above) on 8: on unified memory with host
    // import, flux's streamed blocks are read in place in the page cache, and dit3's are copied from it into
    // ring slots (the _ptr shaders need 16); a discrete GPU copies both from the mapped file. No host copy of
    // the model in any case; all bitwise.
    const std::string fx = GENERATE("flux", "dit3", "dit3-sharded");
    CAPTURE(fx);
    auto src = models::ModelSource::open(fx == "flux"   ? test::data_path("fixtures/flux")
                                         : fx == "dit3" ? dit3_misaligned_folder()
                                                        : dit3_misaligned_folder("dit3_sharded", true));
    auto ws = src.weights("transformer");
    auto io = SafeTensors::open(
        test::data_path(fx == "flux" ? "fixtures/flux/io.safetensors" : "fixtures/dit/io.safetensors"));
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, src.class_of("transformer"), src.config("transformer"),
                                      test::fixture_inputs(io, test::kTransformerInputs));
    auto run = [&](const exec::Budget& budget) {
        exec::Executor ex(test::context(), g, b.weight_fn(), exec::Mode::regional, false, exec::BlockWeights::device,
                          budget);
        for (auto& [n, t] : in) ex.set_input(n, t);
        ex.run();
        return std::make_pair(ex.output("sample"), ex.counters());
    };
    auto [ref, rc] = run(exec::Budget{uint64_t(1) << 50, 0, false});
    CHECK(rc.blocks_streamed == 0);
    // Raised to the minimum working set (two block slots per kind); one ring slot.
    auto [out, c] = run(exec::Budget{1, 1, true});
    CHECK(out.bytes == ref.bytes);
    const auto& info = test::context().info();
    const bool imports =
        imports_mapped_file(test::context(), test::data_path("fixtures/flux/diffusion_pytorch_model.safetensors"));
    const bool unified = info.unified_memory;
    // dit3's three blocks exceed the two slots of the minimum, so they stream. Flux's kinds (1 double, 2 single
    // blocks) fit theirs: they stream only where the file is read in place, which costs no device memory (unified
    // memory, the file imported, tensors 16-byte aligned).
    const bool streams = fx != "flux" || (unified && imports);
    CAPTURE(imports, unified, c.stream_note);
    CHECK((c.blocks_streamed > 0) == streams);
    if (streams) {
        CHECK((c.host_weight_bytes == 0) == imports);  // the imported file is the only host copy
        CHECK((c.in_place_bytes > 0) == imports);
        // Read where they lie only on unified memory: the imported file when aligned (flux), else host copies;
        // dit3 from the file and every discrete GPU copy into ring slots.
        const bool ring = !unified || (imports && fx != "flux");
        CHECK((c.ring_slots > 0) == ring);
        CHECK((c.streamed_bytes_per_run > 0) == ring);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("a diffusers folder truncated while streamed from gives a clear error, no crash", "[models][stream]") {
    const std::string dir = dit3_misaligned_folder("dit3_truncated");
    auto src = models::ModelSource::open(dir);
    auto ws = src.weights("transformer");
    auto io = SafeTensors::open(test::data_path("fixtures/dit/io.safetensors"));
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, src.class_of("transformer"), src.config("transformer"),
                                      test::fixture_inputs(io, test::kTransformerInputs));
    exec::Executor ex(test::context(), g, b.weight_fn(), exec::Mode::regional, false, exec::BlockWeights::device,
                      exec::Budget{1, 1, true});
    for (auto& [n, t] : in) ex.set_input(n, t);
    ex.run();
    if (ex.counters().in_place_bytes > 0) {  // the device reads the mapped shard: a cut file would fault it
        const std::string file = dir + "/diffusion_pytorch_model.safetensors";
        std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
        CHECK_THROWS_WITH(ex.run(), Catch::Contains("changed on disk"));
    }
    std::filesystem::remove_all(dir);
}
