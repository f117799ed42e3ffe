#include "models/text/tokenizers/byte_bpe.h"

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>
#include <queue>

#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"

namespace kiln::text {

const std::array<std::string, 256>& byte_symbols() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            unsigned cp = printable(b) ? (unsigned)b : 256u + (unsigned)n++;
            std::string s;
            if (cp < 0x80) {
                s += (char)cp;
            } else {
                s += (char)(0xC0 | (cp >> 6));
                s += (char)(0x80 | (cp & 0x3F));
            }
            t[(size_t)b] = s;
        }
        return t;
    }();
    return table;
}

void ByteBpe::read_vocab(const std::string& json_text, const std::string& what) {
    nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
    KILN_CHECK(!j.is_discarded(), what, ": not valid JSON");
    KILN_CHECK(j.is_object() && !j.empty(), what, ": expected a non-empty object token -> id");
    vocab_.reserve(j.size());
    for (auto& [token, id] : j.items()) {
        KILN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX, what,
                   ": the id of token \"", token, "\" is not a non-negative integer");
        vocab_[token] = id.get<int32_t>();
    }
}

void ByteBpe::add_merge(const std::string& first, const std::string& second) {
    ranks_[first + " " + second] = next_rank_++;
}

void ByteBpe::read_merges(const std::string& text, MergesFormat format, const std::string& what) {
    check_utf8(text, what);
    const char* ws = " \t\r\n\v\f";
    auto strip = [&](const std::string& s) {
        size_t b = s.find_first_not_of(ws), e = s.find_last_not_of(ws);
        return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    std::vector<std::string> lines;
    const std::string body = format == MergesFormat::clip ? strip(text) : text;
    for (size_t pos = 0; pos <= body.size();) {
        size_t nl = body.find('\n', pos);
        if (nl == std::string::npos) nl = body.size();
        lines.push_back(body.substr(pos, nl - pos));
        pos = nl + 1;
    }
    const size_t clip_max = 49152 - 256 - 2;
    size_t first = 0, last = lines.size();
    if (format == MergesFormat::clip) {
        KILN_CHECK(lines.size() >= 2, what, ": no merges (expected a \"#version\" line, then one merge per line)");
        first = 1;
        last = std::min(lines.size(), clip_max + 1);
    }
    for (size_t i = first; i < last; ++i) {
        const std::string l = strip(lines[i]);
        if (format == MergesFormat::gpt2 && (l.empty() || (i == 0 && l.rfind("#version:", 0) == 0))) continue;
        std::vector<std::string> parts;  // str.split(): runs of whitespace
        for (size_t p = 0; p < l.size();) {
            size_t s = l.find_first_not_of(ws, p);
            if (s == std::string::npos) break;
            size_t t = l.find_first_of(ws, s);
            if (t == std::string::npos) t = l.size();
            parts.push_back(l.substr(s, t - s));
            p = t;
        }
        if (parts.empty()) {  // clip: a blank line takes a rank but merges nothing, as in transformers
            ++next_rank_;
            continue;
        }
        KILN_CHECK(parts.size() == 2, what, ": line ", i + 1, " is not a merge \"first second\"");
        add_merge(parts[0], parts[1]);
    }
}

int32_t ByteBpe::find(const std::string& token) const {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
}

std::vector<std::string> ByteBpe::merge(const std::string& piece) const {
    if (piece.empty()) return {};
    // The symbols are contiguous spans of `text` (the mapped bytes, then the suffix on the last one): a merge joins
    // two neighbours into one span. Symbol i starts at byte i's symbol; its begin never changes, its end grows.
    const auto& sym = byte_symbols();
    std::string text;
    const size_t n = piece.size();
    std::vector<size_t> begin(n), end(n), next(n), prev(n);
    for (size_t i = 0; i < n; ++i) {
        begin[i] = text.size();
        text += sym[(unsigned char)piece[i]];
        end[i] = text.size();
        next[i] = i + 1;
        prev[i] = i - 1;  // SIZE_MAX for the first
    }
    text += suffix_;
    end[n - 1] = text.size();
    if (ignore_merges_ && vocab_.count(text)) return {text};

    std::vector<bool> alive(n, true);
    struct Pair {
        int rank;
        size_t left, right, left_end, right_end;
        bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    // Lowest rank first; among one rank's occurrences, leftmost first.
    std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> heap;
    std::string key;
    auto push = [&](size_t l) {
        if (l >= n || !alive[l] || next[l] >= n) return;
        const size_t r = next[l];
        key.assign(text, begin[l], end[l] - begin[l]).append(" ").append(text, begin[r], end[r] - begin[r]);
        if (auto it = ranks_.find(key); it != ranks_.end()) heap.push({it->second, l, r, end[l], end[r]});
    };
    auto valid = [&](const Pair& p) {
        return alive[p.left] && alive[p.right] && next[p.left] == p.right && end[p.left] == p.left_end &&
               end[p.right] == p.right_end;
    };
    for (size_t i = 0; i + 1 < n; ++i) push(i);
    std::vector<Pair> batch;
    std::vector<size_t> merged;
    while (!heap.empty()) {
        // One rank at a time, as transformers' bpe() merges every occurrence of the best pair in one pass. Pairs the
        // merges create are queued after the pass (with a consistent merges file they rank later anyway).
        batch.clear();
        const int rank = heap.top().rank;
        while (!heap.empty() && heap.top().rank == rank) {
            batch.push_back(heap.top());
            heap.pop();
        }
        merged.clear();
        for (const Pair& p : batch) {
            if (!valid(p)) continue;  // consumed by an overlapping occurrence to its left, or stale
            end[p.left] = end[p.right];
            alive[p.right] = false;
            next[p.left] = next[p.right];
            if (next[p.left] < n) prev[next[p.left]] = p.left;
            merged.push_back(p.left);
        }
        for (size_t l : merged) {
            if (!alive[l]) continue;
            if (prev[l] < n) push(prev[l]);
            push(l);
        }
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < n; i = next[i]) out.push_back(text.substr(begin[i], end[i] - begin[i]));
    return out;
}

void ByteBpe::append_ids(const std::string& piece, const std::function<int32_t(const std::string&)>& token_id,
                         std::vector<int32_t>& ids) const {
    {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        if (auto c = cache_.find(piece); c != cache_.end()) {
            ids.insert(ids.end(), c->second.begin(), c->second.end());
            return;
        }
    }
    std::vector<int32_t> word;
    for (const std::string& token : merge(piece)) word.push_back(token_id(token));
    ids.insert(ids.end(), word.begin(), word.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= 100000) cache_.clear();  // bounded: prompts are open-ended
    cache_.emplace(piece, std::move(word));
}

}  // namespace kiln::text
