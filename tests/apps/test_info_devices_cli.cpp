// `kiln devices` and `kiln info`, run as the binary (both go through libkiln's C API): their text, and one clear
// error line for a file that is not there.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <string>

namespace {
// Runs `kiln ARGS 2>&1`; the exit status and the output.
int kiln(const std::string& args, std::string* out) {
    const std::string cmd = std::string(KILN_BUILD_DIR) + "/apps/kiln " + args + " 2>&1";
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
    REQUIRE(kiln("devices", &out) == 0);
    CHECK(out.rfind("[0] ", 0) == 0);
    for (const char* line : {"    driver: ", "    memory: ", "    fp16 storage: ", "    subgroup size: ",
                             "    maxStorageBufferRange: ", "    texel buffers: ", "Kiln picks discrete > integrated"})
        CHECK(out.find(line) != std::string::npos);
    REQUIRE(kiln("info " + std::string(KILN_BUILD_DIR) + "/dit-digits.kiln", &out) == 0);
    CHECK(out.find("DiTTransformer2DModel") != std::string::npos);
    CHECK(out.find("AutoencoderKL") != std::string::npos);
    CHECK(kiln("info /no/such/model.kiln", &out) == 1);
    CHECK(out == "kiln: error: /no/such/model.kiln: no such file\n");
}
