// libFuzzer: e-mail messages (data/text_classification.hpp's email_text, as bert_classify reads the
// SpamAssassin corpus) into WordPiece ids. Never an error: the result must be valid UTF-8 of at
// most max_bytes, and its ids in the vocabulary.
#include "fuzz_common.hpp"
#include "sparselm/data/text.hpp"
#include "sparselm/data/text_classification.hpp"
#include "sparselm/data/wordpiece.hpp"

namespace sd = sparselm::data;

SPARSELM_FUZZ_TARGET(email_text) {
  static const sd::wordpiece wp = sd::wordpiece::from_file(SPARSELM_SOURCE_DIR "/data/bert/vocab.txt");
  const std::size_t max_bytes = 1 + (size ? data[0] : 0) * 8;
  const std::string t = sd::email_text(fuzz::text(data, size), max_bytes);
  if (t.size() > max_bytes) std::abort();
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  for (const auto* end = p + t.size(); p < end;) {
    const auto c = sd::read_utf8(p, end);
    if (c.invalid) std::abort();
    p += c.length;
  }
  for (auto id : wp.encode(t))
    if (id < 0 || std::size_t(id) >= wp.size()) std::abort();
  return 0;
}
