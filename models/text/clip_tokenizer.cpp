// Placeholder until the clip tokenizer lands (being written now); replaced by the real implementation.
#include "models/text/clip_tokenizer.h"

#include "runtime/core/error.h"

namespace kiln::text {
std::unique_ptr<Tokenizer> load_clip_tokenizer(const TokenizerFiles&, const std::string& where) {
    KILN_FAIL(where, ": clip tokenizer not implemented yet");
}
}  // namespace kiln::text
