// libFuzzer target: the CLIP tokenizer loaded from fuzzed vocab.json, merges.txt and special_tokens_map.json must
// either throw kiln::Error or encode the fuzzed prompt. The input is the four parts separated by NUL bytes:
// vocab.json \0 merges.txt \0 special_tokens_map.json \0 prompt (a missing part is an absent file / "").
#include <cstdlib>
#include <string>
#include <vector>

#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string> parts(1);
    for (size_t i = 0; i < size; ++i) {
        if (data[i] == 0 && parts.size() < 4)
            parts.emplace_back();
        else
            parts.back().push_back(static_cast<char>(data[i]));
    }
    kiln::text::TokenizerFiles files;
    const char* names[] = {"vocab.json", "merges.txt", "special_tokens_map.json"};
    for (size_t i = 0; i < 3 && i < parts.size(); ++i) files[names[i]] = parts[i];
    const std::string prompt = parts.size() == 4 ? parts[3] : "a photo of a cat";
    try {
        auto tok = kiln::text::load_tokenizer(files, "fuzz");
        try {
            auto t = tok->encode(prompt, 77, true);
            if (t.ids.size() != 77 || t.mask.size() != 77) std::abort();
            tok->encode(prompt, 0, false);
        } catch (const kiln::Error&) {  // invalid UTF-8 in the prompt
        }
        tok->encode("a photo of a cat <|endoftext|>", 8, true);
    } catch (const kiln::Error&) {
    }
    return 0;
}
