#include "spec/yaml_reader.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace meridian::spec {
namespace {

std::string Location(std::string_view file, const YAML::Mark& mark) {
  if (mark.is_null()) return std::string(file);
  return fmt::format("{}:{}:{}", file, mark.line + 1, mark.column + 1);
}

}  // namespace

StatusOr<YAML::Node> ParseYaml(std::string_view text, std::string_view file) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(
        fmt::format("{}: invalid YAML: {}", Location(file, e.mark), e.msg));
  }
}

StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) return NotFoundError(fmt::format("{}: no such file", path));
  if (!ec && st.type() != std::filesystem::file_type::regular) {
    return InvalidArgumentError(fmt::format("{}: not a regular file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT) return NotFoundError(fmt::format("{}: no such file", path));
    return InvalidArgumentError(fmt::format("{}: cannot open: {}", path, std::strerror(err)));
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > static_cast<uintmax_t>(max_bytes)) {
    return InvalidArgumentError(fmt::format("{}: {} bytes, over the {}-byte limit for such files", path, size, max_bytes));
  }
  std::string text(ec ? 0 : size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || static_cast<uintmax_t>(in.gcount()) != text.size()) {
    return InvalidArgumentError(fmt::format("{}: read failed", path));
  }
  return text;
}

std::string Field(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return fmt::format("{}.{}", path, key);
}

std::string Index(std::string_view path, size_t i) { return fmt::format("{}[{}]", path, i); }

Status Reader::Error(const YAML::Node& at, std::string_view path, std::string_view message) const {
  YAML::Mark mark = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
  if (path.empty()) return InvalidArgumentError(fmt::format("{}: {}", Location(file_, mark), message));
  return InvalidArgumentError(fmt::format("{}: {}: {}", Location(file_, mark), path, message));
}

Status Reader::CheckMap(const YAML::Node& node, std::string_view path,
                        std::initializer_list<std::string_view> allowed) const {
  if (!node.IsMap()) {
    return Error(node, path, fmt::format("expected a map with fields {}", fmt::join(allowed, ", ")));
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) return Error(it->first, path, "expected a field name");
    std::string key = it->first.Scalar();
    bool known = false;
    for (std::string_view a : allowed) known |= (a == key);
    if (!known) {
      return Error(it->first, path,
                   fmt::format("unknown field '{}' (expected one of: {})", key, fmt::join(allowed, ", ")));
    }
    if (!seen.insert(key).second) {
      return Error(it->first, path, fmt::format("field '{}' appears twice", key));
    }
  }
  return OkStatus();
}

Status Reader::CheckSeq(const YAML::Node& node, std::string_view path) const {
  if (!node.IsSequence()) return Error(node, path, "expected a list");
  return OkStatus();
}

Status Reader::Scalar(const YAML::Node& value, std::string_view path, std::string* out) const {
  if (!value.IsScalar()) return Error(value, path, "expected a single value, not a list or map");
  *out = value.Scalar();
  return OkStatus();
}

Status Reader::RequiredString(const YAML::Node& map, std::string_view key, std::string_view path,
                              std::string* out) const {
  if (!map[std::string(key)]) return Error(map, path, fmt::format("missing required field '{}'", key));
  return String(map, key, path, out);
}

Status Reader::String(const YAML::Node& map, std::string_view key, std::string_view path,
                      std::string* out) const {
  YAML::Node v = map[std::string(key)];
  if (!v) return OkStatus();
  std::string s;
  MERIDIAN_RETURN_IF_ERROR(Scalar(v, Field(path, key), &s));
  if (s.empty()) return Error(v, Field(path, key), "must not be empty");
  *out = std::move(s);
  return OkStatus();
}

