// libFuzzer: the safetensors reader (io/safetensors.hpp) on arbitrary bytes, with checksum
// verification, then every tensor read back as the reader allows (F32 / I32, and as bf16 and half
// optimiser slots).
#include <vector>

#include "fuzz_common.hpp"
#include "sparselm/io/safetensors.hpp"

SPARSELM_FUZZ_TARGET(safetensors) {
  fuzz::expect_clean([&] {
    sparselm::io::safetensors_file f({data, size}, "fuzz.safetensors");
    for (const auto& t : f.tensors()) {
      if (t.elements() > (1u << 20)) continue;
      if (t.dtype == sparselm::io::st_dtype::i32) {
        (void)f.read_i32(t.name, t.shape);
      } else {
        std::vector<float> dst(t.elements());
        f.read_f32(t.name, t.shape, dst);
        // as optimiser slots are read: in their own 16-bit type or from F32, else refused
        std::vector<sparselm::bf16> b(t.elements());
        std::vector<sparselm::half> h(t.elements());
        fuzz::expect_clean([&] { f.read_as<sparselm::bf16>(t.name, t.shape, b); });
        fuzz::expect_clean([&] { f.read_as<sparselm::half>(t.name, t.shape, h); });
      }
    }
  });
  return 0;
}
