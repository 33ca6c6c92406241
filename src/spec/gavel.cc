#include "spec/gavel.h"

#include <cctype>
#include <charconv>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "spec/yaml_reader.h"

namespace meridian::spec {
namespace {

// Gavel measures jobs on up to 8 GPUs; a scale past this is a typo or hostile input.
constexpr int32_t kMaxGavelScale = 1024;

}  // namespace

std::string NormaliseGavelModel(std::string_view model) {
  static const std::regex kWithBatch(R"(^(.*) \(batch size (\d+)\)$)");
  std::string name(model);
  std::string batch;
  std::smatch m;
  if (std::regex_match(name, m, kWithBatch)) {
    batch = m[2].str();
    name = m[1].str();
  }
  std::string out;
  for (char c : name) {
    if (c == ' ') {
      out += '-';
    } else {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!batch.empty()) out += "-b" + batch;
  return out;
}

StatusOr<model::ThroughputTable> ParseGavelThroughputs(std::string_view json_text,
                                                       std::string_view file) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgumentError(fmt::format("{}: not a Gavel throughput table (invalid JSON object)", file));
  }
  static const std::regex kKey(R"(^\('(.+)', (\d+)\)$)");
  model::ThroughputTable table;
  for (const auto& [gpu, models] : doc.items()) {
    if (gpu.find("unconsolidated") != std::string::npos) continue;
    std::string type;
    for (char c : gpu) type += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (!models.is_object()) {
      return InvalidArgumentError(fmt::format("{}: {}: expected an object of models", file, gpu));
    }
    for (const auto& [key, entry] : models.items()) {
      std::smatch m;
      if (!std::regex_match(key, m, kKey)) {
        return InvalidArgumentError(
            fmt::format("{}: {}: key '{}' is not of the form ('Model', scale)", file, gpu, key));
      }
      if (!entry.is_object() || !entry.contains("null") || !entry["null"].is_number()) {
        return InvalidArgumentError(
            fmt::format("{}: {}: {}: missing the solo throughput under \"null\"", file, gpu, key));
      }
      std::string kind = NormaliseGavelModel(m[1].str());
      int32_t scale = 0;
      const std::string digits = m[2].str();
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), scale);
      if (ec != std::errc() || end != digits.data() + digits.size() || scale < 1 || scale > kMaxGavelScale) {
        return InvalidArgumentError(fmt::format("{}: {}: key '{}': the scale must be a whole number of GPUs from 1 to {}",
                                                file, gpu, key, kMaxGavelScale));
      }
      double rate = entry["null"].get<double>();
      if (rate <= 0) continue;  // not measured
      table.Set(type, kind, rate, scale);
      table.SetUnit(kind, "step");
    }
  }
  if (table.size() == 0) {
    return InvalidArgumentError(fmt::format("{}: no throughputs found", file));
  }
  return table;
}

StatusOr<model::ThroughputTable> LoadGavelThroughputs(const std::string& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseGavelThroughputs(text, path);
}

}  // namespace meridian::spec
