#pragma once
// sparselm::error — the one exception type the library throws for bad input.
//
// Every message names the culprit: the tensor, file, field or shape involved. Use
// SPARSELM_CHECK(cond, parts...) for preconditions; the parts are streamed into the message.
//
//   SPARSELM_CHECK(x.cols == w.rows, "linear: input has ", x.cols, " columns, weight ", w.rows, " rows");
//   try { ... } catch (const sparselm::error& e) { std::fprintf(stderr, "%s\n", e.what()); }

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace sparselm {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
}  // namespace detail

// Throws sparselm::error with the streamed parts as its message.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw error(detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace sparselm

// Precondition check that throws sparselm::error; the message parts are only evaluated on failure.
#define SPARSELM_CHECK(cond, ...)                 \
  do {                                            \
    if (!(cond)) ::sparselm::fail(__VA_ARGS__);   \
  } while (0)
