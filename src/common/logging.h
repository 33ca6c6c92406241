// Logging through spdlog. Libraries log with MERIDIAN_LOG_*; programs call
// InitLogging once. Logs go to stderr so that stdout stays the command's output.
//
// Thread-safety: spdlog's default logger is thread-safe.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace meridian {

// level: "trace", "debug", "info", "warn", "error", "off".
Status InitLogging(std::string_view level);

}  // namespace meridian

#define MERIDIAN_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define MERIDIAN_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define MERIDIAN_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define MERIDIAN_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
