// A whole text-to-image pipeline in one Kiln file, seen through ModelSource and `kiln tokenize`: every
// component with its class, tokenizer files byte-exact, and the fixtures' token ids from the file.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "converter/convert.h"
#include "models/core/source.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        static std::atomic<int> n{0};
        path = fs::temp_directory_path() / ("kiln_apps_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string operator/(const std::string& rel) const { return (path / rel).string(); }
};

std::string fixture(const std::string& name) { return test::data_path("fixtures/" + name); }

std::string convert(const TempDir& tmp, const std::string& name) {
    converter::Options o;
    o.quiet = true;
    const std::string out = tmp / (name + ".kiln");
    converter::convert_folder(fixture(name), out, o);
    return out;
}

// Row `row` of an I64 [B, L] tensor in a fixture's io.safetensors.
std::vector<int32_t> fixture_ids(const std::string& name, const std::string& tensor, int64_t row = 0) {
    auto st = SafeTensors::open(fixture(name) + "/io.safetensors");
    Tensor t = st.read(tensor);
    REQUIRE(t.dtype == DType::i64);
    REQUIRE(t.shape.size() == 2);
    const int64_t len = t.shape[1];
    std::vector<int32_t> out;
    for (int64_t i = 0; i < len; ++i) out.push_back((int32_t)t.data<int64_t>()[row * len + i]);
    return out;
}

std::string prompt_of(const std::string& name) {
    std::ifstream f(fixture(name) + "/io.json");
    return json::parse(f)["prompt"][0].get<std::string>();
}

// Single-quoted for sh (works for any bytes but NUL).
std::string sh_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

struct CmdResult {
    int rc;
    std::string out, err;
};

// Runs `kiln tokenize ARGS`; stdout and stderr apart.
CmdResult kiln_tokenize(const std::string& args) {
    static std::atomic<int> n{0};
    const std::string err_file =
        (fs::temp_directory_path() / ("kiln_tok_err_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
            .string();
    const std::string cmd = kiln::test::cli_binary("kiln") + " tokenize " + args + " 2>" + err_file;
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p);
    CmdResult r;
    char buf[4096];
    size_t k;
    while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, k);
    int status = ::pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(err_file);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    fs::remove(err_file);
    return r;
}

}  // namespace

TEST_CASE("ModelSource on a converted pipeline has every component of the folder", "[apps][text]") {
    auto name = GENERATE(as<std::string>{}, "pixart_pipeline", "sd3_pipeline", "flux_pipeline");
    INFO(name);
    TempDir tmp;
    auto file = models::ModelSource::open(convert(tmp, name));
    auto dir = models::ModelSource::open(fixture(name));
    auto sorted = [](std::vector<std::string> v) {
        std::sort(v.begin(), v.end());
        return v;
    };
    CHECK(sorted(file.components()) == sorted(dir.components()));
    size_t encoders = 0, tokenizers = 0;
    for (auto& c : file.components()) {
        INFO(c);
        CHECK(file.class_of(c) == dir.class_of(c));
        const std::string role = models::component_role(file.class_of(c));
        if (role == "tokenizer") {
            tokenizers++;
            auto files = file.tokenizer_files(c);
            CHECK(files == dir.tokenizer_files(c));  // byte-exact, spiece.model included
            CHECK(!files.empty());
            CHECK(file.config(c)["model_max_length"] == dir.config(c)["model_max_length"]);
        } else if (role == "text_encoder") {
            encoders++;
            auto ws = file.weights(c);
            const bool t5 = file.class_of(c) == "T5EncoderModel";
            const std::string emb = t5 ? "shared.weight" : "text_model.embeddings.token_embedding.weight";
            const auto* m = ws->find(emb);
            REQUIRE(m);
            CHECK(m->shape == Shape{file.config(c)["vocab_size"].get<int64_t>(),
                                    file.config(c)[t5 ? "d_model" : "hidden_size"].get<int64_t>()});
            CHECK_THROWS_WITH(file.tokenizer_files(c), Catch::Contains("not a tokenizer"));
        }
    }
    CHECK(encoders == (name == "sd3_pipeline" ? 3u : name == "flux_pipeline" ? 2u : 1u));
    CHECK(tokenizers == encoders);
}

