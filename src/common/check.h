// KVASIR_CHECK: broken invariants abort with a message naming the condition and place.
// Never use it to validate user input or file contents: that is Status (status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace kvasir::detail {
[[noreturn]] void check_failed(const char* cond, const char* file, int line, const char* msg);
}  // namespace kvasir::detail

#define KVASIR_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::kvasir::detail::check_failed(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define KVASIR_CHECK_MSG(cond, msg)                                             \
  do {                                                                          \
    if (!(cond)) ::kvasir::detail::check_failed(#cond, __FILE__, __LINE__, msg); \
  } while (0)
