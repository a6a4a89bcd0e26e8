// libFuzzer: GPT-2 BPE vocabulary files (data/gpt2_bpe.hpp): the input is encoder.json and
// vocab.bpe separated by the first NUL byte; a vocabulary that loads must encode and decode its
// own input back to the same bytes.
#include <cstring>

#include "fuzz_common.hpp"
#include "sparselm/data/gpt2_bpe.hpp"

SPARSELM_FUZZ_TARGET(gpt2_files) {
  const auto* nul = static_cast<const std::uint8_t*>(std::memchr(data, 0, size));
  const std::size_t cut = nul ? std::size_t(nul - data) : size;
  const std::string_view enc = fuzz::text(data, cut), merges = fuzz::text(data + cut, size - cut).substr(nul ? 1 : 0);
  fuzz::expect_clean([&] {
    auto tok = sparselm::data::gpt2_bpe::from_strings(enc, merges, "fuzz");
    const auto ids = tok.encode(merges);
    if (tok.decode(ids) != merges) std::abort();
  });
  return 0;
}
