#pragma once
// A smaller vocabulary for token files: ids renumbered by their frequency in the training file, the
// most frequent limit − 1 ids keeping their own number (0 the most frequent) and every other id
// (rarer, or absent from the training file) merged into id limit − 1. A model then needs only
// `limit` rows of embedding and head, which at small widths is most of a GPT's multiply-adds (a
// study or a race of block shapes, not a tokenizer: the merged ids cannot be decoded apart).
//
//   sparselm::data::token_file train("train.tok"), valid("valid.tok");
//   auto m = sparselm::data::frequency_ranked_ids(train, 8192);
//   m.write(train, "train-v8192.tok");   // same documents and layout, vocab_size 8192
//   m.write(valid, "valid-v8192.tok");
//
// Ties keep the smaller id first (a stable sort), so the numbering depends on the training file only.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/data/token_file.hpp"

namespace sparselm::data {

struct vocab_limit_map {
  std::size_t limit = 0;
  std::vector<std::int32_t> map;  // old id -> new id (below limit)

  // The new id of an old one: the merged id for anything the training file's vocabulary did not hold.
  std::int32_t operator()(std::uint64_t id) const noexcept {
    return id < map.size() ? map[std::size_t(id)] : std::int32_t(limit - 1);
  }
  // Writes `in` renumbered to `out` (written beside and renamed into place), vocab_size `limit`.
  token_file_info write(const token_file& in, const std::filesystem::path& out) const {
    std::vector<std::int32_t> ids(std::size_t(in.size()));
    for (std::uint64_t i = 0; i < in.size(); ++i) ids[std::size_t(i)] = (*this)(in[i]);
    return write_token_file(out, ids, limit, in.sequence_length(), in.documents());
  }
};

inline vocab_limit_map frequency_ranked_ids(const token_file& train, std::size_t limit) {
  SPARSELM_CHECK(limit >= 2, train.path().string(), ": a vocabulary limit must be at least 2, got ", limit);
  SPARSELM_CHECK(limit <= train.vocab_size(), train.path().string(), ": vocabulary limit ", limit,
                 " is above the file's vocabulary ", train.vocab_size(), " (it would only make the model larger)");
  std::vector<std::uint64_t> count(std::size_t(train.vocab_size()), 0);
  for (std::uint64_t i = 0; i < train.size(); ++i) ++count[std::size_t(train[i])];
  std::vector<std::uint32_t> order(count.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = std::uint32_t(i);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return count[a] > count[b]; });
  vocab_limit_map m{limit, std::vector<std::int32_t>(count.size(), std::int32_t(limit - 1))};
  for (std::size_t r = 0; r + 1 < limit && r < order.size() && count[order[r]] > 0; ++r)
    m.map[order[r]] = std::int32_t(r);
  return m;
}

}  // namespace sparselm::data
