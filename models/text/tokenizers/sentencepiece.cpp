#include "models/text/tokenizers/sentencepiece.h"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <queue>

#include "runtime/core/error.h"

namespace kiln::text {

namespace {

// Protocol-buffer wire format reader over one message; every read is bounds-checked.
class ProtoReader {
public:
    ProtoReader(std::string_view data, const std::string& what) : data_(data), what_(what) {}
    bool done() const { return pos_ >= data_.size(); }

    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            KILN_CHECK(pos_ < data_.size(), what_, ": truncated varint at byte ", pos_);
            const auto b = static_cast<uint8_t>(data_[pos_++]);
            v |= uint64_t(b & 0x7F) << shift;
            if (!(b & 0x80)) return v;
        }
        KILN_FAIL(what_, ": varint longer than 10 bytes at byte ", pos_);
    }
    // Next field: (field number, wire type).
    std::pair<uint32_t, int> tag() {
        const uint64_t t = varint();
        const auto field = static_cast<uint32_t>(t >> 3);
        KILN_CHECK(field != 0 && (t >> 3) <= 0x1FFFFFFF, what_, ": bad field number at byte ", pos_);
        return {field, static_cast<int>(t & 7)};
    }
    std::string_view bytes() {
        const uint64_t n = varint();
        KILN_CHECK(n <= data_.size() - pos_, what_, ": length ", n, " at byte ", pos_, " runs past the end (",
                   data_.size() - pos_, " bytes left)");
        std::string_view s = data_.substr(pos_, static_cast<size_t>(n));
        pos_ += static_cast<size_t>(n);
        return s;
    }
    uint32_t fixed32() {
        KILN_CHECK(data_.size() - pos_ >= 4, what_, ": truncated fixed32 at byte ", pos_);
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) v |= uint32_t(static_cast<uint8_t>(data_[pos_ + k])) << (8 * k);
        pos_ += 4;
        return v;
    }
    float float32() {
        const uint32_t u = fixed32();
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    void skip(int wire) {
        switch (wire) {
            case 0:
                varint();
                return;
            case 1:
                KILN_CHECK(data_.size() - pos_ >= 8, what_, ": truncated fixed64 at byte ", pos_);
                pos_ += 8;
                return;
            case 2:
                bytes();
                return;
            case 5:
                fixed32();
                return;
            default:
                KILN_FAIL(what_, ": unsupported wire type ", wire, " at byte ", pos_);
        }
    }
    void expect(int wire, int want, uint32_t field) {
        KILN_CHECK(wire == want, what_, ": field ", field, " has wire type ", wire, ", expected ", want);
    }

private:
    std::string_view data_;
    size_t pos_ = 0;
    const std::string& what_;
};

// Length of the UTF-8 character starting with byte c, as sentencepiece's OneCharLen.
size_t one_char_len(unsigned char c) { return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[c >> 4]; }

