// Compile-fail test (ctest compile_fail.check_layer_missing_parameters, check_compile_fail.cmake):
// testing::check_layer on a type that lists no tensors (neither parameters() nor visit()) must
// stop at the static_assert that names them. With SPARSELM_COMPILE_FAIL_FIXED the type has
// parameters() and the file must compile, so the failure is the missing member's.
// expect: layer: needs 'parameters\(\) const'
#include "sparselm/testing/layer_check.hpp"

namespace {
class scale_layer {
 public:
  struct cache {};
#ifdef SPARSELM_COMPILE_FAIL_FIXED
  std::vector<sparselm::param_ref> parameters() const { return {}; }
#endif
  void forward(const sparselm::step_context&, sparselm::const_matrix_view<float> x, sparselm::matrix_view<float> y,
               cache&) const {
    for (std::size_t i = 0; i < x.rows; ++i)
      for (std::size_t j = 0; j < x.cols; ++j) y(i, j) = 2 * x(i, j);
  }
  void backward(const sparselm::step_context&, sparselm::const_matrix_view<float> dy, sparselm::matrix_view<float> dx,
                cache&) const {
    for (std::size_t i = 0; i < dy.rows; ++i)
      for (std::size_t j = 0; j < dy.cols; ++j) dx(i, j) = 2 * dy(i, j);
  }
};
}  // namespace

int main() {
  auto layout = std::make_shared<sparselm::arena_layout>();
  scale_layer l;
  return sparselm::testing::check_layer(l, layout, {.batch = 1, .seq = 2, .in = 3, .out = 3}).ok ? 0 : 1;
}
