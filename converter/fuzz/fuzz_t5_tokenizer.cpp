// libFuzzer target: the T5 tokenizer loaded from fuzzed spiece.model bytes (SentencePiece protobuf) must either
// throw kiln::Error or encode prompts into ids that index its vocabulary.
#include <cstdlib>
#include <string>

#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kiln::text::TokenizerFiles files{{"spiece.model", std::string(reinterpret_cast<const char*>(data), size)}};
    try {
        auto tok = kiln::text::load_tokenizer(files, "fuzz");
        for (const char* prompt : {"", " ", "A photo of a cat, 2 dogs </s> and <unk>!", "\xe2\x96\x81 x  \t\nÜber"}) {
            auto t = tok->encode(prompt, 16, true);
            if (t.ids.size() != 16 || t.mask.size() != 16) std::abort();
            tok->encode(prompt, 0, false);
        }
    } catch (const kiln::Error&) {
    }
    return 0;
}
