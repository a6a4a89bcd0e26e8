#pragma once
// One error path for a whole program: every exception that leaves the program's body becomes one
// line on stderr naming the program and the culprit, and an exit status; nothing aborts.
//
//   int main(int argc, char** argv) {
//     return sparselm::run_program("gpt_train", [&]() -> int {
//       ... parse flags (a bad flag: throw sparselm::usage_error), read configs, train ...
//       return 0;
//     });
//   }
//
// Exit status: the body's own, 1 for any error (sparselm::error, std::bad_alloc,
// std::filesystem::error, any other exception), 2 for sparselm::usage_error. An exception that
// escapes where C++ would call std::terminate (a destructor, an OpenMP worker, a noexcept
// function) is reported the same way and exits with status 1 instead of aborting.
//
// SIGPIPE is ignored: a program whose standard output is a closed pipe (`gpt_train ... | head -1`)
// goes on with its work (checkpoints, files) and then exits with status 1 and a message, instead of
// dying by the signal part-way.

#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <system_error>

#include "sparselm/core/error.hpp"

namespace sparselm {

// A bad command line (unknown flag, value out of range): exit status 2.
class usage_error : public error {
 public:
  using error::error;
};

namespace detail {
inline const char*& program_name() {
  static const char* name = "sparselm";
  return name;
}

// One line describing the exception `e` (the current one when rethrown).
inline std::string describe(std::exception_ptr e, int* status) {
  *status = 1;
  try {
    std::rethrow_exception(e);
  } catch (const usage_error& x) {
    *status = 2;
    return x.what();
  } catch (const error& x) {
    return x.what();
  } catch (const std::bad_alloc&) {
    return "out of memory (std::bad_alloc): a size in the flags, config or an input file is too large for this "
           "machine";
  } catch (const std::filesystem::filesystem_error& x) {
    std::string s = x.code().message();
    if (!x.path1().empty()) s = "'" + x.path1().string() + "': " + s;
    if (!x.path2().empty()) s += " (and '" + x.path2().string() + "')";
    return s + " [" + x.what() + "]";
  } catch (const std::system_error& x) {
    return std::string(x.what()) + " (" + x.code().message() + ")";
  } catch (const std::length_error& x) {
    return std::string("a size is too large (") + x.what() + ")";
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Called with the exit status after an error is reported (e.g. parallel/mpi.hpp aborts the other
// ranks of an MPI job); null when nothing else must happen.
using error_hook_fn = void (*)(int status);
inline error_hook_fn& error_hook() {
  static error_hook_fn hook = nullptr;
  return hook;
}

inline void report(const std::string& what, int status = 1) {
  std::fprintf(stderr, "%s: error: %s\n", program_name(), what.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (auto hook = error_hook()) hook(status);
}

[[noreturn]] inline void on_terminate() noexcept {
  int status = 1;
  if (auto e = std::current_exception()) {
    const std::string what = describe(e, &status);
    report(what, status);
  } else {
    report("internal error: std::terminate called without an exception");
  }
  std::fflush(stdout);
  std::_Exit(status);
}
}  // namespace detail

// Runs body() (returning the exit status) and turns every exception into one error line; see above.
template <class Body>
int run_program(const char* name, Body&& body) noexcept {
  detail::program_name() = name;
  std::set_terminate(detail::on_terminate);
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe is a write error (EPIPE), reported below
  int status = 0;
  try {
    status = body();
  } catch (...) {
    status = 1;
    const std::string what = detail::describe(std::current_exception(), &status);
    detail::report(what, status);
    return status;
  }
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    detail::report(std::string("cannot write to standard output") + (e ? std::string(": ") + std::strerror(e) : "") +
                   " (files it writes are complete; only what it printed is lost)");
    return status == 0 ? 1 : status;
  }
  return status;
}

}  // namespace sparselm
