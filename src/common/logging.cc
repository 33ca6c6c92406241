#include "common/logging.h"

#include <string>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace meridian {

Status InitLogging(std::string_view level) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgumentError(fmt::format(
        "unknown log level '{}'; expected trace, debug, info, warn, error or off", level));
  }
  auto logger = spdlog::stderr_color_mt("meridian");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return OkStatus();
}

}  // namespace meridian