Status Reader::Int(const YAML::Node& map, std::string_view key, std::string_view path, int64_t min,
                   int64_t max, int64_t* out) const {
  YAML::Node v = map[std::string(key)];
  if (!v) return OkStatus();
  std::string s;
  std::string field = Field(path, key);
  MERIDIAN_RETURN_IF_ERROR(Scalar(v, field, &s));
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE) {
    return Error(v, field, fmt::format("expected an integer, got '{}'", s));
  }
  if (parsed < min || parsed > max) {
    if (max == INT64_MAX) {
      return Error(v, field, fmt::format("expected an integer >= {}, got {}", min, parsed));
    }
    return Error(v, field, fmt::format("expected an integer from {} to {}, got {}", min, max, parsed));
  }
  *out = parsed;
  return OkStatus();
}

Status Reader::Double(const YAML::Node& map, std::string_view key, std::string_view path,
                      double min, double* out) const {
  YAML::Node v = map[std::string(key)];
  if (!v) return OkStatus();
  std::string s;
  std::string field = Field(path, key);
  MERIDIAN_RETURN_IF_ERROR(Scalar(v, field, &s));
  char* end = nullptr;
  double parsed = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(parsed)) {
    return Error(v, field, fmt::format("expected a number, got '{}'", s));
  }
  if (parsed < min) return Error(v, field, fmt::format("expected a number >= {}, got {}", min, s));
  *out = parsed;
  return OkStatus();
}

Status Reader::Bool(const YAML::Node& map, std::string_view key, std::string_view path,
                    bool* out) const {
  YAML::Node v = map[std::string(key)];
  if (!v) return OkStatus();
  std::string s;
  std::string field = Field(path, key);
  MERIDIAN_RETURN_IF_ERROR(Scalar(v, field, &s));
  if (s == "true") {
    *out = true;
  } else if (s == "false") {
    *out = false;
  } else {
    return Error(v, field, fmt::format("expected true or false, got '{}'", s));
  }
  return OkStatus();
}

Status Reader::StringMap(const YAML::Node& map, std::string_view key, std::string_view path, std::string_view shape,
                         std::string_view what, std::map<std::string, std::string>* out) const {
  YAML::Node m = map[std::string(key)];
  if (!m) return OkStatus();
  const std::string field = Field(path, key);
  if (!m.IsMap()) return Error(m, field, fmt::format("expected a map of {}", shape));
  for (auto it = m.begin(); it != m.end(); ++it) {
    std::string k, v;
    MERIDIAN_RETURN_IF_ERROR(Scalar(it->first, field, &k));
    MERIDIAN_RETURN_IF_ERROR(Scalar(it->second, Field(field, k), &v));
    if (!out->emplace(k, v).second) return Error(it->first, Field(field, k), fmt::format("repeated {}", what));
  }
  return OkStatus();
}

Status Reader::StringList(const YAML::Node& map, std::string_view key, std::string_view path,
                          std::vector<std::string>* out) const {
  YAML::Node v = map[std::string(key)];
  if (!v) return OkStatus();
  std::string field = Field(path, key);
  std::vector<std::string> items;
  if (v.IsScalar()) {
    items.push_back(v.Scalar());
  } else if (v.IsSequence()) {
    for (size_t i = 0; i < v.size(); ++i) {
      std::string s;
      MERIDIAN_RETURN_IF_ERROR(Scalar(v[i], Index(field, i), &s));
      items.push_back(std::move(s));
    }
  } else {
    return Error(v, field, "expected a name or a list of names");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].empty()) return Error(v, Index(field, i), "must not be empty");
  }
  *out = std::move(items);
  return OkStatus();
}

Status Reader::Unit(const YAML::Node& map, std::string_view key, std::string_view path,
                    UnitParser parse, int64_t* out) const {
  YAML::Node v = map[std::string(key)];
  if (!v) return OkStatus();
  std::string s;
  std::string field = Field(path, key);
  MERIDIAN_RETURN_IF_ERROR(Scalar(v, field, &s));
  StatusOr<int64_t> parsed = parse(s);
  if (!parsed.ok()) return Error(v, field, parsed.status().message());
  *out = *parsed;
  return OkStatus();
}

}  // namespace meridian::spec