TEST_CASE("tokenizers loaded from the Kiln file give the pipeline fixtures' ids", "[apps][text]") {
    struct Case {
        std::string pipeline, tokenizer, ids;
        int max_length;
    };
    auto c = GENERATE(Case{"sd3_pipeline", "tokenizer", "text_encoder_input_ids", 77},
                      Case{"sd3_pipeline", "tokenizer_2", "text_encoder_2_input_ids", 77},
                      Case{"sd3_pipeline", "tokenizer_3", "text_encoder_3_input_ids", 256},
                      Case{"flux_pipeline", "tokenizer_2", "text_encoder_2_input_ids", 512});
    INFO(c.pipeline << " " << c.tokenizer);
    TempDir tmp;
    auto src = models::ModelSource::open(convert(tmp, c.pipeline));
    auto tok = text::load_tokenizer(src.tokenizer_files(c.tokenizer), c.tokenizer);
    CHECK(tok->encode(prompt_of(c.pipeline), c.max_length).ids == fixture_ids(c.pipeline, c.ids));
}

TEST_CASE("kiln tokenize prints the ids from a Kiln file, a pipeline folder or a tokenizer folder", "[apps][text]") {
    TempDir tmp;
    const std::string kiln = convert(tmp, "sd3_pipeline");
    const std::string prompt = prompt_of("sd3_pipeline");
    const auto clip_ids = fixture_ids("sd3_pipeline", "text_encoder_input_ids");
    const auto t5_ids = fixture_ids("sd3_pipeline", "text_encoder_3_input_ids");

    for (const std::string& model : {kiln, fixture("sd3_pipeline")}) {
        INFO(model);
        // Default: the tokenizer's model_max_length (CLIP 77), padded and truncated.
        auto r = kiln_tokenize("--model " + sh_quote(model) + " --prompt " + sh_quote(prompt));
        REQUIRE(r.rc == 0);
        CHECK_THAT(r.out, Catch::StartsWith("{\"input_ids\":[") && Catch::EndsWith("]}\n"));
        json j = json::parse(r.out);
        CHECK(j["input_ids"].get<std::vector<int32_t>>() == clip_ids);
        auto mask = j["attention_mask"].get<std::vector<int32_t>>();
        REQUIRE(mask.size() == 77);
        CHECK(std::count(mask.begin(), mask.end(), 1) == 15);  // io.json: untruncated_token_counts

        r = kiln_tokenize("--model " + sh_quote(model) + " --component tokenizer_3 --max-length 256 --prompt " +
                          sh_quote(prompt));
        REQUIRE(r.rc == 0);
        CHECK(json::parse(r.out)["input_ids"].get<std::vector<int32_t>>() == t5_ids);

        r = kiln_tokenize("--model " + sh_quote(model) + " --component tokenizer_3 --no-truncate --prompt " +
                          sh_quote(prompt));
        REQUIRE(r.rc == 0);
        j = json::parse(r.out);
        CHECK(j["input_ids"].size() == 17);  // io.json: untruncated_token_counts
        CHECK(j["input_ids"].get<std::vector<int32_t>>() == std::vector<int32_t>(t5_ids.begin(), t5_ids.begin() + 17));
    }

    // A tokenizer folder, with a short max length: truncated, BOS .. EOS kept.
    auto r = kiln_tokenize("--model " + sh_quote(fixture("tok_clip")) + " --max-length 4 --prompt 'a photo of a cat'");
    REQUIRE(r.rc == 0);
    json j = json::parse(r.out);
    CHECK(j["input_ids"].size() == 4);
    CHECK(j["attention_mask"].get<std::vector<int32_t>>() == std::vector<int32_t>{1, 1, 1, 1});
}

