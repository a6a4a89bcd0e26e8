// libFuzzer: the token file header (data/token_file.hpp) against the size of the input, then every
// id range check a reader does on a validated header.
#include "fuzz_common.hpp"
#include "sparselm/data/token_file.hpp"

SPARSELM_FUZZ_TARGET(token_header) {
  fuzz::expect_clean([&] {
    const auto info = sparselm::data::parse_token_file_header({data, size}, "fuzz.tok");
    // a valid header promises exactly this many bytes of ids
    if (std::uint64_t(size) != sparselm::data::token_file_header_size + info.tokens * std::uint64_t(info.dtype))
      std::abort();
  });
  return 0;
}
