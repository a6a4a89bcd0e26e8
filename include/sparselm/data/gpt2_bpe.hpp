#pragma once
// GPT-2 byte-level BPE tokenizer (r50k_base), exact to the reference encoder.
//
//   auto tok = sparselm::data::gpt2_bpe::from_directory(SPARSELM_SOURCE_DIR "/data/gpt2");
//   std::vector<std::int32_t> ids = tok.encode("Hello world");          // {15496, 995}
//   std::string text = tok.decode(ids);                                 // "Hello world"
//   tok.encode("a<|endoftext|>b", sparselm::data::specials::allow);    // {64, 50256, 65}
//
// Pipeline: text -> pre-tokenisation pieces -> bytes of each piece as byte tokens -> BPE merges.
//
// - Pre-tokenisation is GPT-2's rule, implemented by hand (no regex engine):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   with \p{L}, \p{N} and \s (the White_Space property) from a generated table
//   (data/unicode_tables.hpp, scripts/gen_unicode_tables.py). Alternatives are tried in order at
//   each position, each one greedy; `\s+(?!\S)` takes a run of white space that ends the text, or
//   all but the last white-space character of a longer run, which then prefixes the next word.
// - Invalid UTF-8 is never rejected: each invalid byte is one character of class "other" (see
//   data/text.hpp), so it joins neighbouring punctuation in ` ?[^\s\p{L}\p{N}]+`. Every byte has
//   a token, hence decode(encode(b)) == b for any byte string b.
// - BPE: the pair with the lowest merge rank is merged everywhere in the piece (left to right,
//   non-overlapping), repeatedly, as in the reference. Long pieces use an equivalent O(n log n)
//   heap form when the merge list allows it (checked at load time). Results are cached per piece.
// - `<|endoftext|>` (id 50256) is a special token only with specials::allow; by default the text
//   "<|endoftext|>" is encoded as ordinary text, like the original GPT-2 encoder.
//
// A gpt2_bpe is cheap to copy (the vocabulary is shared and immutable). encode() updates the
// piece cache, so one object must not be used by two threads at once: copy it per thread.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/data/text.hpp"

#include "sparselm/data/detail/gpt2_vocab.hpp"
#include "sparselm/data/gpt2_pretokenize.hpp"

namespace sparselm::data {

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

class gpt2_bpe {
 public:
  // Loads `encoder.json` (token string -> id) and `vocab.bpe` (merges). Malformed input raises
  // sparselm::error naming the file and the line (vocab.bpe, JSON syntax) or the key.
  static gpt2_bpe from_files(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe) {
    auto v = std::make_shared<detail::gpt2_vocab>();
    detail::load_gpt2_encoder(*v, read_file_bytes(encoder_json, "GPT-2 encoder.json", max_vocab_bytes), encoder_json.string());
    detail::load_gpt2_merges(*v, read_file_bytes(vocab_bpe, "GPT-2 vocab.bpe", max_vocab_bytes), vocab_bpe.string());
    return gpt2_bpe(std::move(v));
  }
  // The same from in-memory contents; `name` prefixes error messages.
  static gpt2_bpe from_strings(std::string_view encoder_json, std::string_view vocab_bpe,
                               const std::string& name = "<memory>") {
    auto v = std::make_shared<detail::gpt2_vocab>();
    detail::load_gpt2_encoder(*v, encoder_json, name + "/encoder.json");
    detail::load_gpt2_merges(*v, vocab_bpe, name + "/vocab.bpe");
    return gpt2_bpe(std::move(v));
  }
  // `dir/encoder.json` + `dir/vocab.bpe`.
  static gpt2_bpe from_directory(const std::filesystem::path& dir) {
    return from_files(dir / "encoder.json", dir / "vocab.bpe");
  }

  // Number of ids (50257 for GPT-2); valid ids are 0 .. vocab_size()-1.
  std::size_t vocab_size() const noexcept { return vocab_->size(); }
  std::size_t merge_count() const noexcept { return vocab_->merge_count; }
  // Id of `<|endoftext|>`, or -1 if the vocabulary has none.
  std::int32_t endoftext_id() const noexcept { return vocab_->endoftext; }

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<std::int32_t>& out, specials sp = specials::as_text) {
    if (sp == specials::allow && vocab_->endoftext >= 0) {
      std::size_t pos = 0;
      for (std::size_t hit; (hit = text.find(gpt2_endoftext, pos)) != std::string_view::npos;
           pos = hit + gpt2_endoftext.size()) {
        encode_ordinary(text.substr(pos, hit - pos), out);
        out.push_back(vocab_->endoftext);
      }
      text = text.substr(pos);
    }
    encode_ordinary(text, out);
  }
  std::vector<std::int32_t> encode(std::string_view text, specials sp = specials::as_text) {
    std::vector<std::int32_t> out;
    out.reserve(text.size() / 3 + 4);
    encode(text, out, sp);
    return out;
  }

