// Output paths are checked before the model is loaded: `kiln generate -o` and `--dump`, `kiln forward --output`.
// A missing folder, a file as the folder, an unwritable folder, or a folder as the file name stop with one clear
// error, a non-zero exit, and no model read (the model path given does not even exist).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/apps/cli_run.h"

namespace fs = std::filesystem;

namespace {
struct Tmp {
    fs::path path = fs::temp_directory_path() / ("kiln_out_" + std::to_string(::getpid()));
    Tmp() { fs::create_directories(path); }
    ~Tmp() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

// Runs `kiln ARGS` on a model that does not exist; the exit status, stderr in *err.
int run_kiln(const Tmp& tmp, const std::string& args, std::string* err) {
    const fs::path ef = tmp.path / "stderr.txt";
    const std::string cmd = kiln::test::cli_binary("kiln") + " " + args + " --model " +
                            (tmp.path / "absent.kiln").string() + " 2>" + ef.string();
    int st = std::system(cmd.c_str());
    std::ifstream f(ef);
    err->assign(std::istreambuf_iterator<char>(f), {});
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

TEST_CASE("kiln generate and kiln forward check their output paths before loading the model", "[apps][generate]") {
    Tmp tmp;
    std::ofstream(tmp.path / "file.txt") << "x";
    // /proc/self is not writable, even by root (for whom a mode-0555 folder is).
    const std::vector<std::pair<std::string, std::string>> bad = {
        {(tmp.path / "no/such/dir/out.png").string(), "does not exist"},
        {(tmp.path / "file.txt/out.png").string(), "is not a folder"},
        {"/proc/self/out.png", "is not writable"},
        {tmp.path.string(), "is a folder"},
    };
    const std::string good = (tmp.path / "out.png").string();
    for (const std::string flag : {"generate -o", "generate --dump", "forward --output"}) {
        for (auto& [path, why] : bad) {
            std::string err, args = flag + " '" + path + "'";
            if (flag == "generate --dump") args += " -o " + good;
            if (flag == "forward --output") args += " --inputs " + (tmp.path / "in.safetensors").string();
            INFO(args << "\n" << err);
            CHECK(run_kiln(tmp, args, &err) == 1);
            CHECK(err.find("kiln: error: " + flag.substr(flag.find(' ') + 1) + " " + path) != std::string::npos);
            CHECK(err.find(why) != std::string::npos);
            CHECK(err.find("absent.kiln") == std::string::npos);  // the model was not looked at
        }
    }
    // A good path gets past the check: the error is now the missing model.
    std::string err;
    CHECK(run_kiln(tmp, "generate -o " + good + " --dump " + (tmp.path / "d.safetensors").string(), &err) == 1);
    CHECK(err.find("absent.kiln") != std::string::npos);
    CHECK(run_kiln(tmp, "forward --inputs x.safetensors --output " + good, &err) == 1);
    CHECK(err.find("absent.kiln") != std::string::npos);
    CHECK(!fs::exists(good));
}

TEST_CASE("kiln-convert checks its output folder before reading the input", "[apps][convert]") {
    Tmp tmp;
    std::ofstream(tmp.path / "file.txt") << "x";
    const std::string absent = (tmp.path / "absent").string();  // no such input folder: never looked at
    for (auto& [out, why] : std::vector<std::pair<std::string, std::string>>{
             {(tmp.path / "no/such/dir/out.kiln").string(), "does not exist"},
             {(tmp.path / "file.txt/out.kiln").string(), "is not a folder"},
             {"/proc/self/out.kiln", "is not writable"},
             {tmp.path.string(), "is a folder"}}) {
        const fs::path ef = tmp.path / "stderr.txt";
        const std::string cmd =
            std::string(KILN_BUILD_DIR) + "/apps/kiln-convert " + absent + " -o '" + out + "' 2>" + ef.string();
        const int st = std::system(cmd.c_str());
        std::ifstream f(ef);
        const std::string err(std::istreambuf_iterator<char>(f), {});
        INFO(cmd << "\n" << err);
        CHECK((WIFEXITED(st) ? WEXITSTATUS(st) : -1) == 1);
        CHECK(err.find("kiln-convert: error: -o " + out) != std::string::npos);
        CHECK(err.find(why) != std::string::npos);
        CHECK(err.find("absent") == std::string::npos);  // the input was not looked at
    }
}

TEST_CASE("kiln-convert interrupted while writing removes its partial file and leaves the output as it was",
          "[apps][convert]") {
    Tmp tmp;
    const fs::path out = tmp.path / "out.kiln", partial = tmp.path / "out.kiln.tmp", ef = tmp.path / "stderr.txt";
    std::ofstream(out) << "the previous file";
    // 20 ms after each of the built-in model's 272 tensors: about 5 s of writing to interrupt.
    const std::string cmd = "KILN_TEST_CONVERT_DELAY_MS=20 exec " + std::string(KILN_BUILD_DIR) +
                            "/apps/kiln-convert " + std::string(KILN_SOURCE_DIR) + "/models/default/dit-digits -o " +
                            out.string() + " 2>" + ef.string();
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
        ::_exit(127);
    }
    bool writing = false;
    for (int i = 0; i < 500 && !writing; ++i) {  // up to 10 s for the writer to open its partial file
        writing = fs::exists(partial);
        if (!writing) ::usleep(20000);
    }
    if (writing) ::usleep(300000);  // a few tensors in
    ::kill(pid, SIGINT);
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    std::ifstream f(ef);
    const std::string err(std::istreambuf_iterator<char>(f), {});
    INFO(err);
    REQUIRE(writing);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 128 + SIGINT);
    CHECK(err.find("kiln-convert: interrupted; nothing written") != std::string::npos);
    CHECK(!fs::exists(partial));
    std::ifstream o(out);
    CHECK(std::string(std::istreambuf_iterator<char>(o), {}) == "the previous file");
}
