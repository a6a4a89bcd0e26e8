// libFuzzer: the safetensors reader (io/safetensors.hpp) on arbitrary bytes, with checksum
// verification, then every tensor read back as the reader allows.
#include <vector>

#include "fuzz_common.hpp"
#include "sparselm/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::expect_clean([&] {
    sparselm::io::safetensors_file f({data, size}, "fuzz.safetensors");
    for (const auto& t : f.tensors()) {
      if (t.elements() > (1u << 20)) continue;
      if (t.dtype == sparselm::io::st_dtype::i32) {
        (void)f.read_i32(t.name, t.shape);
      } else {
        std::vector<float> dst(t.elements());
        f.read_f32(t.name, t.shape, dst);
      }
    }
  });
  return 0;
}
