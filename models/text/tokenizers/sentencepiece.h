#pragma once
// A SentencePiece model read from spiece.model / tokenizer.model (its ModelProto parsed here, bounds-checked):
// sentencepiece's normaliser (precompiled charsmap, extra-whitespace removal, dummy prefix, "▁"), then the
// segmentation of its model_type -- unigram: the Viterbi of EncodeOptimized; BPE: bpe_model.cc's merge loop --
// and byte fallback, giving what EncodeAsPieces gives (sentencepiece 0.1.97).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::text {

class SentencePieceModel {
public:
    enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
    struct Piece {
        std::string piece;
        float score = 0.f;
        int type = kNormal;
    };
    // TrainerSpec.model_type: the segmentation algorithm (WORD and CHAR are not supported).
    enum class Algorithm { unigram = 1, bpe = 2 };
    struct Encoded {
        std::string piece;  // the vocabulary piece, or the surface text of a (merged) unknown run
        int32_t id = 0;
    };

    // Parses a serialized ModelProto; kiln::Error naming `where` and `file` on malformed input or when the
    // model_type is not `expect` (a T5 spiece.model must be unigram, a Gemma tokenizer.model BPE).
    static SentencePieceModel parse(const std::string& bytes, const std::string& where,
                                    Algorithm expect = Algorithm::unigram, std::string_view file = "spiece.model");

    // sentencepiece's Encode(text) as (piece, id) pairs; consecutive unknown pieces merged into one.
    std::vector<Encoded> encode(std::string_view text) const;
    // The normalised text (charsmap, whitespace, dummy prefix, "▁").
    std::string normalize(std::string_view text) const;
    // PieceToId: the piece's id, else unk_id.
    int32_t piece_to_id(std::string_view piece) const;

    void set_add_dummy_prefix(bool on) { add_dummy_prefix_ = on; }
    int32_t unk_id() const { return unk_id_; }
    Algorithm algorithm() const { return algorithm_; }
    bool byte_fallback() const { return byte_fallback_; }
    size_t size() const { return pieces_.size(); }
    const Piece& piece(size_t id) const { return pieces_[id]; }

private:
    void index_pieces(const std::string& what);
    using Segments = std::vector<std::pair<std::string_view, int32_t>>;  // (normalised piece, id)
    Segments unigram_segment(std::string_view norm) const;
    Segments bpe_segment(std::string_view norm) const;
    // Bytes of the longest user-defined symbol at the start of `in`, 0 if none (sentencepiece's PrefixMatcher).
    size_t user_defined_prefix(std::string_view in) const;
    // Longest charsmap rule (or user-defined symbol) at the start of `in`: (replacement, bytes consumed).
    std::pair<std::string_view, size_t> normalize_prefix(std::string_view in) const;

    std::vector<Piece> pieces_;
    std::unordered_map<std::string, int32_t> vocab_;     // normal, user-defined, unused pieces (the trie)
    std::unordered_map<std::string, int32_t> reserved_;  // control, unknown, byte pieces
    std::vector<std::string> user_defined_;
    size_t max_piece_bytes_ = 0;
    size_t max_user_defined_bytes_ = 0;
    std::array<bool, 256> user_defined_first_{};  // first bytes of the user-defined symbols
    int32_t unk_id_ = -1;
    Algorithm algorithm_ = Algorithm::unigram;
    float min_score_ = 0.f, max_score_ = 0.f;
    bool byte_fallback_ = false;
    bool treat_whitespace_as_suffix_ = false;
    // NormalizerSpec
    std::vector<uint32_t> charsmap_trie_;  // darts-clone double-array units
    std::string charsmap_normalized_;      // NUL-separated replacement strings
    bool add_dummy_prefix_ = true;
    bool remove_extra_whitespaces_ = true;
    bool escape_whitespaces_ = true;
};

}  // namespace kiln::text