// Length of the valid UTF-8 character at the start of s, or 0 when malformed.
size_t valid_char_len(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t len = one_char_len(p[0]);
    if (len == 1) return p[0] < 0x80 ? 1 : 0;
    if (len > s.size()) return 0;
    uint32_t cp = p[0] & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581
constexpr float kUnkPenalty = 10.0f;

const char* algorithm_name(int model_type) {
    switch (model_type) {
        case 1:
            return "unigram";
        case 2:
            return "BPE";
        case 3:
            return "word";
        case 4:
            return "char";
        default:
            return "unknown";
    }
}

// sentencepiece's PieceToByte: "<0xXX>" (upper-case hex) -> XX, else -1.
int piece_to_byte(const std::string& p) {
    if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
    int v = 0;
    for (size_t k = 3; k < 5; ++k) {
        const char c = p[k];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

}  // namespace

SentencePieceModel SentencePieceModel::parse(const std::string& bytes, const std::string& where, Algorithm expect,
                                             std::string_view file) {
    const std::string what = where + " " + std::string(file);
    SentencePieceModel m;
    int model_type = 1;  // UNIGRAM
    bool has_trainer_spec = false, has_normalizer_spec = false;
    std::string_view charsmap;
    ProtoReader top(bytes, what);
    while (!top.done()) {
        auto [field, wire] = top.tag();
        if (field == 1) {  // repeated SentencePiece pieces
            top.expect(wire, 2, field);
            ProtoReader r(top.bytes(), what);
            Piece p;
            while (!r.done()) {
                auto [f, w] = r.tag();
                if (f == 1) {
                    r.expect(w, 2, f);
                    p.piece = std::string(r.bytes());
                } else if (f == 2) {
                    r.expect(w, 5, f);
                    p.score = r.float32();
                } else if (f == 3) {
                    r.expect(w, 0, f);
                    p.type = static_cast<int>(r.varint());
                } else {
                    r.skip(w);
                }
            }
            m.pieces_.push_back(std::move(p));
        } else if (field == 2) {  // TrainerSpec
            top.expect(wire, 2, field);
            has_trainer_spec = true;
            ProtoReader r(top.bytes(), what);
            while (!r.done()) {
                auto [f, w] = r.tag();
                if (f == 3 || f == 24 || f == 35) {
                    r.expect(w, 0, f);
                    const uint64_t v = r.varint();
                    if (f == 3) model_type = static_cast<int>(v);
                    if (f == 24) m.treat_whitespace_as_suffix_ = v != 0;
                    if (f == 35) m.byte_fallback_ = v != 0;
                } else {
                    r.skip(w);
                }
            }
        } else if (field == 3) {  // NormalizerSpec
            top.expect(wire, 2, field);
            has_normalizer_spec = true;
            ProtoReader r(top.bytes(), what);
            while (!r.done()) {
                auto [f, w] = r.tag();
                if (f == 2) {
                    r.expect(w, 2, f);
                    charsmap = r.bytes();
                } else if (f >= 3 && f <= 5) {
                    r.expect(w, 0, f);
                    const bool v = r.varint() != 0;
                    (f == 3 ? m.add_dummy_prefix_ : f == 4 ? m.remove_extra_whitespaces_ : m.escape_whitespaces_) = v;
                } else {
                    r.skip(w);
                }
            }
        } else {
            top.skip(wire);
        }
    }
    // Every trained model has both specs; a BPE file without them is cut short (the defaults would silently
    // mean a unigram model with a dummy prefix). Unigram files keep the lenient reading they always had.
    if (expect == Algorithm::bpe) {
        KILN_CHECK(has_trainer_spec, what, ": no trainer_spec (truncated file?)");
        KILN_CHECK(has_normalizer_spec, what, ": no normalizer_spec (truncated file?)");
    }
    KILN_CHECK(model_type == 1 || model_type == 2, what, ": model_type ", model_type, " (", algorithm_name(model_type),
               ") is not supported (only unigram and BPE are)");
    KILN_CHECK(model_type == static_cast<int>(expect), what, ": a SentencePiece ", algorithm_name(model_type),
               " model where a ", algorithm_name(static_cast<int>(expect)), " model is expected");
    m.algorithm_ = static_cast<Algorithm>(model_type);
    KILN_CHECK(!m.pieces_.empty(), what, ": no pieces");

    m.index_pieces(what);

    // precompiled_charsmap = u32 trie size (little-endian) | darts-clone units | NUL-separated replacements.
    if (!charsmap.empty()) {
        KILN_CHECK(charsmap.size() > 4, what, ": precompiled_charsmap of ", charsmap.size(), " bytes is broken");
        uint32_t trie_bytes = 0;
        for (int k = 0; k < 4; ++k) trie_bytes |= uint32_t(static_cast<uint8_t>(charsmap[k])) << (8 * k);
        KILN_CHECK(trie_bytes <= charsmap.size() - 4 && trie_bytes % 4 == 0 && trie_bytes > 0, what,
                   ": precompiled_charsmap trie size ", trie_bytes, " does not fit its ", charsmap.size(), " bytes");
        m.charsmap_trie_.resize(trie_bytes / 4);
        std::memcpy(m.charsmap_trie_.data(), charsmap.data() + 4, trie_bytes);  // little-endian host
        m.charsmap_normalized_ = std::string(charsmap.substr(4 + trie_bytes));
    }
    return m;
}

// sentencepiece's InitializePieces: the piece -> id tables, the unknown piece, user-defined symbols, the score range
// of normal pieces, and the 256 byte pieces byte_fallback needs.
void SentencePieceModel::index_pieces(const std::string& what) {
    std::vector<bool> byte_found(256, false);
    min_score_ = FLT_MAX;
    max_score_ = FLT_MIN;  // as sentencepiece: the max starts at the smallest positive float
    for (size_t i = 0; i < pieces_.size(); ++i) {
        const Piece& p = pieces_[i];
        KILN_CHECK(p.type >= kNormal && p.type <= kByte, what, ": piece ", i, " has unknown type ", p.type);
        KILN_CHECK(!p.piece.empty(), what, ": piece ", i, " is empty");
        const bool in_trie = p.type == kNormal || p.type == kUserDefined || p.type == kUnused;
        auto& table = in_trie ? vocab_ : reserved_;
        KILN_CHECK(!vocab_.count(p.piece) && !reserved_.count(p.piece), what, ": piece '", p.piece,
                   "' is defined twice");
        table.emplace(p.piece, static_cast<int32_t>(i));
        if (in_trie) max_piece_bytes_ = std::max(max_piece_bytes_, p.piece.size());
        if (p.type == kUnknown) {
            KILN_CHECK(unk_id_ < 0, what, ": more than one unknown piece");
            unk_id_ = static_cast<int32_t>(i);
        }
        if (p.type == kUserDefined) {
            user_defined_.push_back(p.piece);
            max_user_defined_bytes_ = std::max(max_user_defined_bytes_, p.piece.size());
            user_defined_first_[static_cast<uint8_t>(p.piece[0])] = true;
        }
        if (p.type == kNormal) {
            min_score_ = std::min(min_score_, p.score);
            max_score_ = std::max(max_score_, p.score);
        }
        if (p.type == kByte) {
            KILN_CHECK(byte_fallback_, what, ": byte piece '", p.piece, "' although byte_fallback is off");
            const int b = piece_to_byte(p.piece);
            KILN_CHECK(b >= 0, what, ": byte piece '", p.piece, "' is not <0xXX>");
            byte_found[static_cast<size_t>(b)] = true;
        }
    }
    KILN_CHECK(unk_id_ >= 0, what, ": no unknown piece (<unk>) defined");
    KILN_CHECK(!byte_fallback_ || std::find(byte_found.begin(), byte_found.end(), false) == byte_found.end(), what,
               ": byte_fallback is on but not all 256 <0xXX> pieces are defined");
}

size_t SentencePieceModel::user_defined_prefix(std::string_view in) const {
    if (in.empty() || !user_defined_first_[static_cast<uint8_t>(in[0])]) return 0;  // most positions
    for (size_t n = std::min(in.size(), max_user_defined_bytes_); n > 0; --n) {
        auto it = vocab_.find(std::string(in.substr(0, n)));
        if (it != vocab_.end() && pieces_[it->second].type == kUserDefined) return n;
    }
    return 0;
}

std::pair<std::string_view, size_t> SentencePieceModel::normalize_prefix(std::string_view in) const {
    // User-defined symbols pass through unnormalised (longest match).
    if (const size_t n = user_defined_prefix(in); n > 0) return {in.substr(0, n), n};
    // darts-clone commonPrefixSearch, keeping the longest match.
    size_t longest = 0;
    uint32_t value = 0;
    if (!charsmap_trie_.empty()) {
        const auto& a = charsmap_trie_;
        auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
        size_t node = offset(a[0]);
        for (size_t i = 0; i < in.size(); ++i) {
            const auto c = static_cast<uint8_t>(in[i]);
            node ^= c;
            if (node >= a.size()) break;
            const uint32_t unit = a[node];
            if ((unit & ((1u << 31) | 0xFF)) != c) break;  // label mismatch
            node ^= offset(unit);
            if (node >= a.size()) break;
            if ((unit >> 8) & 1) {  // has leaf: the value sits in the unit at node
                longest = i + 1;
                value = a[node] & 0x7FFFFFFFu;
            }
        }
    }
    if (longest > 0 && value < charsmap_normalized_.size()) {
        const char* s = charsmap_normalized_.data() + value;
        const size_t n = strnlen(s, charsmap_normalized_.size() - value);
        return {std::string_view(s, n), longest};
    }
    const size_t len = valid_char_len(in);
    if (len == 0) return {"\xef\xbf\xbd", 1};  // malformed: U+FFFD, one byte consumed
    return {in.substr(0, len), len};
}

std::string SentencePieceModel::normalize(std::string_view in) const {
    std::string out;
    if (remove_extra_whitespaces_) {  // leading whitespace
        while (!in.empty()) {
            auto [sp, n] = normalize_prefix(in);
            if (sp != " ") break;
            in.remove_prefix(n);
        }
    }
    if (in.empty()) return out;
    auto add_ws = [&] { out += escape_whitespaces_ ? kSpaceSymbol : std::string_view(" "); };
    if (!treat_whitespace_as_suffix_ && add_dummy_prefix_) add_ws();
    bool prev_space = remove_extra_whitespaces_;
    while (!in.empty()) {
        auto [sp, n] = normalize_prefix(in);
        if (prev_space && remove_extra_whitespaces_) {
            while (!sp.empty() && sp[0] == ' ') sp.remove_prefix(1);
        }
        if (!sp.empty()) {
            for (char c : sp) {
                if (escape_whitespaces_ && c == ' ')
                    out += kSpaceSymbol;
                else
                    out += c;
            }
            prev_space = sp.back() == ' ';
        }
        in.remove_prefix(n);
        if (!remove_extra_whitespaces_) prev_space = false;
    }
    if (remove_extra_whitespaces_) {  // trailing whitespace
        const std::string_view space = escape_whitespaces_ ? kSpaceSymbol : std::string_view(" ");
        while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
            out.resize(out.size() - space.size());
    }
    if (treat_whitespace_as_suffix_ && add_dummy_prefix_) add_ws();
    return out;
}

int32_t SentencePieceModel::piece_to_id(std::string_view piece) const {
    const std::string key(piece);
    if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
    if (auto it = reserved_.find(key); it != reserved_.end()) return it->second;
    return unk_id_;
}

SentencePieceModel::Segments SentencePieceModel::unigram_segment(std::string_view norm) const {
    const size_t size = norm.size();

    // Viterbi over byte positions as EncodeOptimized: a piece candidate is computed in double (the user-defined
    // score `length * max_score - 0.1` is a double expression), compared with the stored float and stored as
    // float; the unknown candidate is float throughout. Ties keep the first candidate (the earliest start).
    struct Node {
        int32_t id = -1;
        float score = 0.f;
        long start = -1;
    };
    std::vector<Node> best(size + 1);
    const float unk_score = min_score_ - kUnkPenalty;
    std::string key;
    for (size_t start = 0; start < size;) {
        const float here = best[start].score;
        const size_t mblen = std::min(one_char_len(static_cast<uint8_t>(norm[start])), size - start);
        bool has_single = false;
        const size_t max_len = std::min(max_piece_bytes_, size - start);
        for (size_t len = 1; len <= max_len; ++len) {
            key.assign(norm, start, len);
            auto it = vocab_.find(key);
            if (it == vocab_.end()) continue;
            const int32_t id = it->second;
            const Piece& p = pieces_[id];
            if (p.type == kUnused) continue;
            const double score =
                p.type == kUserDefined ? (static_cast<double>(len) * max_score_ - 0.1) : static_cast<double>(p.score);
            const double cand = score + here;
            Node& t = best[start + len];
            if (t.start == -1 || cand > t.score) {
                t.score = static_cast<float>(cand);
                t.start = static_cast<long>(start);
                t.id = id;
            }
            if (len == mblen) has_single = true;
        }
        if (!has_single) {
            Node& t = best[start + mblen];
            const float cand = unk_score + here;
            if (t.start == -1 || cand > t.score) {
                t.score = cand;
                t.start = static_cast<long>(start);
                t.id = unk_id_;
            }
        }
        start += mblen;
    }
    Segments path;
    for (size_t end = size; end > 0;) {
        const Node& n = best[end];
        const auto s = static_cast<size_t>(n.start);
        path.emplace_back(norm.substr(s, end - s), n.id);
        end = s;
    }
    std::reverse(path.begin(), path.end());
    return path;
}

SentencePieceModel::Segments SentencePieceModel::bpe_segment(std::string_view norm) const {
    // bpe_model.cc: the text starts as characters (a user-defined symbol is one frozen symbol, never merged); the
    // adjacent pair whose concatenation is a piece with the highest score is merged, the leftmost among equal
    // scores, until no pair is a piece. Stale agenda entries are recognised by their size: a symbol only grows.
    struct Symbol {
        int prev, next;
        bool freeze;
        std::string_view piece;
    };
    struct Pair {
        int left, right;
        float score;
        size_t size;
    };
    auto pops_later = [](const Pair& a, const Pair& b) {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Pair, std::vector<Pair>, decltype(pops_later)> agenda(pops_later);
    std::vector<Symbol> symbols;
    // An unused piece may be merged through and is split back afterwards: merged piece -> its last two halves.
    std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;

    auto joined = [&](int l, int r) {
        return std::string_view(symbols[l].piece.data(), symbols[l].piece.size() + symbols[r].piece.size());
    };
    auto maybe_add = [&](int l, int r) {
        if (l < 0 || r < 0 || symbols[l].freeze || symbols[r].freeze) return;
        const std::string_view piece = joined(l, r);
        auto it = vocab_.find(std::string(piece));
        if (it == vocab_.end()) return;
        const Piece& p = pieces_[it->second];
        agenda.push({l, r, p.score, piece.size()});
        if (p.type == kUnused) rev_merge[piece] = {symbols[l].piece, symbols[r].piece};
    };

    for (std::string_view rest = norm; !rest.empty();) {
        size_t n = user_defined_prefix(rest);
        const bool freeze = n > 0;
        if (!freeze) n = std::min(rest.size(), one_char_len(static_cast<uint8_t>(rest[0])));
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({index - 1, n < rest.size() ? index + 1 : -1, freeze, rest.substr(0, n)});
        rest.remove_prefix(n);
    }
    for (size_t i = 1; i < symbols.size(); ++i) maybe_add(static_cast<int>(i - 1), static_cast<int>(i));

    while (!agenda.empty()) {
        const Pair top = agenda.top();
        agenda.pop();
        Symbol& l = symbols[top.left];
        Symbol& r = symbols[top.right];
        if (l.piece.empty() || r.piece.empty() || l.piece.size() + r.piece.size() != top.size) continue;
        l.piece = joined(top.left, top.right);
        l.next = r.next;
        if (r.next >= 0) symbols[r.next].prev = top.left;
        r.piece = {};
        maybe_add(l.prev, top.left);
        maybe_add(top.left, l.next);
    }

    Segments path;
    auto resegment = [&](auto& self, std::string_view w) -> void {
        const int32_t id = piece_to_id(w);
        auto it = pieces_[id].type == kUnused ? rev_merge.find(w) : rev_merge.end();
        if (it == rev_merge.end()) {
            path.emplace_back(w, id);
            return;
        }
        self(self, it->second.first);
        self(self, it->second.second);
    };
    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) resegment(resegment, symbols[i].piece);
    return path;
}

std::vector<SentencePieceModel::Encoded> SentencePieceModel::encode(std::string_view text) const {
    const std::string norm = normalize(text);
    std::vector<Encoded> out;
    if (norm.empty()) return out;
    const Segments path = algorithm_ == Algorithm::bpe ? bpe_segment(norm) : unigram_segment(norm);

    // As PopulateSentencePieceText: unknown pieces become bytes with byte_fallback, else runs merge into one.
    bool prev_unk = false;
    for (const auto& [surface, id] : path) {
        const bool is_unk = id == unk_id_;
        if (is_unk && byte_fallback_) {
            for (unsigned char c : surface) {
                char name[8];
                std::snprintf(name, sizeof(name), "<0x%02X>", c);
                out.push_back({name, piece_to_id(name)});
            }
        } else if (is_unk && prev_unk) {
            out.back().piece += surface;
        } else {
            out.push_back({std::string(surface), id});
        }
        prev_unk = is_unk;
    }
    return out;
}

}  // namespace kiln::text
