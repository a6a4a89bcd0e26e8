// How a downstream project unit-tests its own layer and model templates with doctest and
// sparselm/testing: a toy layer (a learned per-channel gate, y = x ∘ g) is checked by finite
// differences in one call, and a block-sparse GPT through its whole loss in another; the xtensor
// boundary of the README is exercised too.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sparselm/sparselm.hpp>
#include <sparselm/testing/layer_check.hpp>

namespace toy {
// y (N,C) = x (N,C) ∘ g (C): a layer in the library's sense (forward, backward, parameters).
class gate {
 public:
  struct cache {
    sparselm::const_matrix_view<float> x;
  };
  gate(sparselm::arena_layout& layout, const std::string& prefix, std::size_t channels)
      : g_{prefix + ".gate", layout.add(prefix + ".gate", {channels})} {}
  std::vector<sparselm::param_ref> parameters() const { return {g_}; }
  void forward(const sparselm::step_context& s, sparselm::const_matrix_view<float> x, sparselm::matrix_view<float> y,
               cache& c) const {
    c.x = x;
    const auto g = s.p(g_.index);
    for (std::size_t i = 0; i < x.rows; ++i)
      for (std::size_t j = 0; j < x.cols; ++j) y(i, j) = x(i, j) * g[j];
  }
  void backward(const sparselm::step_context& s, sparselm::const_matrix_view<float> dy, sparselm::matrix_view<float> dx,
                cache& c) const {
    const auto g = s.p(g_.index);
    auto dg = s.g(g_.index);
    for (std::size_t i = 0; i < dy.rows; ++i)
      for (std::size_t j = 0; j < dy.cols; ++j) {
        dg[j] += dy(i, j) * c.x(i, j);
        dx(i, j) = dy(i, j) * g[j];
      }
  }

 private:
  sparselm::param_ref g_;
};
static_assert(sparselm::layer<gate>);
}  // namespace toy

TEST_CASE("a downstream layer passes the library's gradient check") {
  auto layout = std::make_shared<sparselm::arena_layout>();
  toy::gate l(*layout, "mine", 8);
  auto r = sparselm::testing::check_layer(l, layout, {.batch = 2, .seq = 3, .in = 8, .out = 8});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.checked == layout->total() + 2 * 3 * 8);  // every parameter (and its arena padding) and input
}

TEST_CASE("a model's whole loss gradient, and the xtensor boundary") {
  using json = nlohmann::json;
  auto cfg = sparselm::gpt_config::from_json(
      json{{"vocab_size", 64}, {"n_positions", 16}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 32},
           {"initializer_range", 0.2}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}, {"resid_pdrop", 0.0}});
  sparselm::gpt<float, sparselm::block_sparse<16>> model(cfg, {.sparsity = 0.5});
  model.init(7);
  xt::xtensor<std::int32_t, 2> ids = {{1, 5, 9, 2, 7}, {3, 3, 8, 1, 0}};
  xt::xtensor<std::int32_t, 2> targets = {{5, 9, 2, 7, 4}, {3, 8, 1, 0, 6}};
  auto r = sparselm::testing::check_model(model, sparselm::xt_batch(ids, targets), {.max_checks = 100});
  CHECK_MESSAGE(r.ok, r.message);
  xt::xtensor<float, 3> logits = sparselm::xt_logits(model, ids);  // (2, 5, 64)
  CHECK(logits.shape()[2] == 64);
  xt::xtensor<float, 2> ce = sparselm::xt_token_losses(model, ids, targets);
  CHECK(xt::all(ce > 0.0f));
}
