// Placeholder until the t5 tokenizer lands (being written now); replaced by the real implementation.
#include "models/text/t5_tokenizer.h"

#include "runtime/core/error.h"

namespace kiln::text {
std::unique_ptr<Tokenizer> load_t5_tokenizer(const TokenizerFiles&, const std::string& where) {
    KILN_FAIL(where, ": t5 tokenizer not implemented yet");
}
}  // namespace kiln::text
