// libFuzzer: the GPT-2 tokenizer (data/gpt2_bpe.hpp, the bundled data/gpt2 vocabulary) on
// arbitrary bytes: decode(encode(b)) == b, with special tokens as text and as tokens.
#include <memory>

#include "fuzz_common.hpp"
#include "sparselm/data/gpt2_bpe.hpp"

SPARSELM_FUZZ_TARGET(gpt2_encoder) {
  static auto tok = std::make_unique<sparselm::data::gpt2_bpe>(
      sparselm::data::gpt2_bpe::from_directory(SPARSELM_SOURCE_DIR "/data/gpt2"));
  const std::string_view s = fuzz::text(data, size);
  for (auto sp : {sparselm::data::specials::as_text, sparselm::data::specials::allow}) {
    const auto ids = tok->encode(s, sp);
    for (auto id : ids)
      if (id < 0 || std::size_t(id) >= tok->vocab_size()) std::abort();
    if (tok->decode(ids) != s) std::abort();
  }
  return 0;
}
