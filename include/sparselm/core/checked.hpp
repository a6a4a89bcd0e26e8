#pragma once
// Checked size arithmetic and the stated limits on sizes that come from outside (command lines,
// configs, file headers).
//
//   std::size_t n = checked_mul(rows, cols, "wte.weight elements");   // throws on overflow, naming it
//   std::size_t off = checked_add(off, n, "arena size");
//   check_limit("configs/x.json model", "n_layer", c.n_layer, limits::layers);
//   // "configs/x.json model: field 'n_layer' is 100000, above the limit 4096"
//
// The limits are generous upper bounds for a CPU trainer, far above any model this library can
// train in practice, and low enough that products of them (vocab × width, layers × width², ...)
// stay well inside 64 bits: a value past a limit is a typo or a hostile input, never a real model.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm {

namespace limits {
inline constexpr std::size_t vocab = std::size_t(1) << 31;      // token ids are int32
inline constexpr std::size_t positions = std::size_t(1) << 20;  // maximum sequence length of a model
inline constexpr std::size_t layers = 4096;
inline constexpr std::size_t width = std::size_t(1) << 20;      // n_embd, hidden, ff, qkv, embedding widths
inline constexpr std::size_t heads = 4096;
inline constexpr std::size_t batch = std::size_t(1) << 20;      // sequences per micro-batch
inline constexpr std::size_t accumulation = std::size_t(1) << 20;
inline constexpr std::size_t steps = std::size_t(1) << 40;
inline constexpr std::size_t threads = 4096;
inline constexpr std::size_t tokens = std::size_t(1) << 20;     // tokens to generate at most
// Elements of one parameter arena (values, gradients and each optimiser slot are one arena each):
// 2^40 floats are 4 TiB, more than any machine this runs on.
inline constexpr std::size_t arena_elements = std::size_t(1) << 40;
// Shared bounds of a quantity in every program (flag, run-config key, --set): an Adam step moves a
// weight by about the learning rate, so rates above 100 are typing errors, not experiments;
// decoupled weight decay above 10 empties the weights in a step.
inline constexpr double max_learning_rate = 100, max_weight_decay = 10;
}  // namespace limits

// a · b, or sparselm::error naming `what` when the product does not fit std::size_t.
inline std::size_t checked_mul(std::size_t a, std::size_t b, std::string_view what) {
  std::size_t r = 0;
  SPARSELM_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " x ", b, " overflows the size type");
  return r;
}

// a + b, or sparselm::error naming `what` when the sum does not fit std::size_t.
inline std::size_t checked_add(std::size_t a, std::size_t b, std::string_view what) {
  std::size_t r = 0;
  SPARSELM_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows the size type");
  return r;
}

// The product of all dimensions, checked.
template <class Range>
std::size_t checked_product(const Range& dims, std::string_view what) {
  std::size_t n = 1;
  for (auto d : dims) n = checked_mul(n, std::size_t(d), what);
  return n;
}

// Fails, naming the context, the field, the value and the limit, when value > limit.
inline void check_limit(std::string_view context, std::string_view field, std::uint64_t value, std::uint64_t limit) {
  SPARSELM_CHECK(value <= limit, context, ": field '", field, "' is ", value, ", above the limit ", limit);
}

// The limit of a model-config size field, by name (GPT, S1 and BERT spellings); 0 when `key` is
// not a size field.
inline std::size_t model_field_limit(std::string_view key) {
  static const std::pair<std::string_view, std::size_t> table[] = {
      {"vocab_size", limits::vocab},           {"n_positions", limits::positions},
      {"n_ctx", limits::positions},            {"sequence_length", limits::positions},
      {"max_position_embeddings", limits::positions},
      {"n_layer", limits::layers},             {"layers", limits::layers},
      {"num_hidden_layers", limits::layers},   {"n_head", limits::heads},
      {"attention_heads", limits::heads},      {"num_attention_heads", limits::heads},
      {"n_embd", limits::width},               {"n_inner", limits::width},
      {"hidden_length", limits::width},        {"ff_length", limits::width},
      {"qkv_length", limits::width},           {"embedding_length", limits::width},
      {"hidden_size", limits::width},          {"intermediate_size", limits::width},
      {"num_key_value_heads", limits::heads},  {"head_dim", limits::width},
      {"type_vocab_size", limits::vocab}};
  for (auto& [k, v] : table)
    if (k == key) return v;
  return 0;
}

// Checks every size field of a model config object against its limit (see model_field_limit);
// errors name `context`, the field, the value and the limit. Run it before building a model: a
// huge size otherwise ends in an allocation failure far from the field that caused it.
inline void check_model_limits(const json& model, std::string_view context) {
  if (!model.is_object()) return;
  for (auto it = model.begin(); it != model.end(); ++it) {
    const std::size_t limit = model_field_limit(it.key());
    if (limit == 0 || !it.value().is_number()) continue;
    const double v = it.value().get<double>();
    SPARSELM_CHECK(!(v > double(limit)), context, ": field '", it.key(), "' is ", it.value().dump(),
                   ", above the limit ", limit);
  }
}

// Elements of one activation buffer of a training or evaluation pass: batch × positions × the
// widest row (vocabulary or a hidden width); refused above limits::arena_elements.
inline void check_activation_limit(std::size_t batch, std::size_t seq, std::size_t widest, std::string_view context) {
  const std::size_t n = checked_mul(checked_mul(batch, seq, context), widest, context);
  SPARSELM_CHECK(n <= limits::arena_elements, context, ": batch_size ", batch, " x seq_len ", seq, " x width ", widest,
                 " = ", n, " activations per buffer, above the limit ", limits::arena_elements);
}

}  // namespace sparselm
