// `kiln devices` and `kiln info`, run as the binary (both go through libkiln's C API): their text, and one clear
// error line for a file that is not there.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/apps/cli_run.h"

namespace {
// Runs `ENV kiln ARGS 2>&1`; the exit status and the output.
int run_kiln(const std::string& args, std::string* out, const std::string& env = "") {
    const std::string cmd = env + kiln::test::cli_binary("kiln") + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p);
    out->clear();
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
    int st = ::pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

TEST_CASE("kiln devices and kiln info print through the C API", "[apps]") {
    std::string out;
    REQUIRE(run_kiln("devices", &out) == 0);
    CHECK(out.rfind("[0] ", 0) == 0);
    for (const char* line : {"    driver: ", "    memory: ", "    fp16 storage: ", "    subgroup size: ",
                             "    maxStorageBufferRange: ", "    texel buffers: ", "Kiln picks discrete > integrated"})
        CHECK(out.find(line) != std::string::npos);
    REQUIRE(run_kiln("info " + std::string(KILN_BUILD_DIR) + "/dit-digits.kiln", &out) == 0);
    CHECK(out.find("DiTTransformer2DModel") != std::string::npos);
    CHECK(out.find("AutoencoderKL") != std::string::npos);
    CHECK(run_kiln("info /no/such/model.kiln", &out) == 1);
    CHECK(out == "kiln: error: /no/such/model.kiln: no such file\n");
    // No file: the built-in model, as kiln generate uses it.
    std::string builtin;
    REQUIRE(run_kiln("info", &builtin, "KILN_DEFAULT_MODEL=" + std::string(KILN_BUILD_DIR) + "/dit-digits.kiln ") == 0);
    CHECK(builtin.rfind(std::string(KILN_BUILD_DIR) + "/dit-digits.kiln: Kiln model file", 0) == 0);
    CHECK(builtin.find("DiTTransformer2DModel") != std::string::npos);
    // A diffusers folder is not a Kiln file: the error says how to make one.
    const std::string folder = std::string(KILN_TEST_DATA) + "/fixtures/dit_pipeline_ddim";
    CHECK(run_kiln("info " + folder, &out) == 1);
    CHECK(out == "kiln: error: " + folder +
                     " is a folder: kiln info describes a Kiln file (convert the folder with "
                     "`kiln-convert " +
                     folder + " -o NAME.kiln`)\n");
}

TEST_CASE("kiln --version and kiln-convert --version print the project version", "[apps]") {
    std::string a, b;
    REQUIRE(run_kiln("--version", &a) == 0);
    FILE* p = ::popen((std::string(KILN_BUILD_DIR) + "/apps/kiln-convert --version").c_str(), "r");
    REQUIRE(p);
    char buf[256] = {};
    b = std::fgets(buf, sizeof buf, p) ? buf : "";
    const int st = ::pclose(p);
    CHECK((WIFEXITED(st) ? WEXITSTATUS(st) : -1) == 0);
    auto version = [](const std::string& line, const char* prog) {  // "PROG MAJOR.MINOR.PATCH\n"
        int x = 0, y = 0, z = 0, n = 0;
        const std::string fmt = std::string(prog) + " %d.%d.%d\n%n";
        return std::sscanf(line.c_str(), fmt.c_str(), &x, &y, &z, &n) == 3 && n == (int)line.size();
    };
    CHECK(version(a, "kiln"));
    CHECK(version(b, "kiln-convert"));
    CHECK(a.substr(a.find(' ')) == b.substr(b.find(' ')));  // one version for both
}

TEST_CASE("kiln devices names the linear kernel table: missing, loaded with its picks, stale, off", "[apps]") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("kiln-devices-table-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const std::string env = "env -u KILN_CACHE_DIR -u KILN_PIPELINE_CACHE XDG_CACHE_HOME=" + dir.string() + " ";
    auto devices = [&](const std::string& prefix) {
        std::string out;
        REQUIRE(run_kiln("devices", &out, prefix) == 0);
        const size_t at = out.find("    linear kernels: ");
        REQUIRE(at != std::string::npos);
        return out.substr(at, out.find('\n', at) - at);
    };
    const std::string path = (dir / "kiln").string() + "/linear-";
    std::string line = devices(env);
    CHECK(line.find(path) != std::string::npos);
    CHECK(line.find(": missing (measured the first time a model is planned") != std::string::npos);
    // bench --kernels at the default shapes and dtypes writes the table `kiln devices` then reads (one timed run).
    std::string out;
    REQUIRE(run_kiln("bench --kernels --steps 1", &out, env) == 0);
    line = devices(env);
    CHECK(line.find("(loaded; `kiln bench --kernels` measures it again): f32 ") != std::string::npos);
    for (const char* part : {" at M=2, ", " at M=256; f16 ", "; bf16 "}) CHECK(line.find(part) != std::string::npos);
    // The same driver as another device: llvmpipe with 4-wide vectors has lavapipe's ids and UUID, only its name
    // differs; the table measured at the default width is stale there (measured and probed again, not reused).
    std::string first;
    REQUIRE(run_kiln("devices", &first, env) == 0);
    if (first.find("llvmpipe") != std::string::npos && first.find("256 bits") != std::string::npos) {
        CHECK(devices(env + "LP_NATIVE_VECTOR_WIDTH=128 ").find(": stale (measured again") != std::string::npos);
        CHECK(devices(env).find("(loaded; ") != std::string::npos);  // and still current at the default width
    }
    // A table from another driver or Kiln build (its key line differs) is stale.
    fs::path file;
    for (auto& e : fs::directory_iterator(dir / "kiln"))
        if (e.path().filename().string().rfind("linear-", 0) == 0) file = e.path();
    REQUIRE(!file.empty());
    std::vector<std::string> lines;
    {
        std::ifstream f(file);
        for (std::string l; std::getline(f, l);) lines.push_back(l);
    }
    REQUIRE(lines.size() > 2);
    lines[1] = "key 0 0 0 0 0";
    {
        std::ofstream f(file);
        for (auto& l : lines) f << l << "\n";
    }
    line = devices(env);
    CHECK(line.find(": stale (measured again the next time a model is planned") != std::string::npos);
    CHECK(devices("KILN_PIPELINE_CACHE=0 ").find("no table file (pipeline cache off)") != std::string::npos);
    fs::remove_all(dir);
}
