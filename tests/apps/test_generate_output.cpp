// `kiln generate -o PATH` is checked before the model is loaded: a missing folder, or a folder as the file name,
// stop with one clear error, a non-zero exit, and no model read (the model path given does not even exist).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

TEST_CASE("kiln generate checks -o before loading the model", "[apps][generate]") {
    const fs::path tmp = fs::temp_directory_path() / ("kiln_out_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    auto run = [&](const std::string& out, std::string* err) {
        const fs::path ef = tmp / "stderr.txt";
        const std::string cmd = std::string(KILN_BUILD_DIR) + "/apps/kiln generate --model " +
                                (tmp / "absent.kiln").string() + " -o '" + out + "' 2>" + ef.string();
        int st = std::system(cmd.c_str());
        std::ifstream f(ef);
        err->assign(std::istreambuf_iterator<char>(f), {});
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    std::string err;
    CHECK(run((tmp / "no/such/dir/out.png").string(), &err) != 0);
    CHECK(err.find("does not exist") != std::string::npos);
    CHECK(err.find("absent.kiln") == std::string::npos);  // the model was not looked at
    CHECK(run(tmp.string(), &err) != 0);
    CHECK(err.find("is a folder") != std::string::npos);
    // A good -o gets past the check: the error is now the missing model.
    CHECK(run((tmp / "out.png").string(), &err) != 0);
    CHECK(err.find("absent.kiln") != std::string::npos);
    CHECK(!fs::exists(tmp / "out.png"));
    std::error_code ec;
    fs::remove_all(tmp, ec);
}
