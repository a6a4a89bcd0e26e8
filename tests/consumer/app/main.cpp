// Uses the umbrella header the way a downstream project would.
#include <sparselm/sparselm.hpp>

#include <cstdio>

int main() {
  auto layout = std::make_shared<sparselm::arena_layout>();
  auto w = layout->add("w", {3, 4});
  sparselm::arena<float> params(layout);
  params[w][5] = 2.5f;
  sparselm::bf16 b(params[w][5]);
  if (float(b) != 2.5f) return 1;
  std::printf("consumer ok (sparselm %s, %zu parameters)\n", sparselm::version, layout->parameters());
  return 0;
}