  // Bytes of `ids` concatenated. An id outside 0..vocab_size()-1 raises sparselm::error naming
  // the id and its position.
  std::string decode(std::span<const std::int32_t> ids) const {
    std::string out;
    append_decoded(ids, out);
    return out;
  }
  void append_decoded(std::span<const std::int32_t> ids, std::string& out) const {
    const std::size_t n = vocab_size();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      SPARSELM_CHECK(ids[i] >= 0 && std::size_t(ids[i]) < n, "gpt2_bpe::decode: token id ", ids[i], " at position ",
                     i, " is outside the vocabulary 0..", n - 1);
      out += vocab_->bytes(ids[i]);
    }
  }
  // Raw bytes of one token (checked like decode).
  std::string_view token_bytes(std::int32_t id) const {
    SPARSELM_CHECK(id >= 0 && std::size_t(id) < vocab_size(), "gpt2_bpe::token_bytes: token id ", id,
                   " is outside the vocabulary 0..", vocab_size() - 1);
    return vocab_->bytes(id);
  }
  // Id of the token whose bytes are exactly `bytes`, or -1.
  std::int32_t token_id(std::string_view bytes) const {
    auto it = vocab_->id_of.find(std::string(bytes));
    return it == vocab_->id_of.end() ? -1 : it->second;
  }

  std::size_t cache_size() const noexcept { return cache_.size(); }
  void clear_cache() { cache_.clear(); }
  // Whether long pieces may use the heap form of BPE (true for GPT-2's merges).
  bool uses_heap_bpe() const noexcept { return vocab_->heap_exact; }
  // Pieces longer than this many bytes use the heap form (default 48). For tests: 0 sends every
  // piece through the heap, SIZE_MAX none. Clears the cache.
  void set_heap_threshold(std::size_t bytes) {
    short_piece_ = bytes;
    cache_.clear();
  }

 private:
  explicit gpt2_bpe(std::shared_ptr<const detail::gpt2_vocab> v) : vocab_(std::move(v)) {}

  // Pieces longer than this are not cached (they are rare and would fill the cache).
  static constexpr std::size_t max_cached_piece = 256;
  std::size_t short_piece_ = 48;

  void encode_ordinary(std::string_view text, std::vector<std::int32_t>& out) {
    gpt2_pretokenize(text, [&](std::size_t b, std::size_t e) { encode_piece(text.substr(b, e - b), out); });
  }

  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) {
    const auto& v = *vocab_;
    if (piece.size() == 1) {
      out.push_back(v.byte_token[static_cast<unsigned char>(piece[0])]);
      return;
    }
    const bool cacheable = piece.size() <= max_cached_piece;
    std::uint64_t h = 0;
    if (cacheable) {
      h = detail::hash_bytes(piece);
      auto hit = cache_.find(piece, h);
      if (!hit.empty()) {
        out.insert(out.end(), hit.begin(), hit.end());
        return;
      }
    }
    syms_.resize(piece.size());
    for (std::size_t i = 0; i < piece.size(); ++i) syms_[i] = v.byte_token[static_cast<unsigned char>(piece[i])];
    std::size_t n = (piece.size() <= short_piece_ || !v.heap_exact) ? merge_simple(syms_.data(), syms_.size())
                                                                   : merge_heap(syms_.data(), syms_.size());
    std::span<const std::int32_t> ids(syms_.data(), n);
    if (cacheable) cache_.insert(piece, h, ids);
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // The reference algorithm: merge the lowest-ranked pair everywhere, repeat. O(n^2) per piece.
  std::size_t merge_simple(std::int32_t* s, std::size_t n) const {
    const auto& m = vocab_->merges;
    while (n >= 2) {
      std::uint32_t best = detail::merge_table::no_rank;
      std::size_t at = 0;
      std::int32_t merged = 0;
      for (std::size_t i = 0; i + 1 < n; ++i) {
        const auto* e = m.find(s[i], s[i + 1]);
        if (e && e->rank < best) {
          best = e->rank;
          at = i;
          merged = e->merged;
        }
      }
      if (best == detail::merge_table::no_rank) break;
      const std::int32_t a = s[at], b = s[at + 1];
      std::size_t w = at, i = at;
      while (i < n) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
          s[w++] = merged;
          i += 2;
        } else {
          s[w++] = s[i++];
        }
      }
      n = w;
    }
    return n;
  }

  // Equivalent O(n log n) form over a linked list with a heap of (rank, position); exact when
  // every pair a merge creates ranks after it (vocab.heap_exact), so ranks pop in order and
  // equal ranks pop left to right, as the reference merges them.
  std::size_t merge_heap(std::int32_t* s, std::size_t n) {
    const auto& m = vocab_->merges;
    struct cand {
      std::uint32_t rank;
      std::uint32_t pos, right;
      std::int32_t a, b, merged;
      bool operator>(const cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    prev_.resize(n);
    next_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      prev_[i] = std::uint32_t(i) - 1;  // wraps to UINT32_MAX for the first
      next_[i] = std::uint32_t(i + 1);
    }
    constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    const std::uint32_t nn = std::uint32_t(n);
    std::vector<cand> heap_storage;
    heap_storage.reserve(n);
    std::priority_queue<cand, std::vector<cand>, std::greater<>> heap(std::greater<>{}, std::move(heap_storage));
    auto push = [&](std::uint32_t i) {
      if (i == none || next_[i] >= nn) return;
      std::uint32_t j = next_[i];
      if (const auto* e = m.find(s[i], s[j])) heap.push({e->rank, i, j, s[i], s[j], e->merged});
    };
    for (std::uint32_t i = 0; i + 1 < nn; ++i) push(i);
    constexpr std::int32_t dead = -1;
    while (!heap.empty()) {
      cand c = heap.top();
      heap.pop();
      if (s[c.pos] != c.a || next_[c.pos] != c.right || c.right >= nn || s[c.right] != c.b) continue;
      s[c.pos] = c.merged;
      s[c.right] = dead;
      std::uint32_t after = next_[c.right];
      next_[c.pos] = after;
      if (after < nn) prev_[after] = c.pos;
      push(prev_[c.pos]);
      push(c.pos);
    }
    std::size_t w = 0;
    for (std::uint32_t i = 0; i < nn; i = next_[i]) s[w++] = s[i];
    return w;
  }

  std::shared_ptr<const detail::gpt2_vocab> vocab_;
  detail::piece_cache cache_;
  std::vector<std::int32_t> syms_;
  std::vector<std::uint32_t> prev_, next_;
};

}  // namespace sparselm::data