// Every tokenizer Kiln implements, from its folder as transformers' save_pretrained writes it (the tok_* fixtures:
// CLIP's vocab.json + merges.txt, T5's spiece.model, Gemma's tokenizer.model, each with tokenizer_config.json and
// special_tokens_map.json): the ids transformers gave, padded and truncated to the fixture's max_length.
TEST_CASE("kiln tokenize reads each tokenizer's folder as transformers saves it", "[apps][text]") {
    struct Case {
        std::string folder, tensor;
        int max_length;
    };
    const Case c = GENERATE(Case{"tok_clip", "input_ids", 77}, Case{"tok_t5", "input_ids_max_length_32", 32},
                            Case{"tok_gemma", "input_ids_max_length_20", 20});
    std::ifstream f(fixture(c.folder) + "/io.json");
    const json io = json::parse(f);
    TempDir tmp;
    for (int row : {5, 10, 20}) {  // "a photo of a cat", a long prompt (truncated by Gemma's 20), "東京"
        const std::string prompt = io["prompts"][(size_t)row].get<std::string>();
        INFO(c.folder << " prompt " << row << ": " << prompt);
        auto r = kiln_tokenize("--model " + sh_quote(fixture(c.folder)) + " --max-length " +
                               std::to_string(c.max_length) + " --prompt " + sh_quote(prompt));
        INFO(r.err);
        REQUIRE(r.rc == 0);
        CHECK(json::parse(r.out)["input_ids"].get<std::vector<int32_t>>() == fixture_ids(c.folder, c.tensor, row));
    }
    // Without tokenizer_config.json the files alone say which tokenizer it is; with a tokenizer_class Kiln does not
    // implement, one line names it.
    fs::copy(fixture(c.folder), tmp / "bare");
    fs::remove(tmp / "bare/tokenizer_config.json");
    // (the configs hold nothing these prompts' ids depend on: the same ids.)
    auto r = kiln_tokenize("--model " + sh_quote(tmp / "bare") + " --no-truncate --prompt 'a photo of a cat'");
    INFO(r.err);
    REQUIRE(r.rc == 0);
    const auto whole =
        kiln_tokenize("--model " + sh_quote(fixture(c.folder)) + " --no-truncate --prompt 'a photo of a cat'");
    REQUIRE(whole.rc == 0);
    CHECK(r.out == whole.out);
    fs::copy(fixture(c.folder), tmp / "llama");
    std::ofstream(tmp / "llama/tokenizer_config.json") << R"({"tokenizer_class": "LlamaTokenizer"})";
    r = kiln_tokenize("--model " + sh_quote(tmp / "llama") + " --prompt 'a photo of a cat'");
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Catch::Contains("unsupported tokenizer class 'LlamaTokenizer'"));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("kiln tokenize fails with one clear line", "[apps][text]") {
    TempDir tmp;
    const std::string kiln = convert(tmp, "flux_pipeline");
    struct Case {
        std::string args, expect;
    };
    const std::vector<Case> cases = {
        Case{"--model " + kiln + " --component tokenizer_3 --prompt x",
             "no tokenizer component 'tokenizer_3' (tokenizers: tokenizer, tokenizer_2)"},
        Case{"--model " + fixture("dit_pipeline_ddim") + " --prompt x",
             "no tokenizer component 'tokenizer' (it has no "
             "tokenizer)"},
        Case{"--model " + kiln + " --component text_encoder --prompt x", "is CLIPTextModel, not a tokenizer"},
        Case{"--model " + kiln + " --prompt \"$(printf 'a\\377b')\"", "--prompt: invalid UTF-8 at byte 1"},
        Case{"--model " + tmp / "missing.kiln" + " --prompt x", "no such file or folder"}};
    const Case c = cases[(size_t)GENERATE(range(0, 5))];
    INFO(c.args);
    auto r = kiln_tokenize(c.args);
    CHECK(r.rc == 1);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::StartsWith("kiln: error: ") && Catch::Contains(c.expect));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("kiln tokenize reads a Qwen tokenizer folder", "[apps][text]") {
    // tok_qwen3: vocab.json + merges.txt with tokenizer_class Qwen2Tokenizer (not CLIP's, though the files are named
    // alike). io.json ids[5] for "a photo of a cat"; no BOS/EOS; padding <|endoftext|> = 151643 on the right.
    const std::string dir = sh_quote(fixture("tok_qwen3"));
    auto r = kiln_tokenize("--model " + dir + " --max-length 8 --prompt 'a photo of a cat'");
    INFO(r.err);
    REQUIRE(r.rc == 0);
    json j = json::parse(r.out);
    CHECK(j["input_ids"].get<std::vector<int32_t>>() ==
          std::vector<int32_t>{64, 6548, 315, 264, 8251, 151643, 151643, 151643});
    CHECK(j["attention_mask"].get<std::vector<int32_t>>() == std::vector<int32_t>{1, 1, 1, 1, 1, 0, 0, 0});
    // Added tokens in the text are cut out first (io.json ids[27]).
    r = kiln_tokenize("--model " + dir + " --no-truncate --prompt \"$(printf '<|im_start|>user\\nhi<|im_end|>')\"");
    REQUIRE(r.rc == 0);
    CHECK(json::parse(r.out)["input_ids"].get<std::vector<int32_t>>() ==
          std::vector<int32_t>{151644, 872, 198, 6023, 151645});
}
