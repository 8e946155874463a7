// Minimal leveled logging to stderr; the one piece of global mutable state (the level) allowed.
// Must not be used on the per-token hot path above kDebug.
#pragma once

#include <cstdarg>

namespace kvasir {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace kvasir

#define KVASIR_LOG_DEBUG(...) ::kvasir::log_message(::kvasir::LogLevel::kDebug, __VA_ARGS__)
#define KVASIR_LOG_INFO(...) ::kvasir::log_message(::kvasir::LogLevel::kInfo, __VA_ARGS__)
#define KVASIR_LOG_WARN(...) ::kvasir::log_message(::kvasir::LogLevel::kWarning, __VA_ARGS__)
#define KVASIR_LOG_ERROR(...) ::kvasir::log_message(::kvasir::LogLevel::kError, __VA_ARGS__)
