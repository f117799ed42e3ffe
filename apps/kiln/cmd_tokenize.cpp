// kiln tokenize: the ids a pipeline's tokenizer gives a prompt, as one JSON line.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/kiln/commands.h"
#include "models/core/source.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"

namespace kiln::app {

Run add_tokenize(CLI::App& app) {
    struct Opts {
        std::string model, component = "tokenizer", prompt;
        int max_length = 0;
        bool no_truncate = false;
    };
    auto o = std::make_shared<Opts>();
    app.add_option("--model", o->model, "Kiln model file, diffusers pipeline folder, or tokenizer folder")->required();
    app.add_option("--component", o->component, "tokenizer, tokenizer_2 or tokenizer_3")->capture_default_str();
    app.add_option("--max-length", o->max_length,
                   "pad and truncate to N tokens (default: the tokenizer's model_max_length; none if unset)")
        ->check(CLI::PositiveNumber);
    app.add_flag("--no-truncate", o->no_truncate, "neither pad nor truncate");
    app.add_option("--prompt", o->prompt, "text to tokenize (UTF-8)")->required();
    app.footer(
        "Prints {\"input_ids\": [...], \"attention_mask\": [...]} as transformers' tokenizer(prompt, "
        "padding=\"max_length\", truncation=True) gives them.\n"
        "Example:\n  kiln tokenize --model sd3.kiln --component tokenizer_3 --max-length 256 --prompt \"a cat\"");
    return [o] {
        KILN_CHECK(!(o->no_truncate && o->max_length > 0), "--no-truncate and --max-length exclude each other");
        text::check_utf8(o->prompt, "--prompt");
        auto src = models::ModelSource::open(o->model);
        if (!src.has(o->component)) {
            std::string tok;
            for (auto& c : src.components())
                if (models::component_role(src.class_of(c)) == "tokenizer") tok += (tok.empty() ? "" : ", ") + c;
            KILN_FAIL(o->model, ": no tokenizer component '", o->component, "' (",
                      tok.empty() ? std::string("it has no tokenizer") : "tokenizers: " + tok, ")");
        }
        const std::string where = o->model + ": " + o->component;
        auto tok = text::load_tokenizer(src.tokenizer_files(o->component), where);
        int max_len = o->no_truncate ? 0 : o->max_length > 0 ? o->max_length : tok->model_max_length();
        text::Tokens t = tok->encode(o->prompt, max_len, max_len > 0);
        nlohmann::ordered_json j = {{"input_ids", t.ids}, {"attention_mask", t.mask}};  // keys in this order
        std::printf("%s\n", j.dump().c_str());
    };
}

}  // namespace kiln::app
