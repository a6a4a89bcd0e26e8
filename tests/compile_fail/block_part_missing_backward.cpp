// Compile-fail test (ctest compile_fail.block_part_missing_backward, check_compile_fail.cmake): a
// feed-forward without backward() put into the library's block must stop at the static_assert
// that names the missing member, not deep inside the block. With SPARSELM_COMPILE_FAIL_FIXED the
// same file declares backward() and must compile, so the failure is the missing member's.
// expect: layer: needs a const member 'backward\(
#include "sparselm/layers/block.hpp"
#include "sparselm/layers/grouped_attention.hpp"
#include "sparselm/layers/rms_norm.hpp"

namespace {
class no_backward_ffn {
 public:
  struct cache {};
  no_backward_ffn(sparselm::arena_layout&, const std::string&, const sparselm::block_options&) {}
  std::vector<sparselm::param_ref> parameters() const { return {}; }
  void forward(const sparselm::step_context&, sparselm::const_matrix_view<float>, sparselm::matrix_view<float>,
               cache&) const {}
#ifdef SPARSELM_COMPILE_FAIL_FIXED
  void backward(const sparselm::step_context&, sparselm::const_matrix_view<float>, sparselm::matrix_view<float>,
                cache&) const {}
#endif
};

using block = sparselm::residual_block<sparselm::pre_ln, sparselm::rms_norm,
                                       sparselm::grouped_query_attention<float, sparselm::dense>, no_backward_ffn>;
}  // namespace

int main() { return sizeof(block) > 0 ? 0 : 1; }
