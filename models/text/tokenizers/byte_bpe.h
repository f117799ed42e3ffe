#pragma once
// Byte-level BPE as GPT-2 defined it (private to models/text): the bytes of a pre-tokenized piece mapped through
// bytes_to_unicode, then merged by rank. CLIP and Qwen share it; their pre-tokenizers, files and word-end markers
// differ, not this.
#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::text {

// GPT-2's bytes_to_unicode: the printable bytes map to themselves, the other 68 to U+0100.. in byte order; each
// entry is that code point as UTF-8.
const std::array<std::string, 256>& byte_symbols();

class ByteBpe {
public:
    // How the merges file is read:
    //   clip: transformers' CLIPTokenizer: read().strip().split("\n")[1 : 49152 - 256 - 2 + 1] (the first line is
    //         skipped whatever it says, at most 48894 merges, a blank line takes a rank);
    //   gpt2: GPT2Tokenizer / Qwen2Tokenizer: line by line, stripped; a first line starting "#version:" and blank
    //         lines are skipped (no rank); no limit.
    // Either way a merge's rank is its index and a repeated pair keeps its last rank (Python's dict(zip(...))).
    enum class MergesFormat { clip, gpt2 };

    // vocab.json / tokenizer.json's model.vocab: a JSON object token -> id. `what` names it in errors.
    void read_vocab(const std::string& json_text, const std::string& what);
    void set_vocab(std::unordered_map<std::string, int32_t> vocab) { vocab_ = std::move(vocab); }
    void read_merges(const std::string& text, MergesFormat format, const std::string& what);
    // Appends a merge with the next rank (tokenizer.json's model.merges, in order).
    void add_merge(const std::string& first, const std::string& second);

    // Options of tokenizer.json's BPE model: a suffix appended to the last symbol of each piece before merging
    // (CLIP's "</w>"), and ignore_merges (a piece whose whole symbol string is a token is that token).
    void set_end_of_word_suffix(std::string s) { suffix_ = std::move(s); }
    void set_ignore_merges(bool v) { ignore_merges_ = v; }

    // The tokens of `piece` (raw bytes): every occurrence of the lowest-ranked adjacent pair is merged, left to right
    // without overlap, until no adjacent pair has a rank (transformers' bpe(); O(n log n) for a piece of n bytes).
    std::vector<std::string> merge(const std::string& piece) const;
    // The ids of merge(piece), each token's id from token_id (the tokenizer's lookup: its added tokens, then find(),
    // then its unk token or an error). Results are cached per piece (bounded), shared by concurrent callers; token_id
    // must give the same answers for the object's lifetime.
    void append_ids(const std::string& piece, const std::function<int32_t(const std::string&)>& token_id,
                    std::vector<int32_t>& ids) const;

    // The vocabulary's id of a token, or -1.
    int32_t find(const std::string& token) const;
    size_t vocab_size() const { return vocab_.size(); }
    size_t merges_size() const { return ranks_.size(); }

private:
    std::unordered_map<std::string, int32_t> vocab_;
    std::unordered_map<std::string, int> ranks_;  // "first second" -> rank
    int next_rank_ = 0;
    std::string suffix_;
    bool ignore_merges_ = false;
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace kiln::text
