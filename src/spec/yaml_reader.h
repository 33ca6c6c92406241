// Reading YAML specs with errors that cite file, line, column and field, and say
// what was expected. Every map is checked for unknown (and repeated) fields.
//
// Internal to src/spec/. Thread-safety: a Reader is used by one thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/status.h"
#include "common/strings.h"

namespace meridian::spec {

// Parses YAML text; a syntax error names the file, line and column.
StatusOr<YAML::Node> ParseYaml(std::string_view text, std::string_view file);
// Reads a whole file; NotFound/InvalidArgument name the path.
// Spec, trace and table files are read whole: at most this much, and only regular
// files (a path like /dev/zero would read forever).
inline constexpr int64_t kMaxSpecFileBytes = int64_t{256} << 20;
// YAML files (fleets, jobs) are smaller: a YAML tree takes about 90 times its text
// in memory. A fleet larger than this lists its nodes in node_lists (CSV).
inline constexpr int64_t kMaxYamlFileBytes = int64_t{8} << 20;
StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes = kMaxSpecFileBytes);

// "a.b" / "a[3]" helpers for field paths.
std::string Field(std::string_view path, std::string_view key);
std::string Index(std::string_view path, size_t i);

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  // "file:line:col: path: message" at `at` (the map itself when `at` is missing).
  Status Error(const YAML::Node& at, std::string_view path, std::string_view message) const;

  // `node` must be a map whose keys are all in `allowed`, each once.
  Status CheckMap(const YAML::Node& node, std::string_view path,
                  std::initializer_list<std::string_view> allowed) const;
  // `node` must be a sequence.
  Status CheckSeq(const YAML::Node& node, std::string_view path) const;

  // Each reads map[key]. When the key is absent: Required* fail naming the field,
  // the others leave *out unchanged (the default). Values of the wrong kind fail.
  Status RequiredString(const YAML::Node& map, std::string_view key, std::string_view path,
                        std::string* out) const;
  Status String(const YAML::Node& map, std::string_view key, std::string_view path,
                std::string* out) const;
  // An integer in [min, max].
  Status Int(const YAML::Node& map, std::string_view key, std::string_view path, int64_t min,
             int64_t max, int64_t* out) const;
  Status Double(const YAML::Node& map, std::string_view key, std::string_view path, double min,
                double* out) const;
  Status Bool(const YAML::Node& map, std::string_view key, std::string_view path,
              bool* out) const;
  // A map of scalars to scalars ("expected a map of `shape`" otherwise); a key given
  // twice is an error ("repeated `what`").
  Status StringMap(const YAML::Node& map, std::string_view key, std::string_view path, std::string_view shape,
                   std::string_view what, std::map<std::string, std::string>* out) const;
  // A scalar or a sequence of scalars.
  Status StringList(const YAML::Node& map, std::string_view key, std::string_view path,
                    std::vector<std::string>* out) const;

  // A unit-bearing scalar parsed by `parse` (e.g. ParseBytes).
  using UnitParser = StatusOr<int64_t> (*)(std::string_view);
  Status Unit(const YAML::Node& map, std::string_view key, std::string_view path,
              UnitParser parse, int64_t* out) const;

  // map[key] must be one of the names of `choices`; *out gets its value.
  template <typename E>
  Status Enum(const YAML::Node& map, std::string_view key, std::string_view path,
              std::initializer_list<std::pair<std::string_view, E>> choices, E* out) const {
    std::string name;
    MERIDIAN_RETURN_IF_ERROR(String(map, key, path, &name));
    if (name.empty()) return OkStatus();
    std::vector<std::string_view> names;
    for (const auto& [n, value] : choices) {
      if (n == name) {
        *out = value;
        return OkStatus();
      }
      names.push_back(n);
    }
    return Error(map[std::string(key)], Field(path, key),
                 "expected " + JoinWithOr(names) + ", got '" + name + "'");
  }

  // The scalar text of map[key], or an error when it is not a scalar.
  Status Scalar(const YAML::Node& value, std::string_view path, std::string* out) const;

 private:
  std::string file_;
};


}  // namespace meridian::spec
