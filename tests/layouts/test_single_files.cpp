// The single-file fixtures are made from the diffusers folders (tests/support/single_files.h): each one, as the tests
// get it, is the file io.json describes, byte for byte (its sha256, where the tests have libcrypto).
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>

#include "tests/layouts/layouts_test_util.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("single-file fixtures: the files made from the diffusers folders are io.json's", "[layouts][single_file]") {
    const auto [c, file] = GENERATE(table<std::string, std::string>({
        {"flux", "flux1-tiny.safetensors"},
        {"flux", "flux1-tiny-comfy.safetensors"},
        {"flux", "ae.safetensors"},
        {"flux", "clip_l.safetensors"},
        {"flux", "t5xxl.safetensors"},
        {"sd3", "sd3-tiny.safetensors"},
        {"sd3", "clip_l.safetensors"},
        {"sd3", "clip_g.safetensors"},
        {"sd3", "t5xxl.safetensors"},
    }));
    INFO(c << ": " << file);
    const nlohmann::json want = io_json(c)["files"][file];
    const std::string path = single_file(c, file);  // throws on a sha256 that differs
    CHECK(std::filesystem::file_size(path) == want["bytes"].get<uint64_t>());
    CHECK(SafeTensors::open(path).tensors().size() == want["n_tensors"].get<size_t>());
    const std::string sha = file_sha256(path);
    if (!sha.empty()) CHECK(sha == want["sha256"].get<std::string>());  // empty: built without libcrypto
    // Made again without the cache: the same bytes.
    TempDir dir("kiln_single_files");
    write_single_file(c, file, dir / file);
    auto bytes = [](const std::string& p) {
        std::ifstream f(p, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    CHECK(bytes(dir / file) == bytes(path));
}

TEST_CASE("single-file fixtures: other files are the committed ones", "[layouts][single_file]") {
    CHECK(single_file("flux", "flux1-tiny-Q8_0.gguf") ==
          data_path("fixtures/flux_pipeline_singlefile/flux1-tiny-Q8_0.gguf"));
    CHECK(single_file("flux", "io.json") == data_path("fixtures/flux_pipeline_singlefile/io.json"));
}
