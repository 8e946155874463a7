#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "common/check.h"

namespace kvasir {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
const char* kNames[] = {"D", "I", "W", "E"};
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_message(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load() || level == LogLevel::kOff) return;
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[kvasir %s] ", kNames[static_cast<int>(level)]);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
}

namespace detail {
void check_failed(const char* cond, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "KVASIR_CHECK failed: %s at %s:%d %s\n", cond, file, line, msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace kvasir
