#include "spec/csv.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace meridian::spec {
namespace {

std::vector<std::string_view> SplitLine(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

StatusOr<CsvTable> CsvTable::Parse(std::string text, std::string file) {
  CsvTable t;
  t.text_ = std::make_shared<const std::string>(std::move(text));
  t.file_ = std::move(file);
  std::string_view csv = *t.text_;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t nl = csv.find('\n', pos);
    std::string_view line = csv.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? csv.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line.find('"') != std::string_view::npos) {
      return InvalidArgumentError(fmt::format("{}:{}: quoted fields are not supported", t.file_, line_no));
    }
    std::vector<std::string_view> fields = SplitLine(line);
    if (t.header_.empty()) {
      t.header_ = std::move(fields);
      continue;
    }
    if (fields.size() != t.header_.size()) {
      return InvalidArgumentError(fmt::format("{}:{}: expected {} fields as in the header, got {}", t.file_,
                                              line_no, t.header_.size(), fields.size()));
    }
    t.rows_.push_back(std::move(fields));
    t.lines_.push_back(line_no);
  }
  if (t.header_.empty()) return InvalidArgumentError(fmt::format("{}: empty file, expected a header line", t.file_));
  return t;
}

std::optional<size_t> CsvTable::Column(std::string_view name) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return i;
  }
  return std::nullopt;
}

StatusOr<size_t> CsvTable::RequireColumn(std::string_view name) const {
  if (std::optional<size_t> c = Column(name)) return *c;
  return InvalidArgumentError(fmt::format("{}:1: the header has no column '{}'", file_, name));
}

Status CsvTable::Error(size_t r, size_t column, std::string_view what) const {
  return InvalidArgumentError(
      fmt::format("{}:{}: {}: {}, got '{}'", file_, lines_[r], header_[column], what, rows_[r][column]));
}

StatusOr<int64_t> CsvTable::Int(size_t r, size_t column) const {
  std::string_view s = rows_[r][column];
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return Error(r, column, "expected an integer");
  return v;
}

StatusOr<int64_t> CsvTable::IntOr(size_t r, size_t column, int64_t fallback) const {
  if (rows_[r][column].empty()) return fallback;
  return Int(r, column);
}

std::optional<double> ParseFiniteDouble(std::string_view s) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

StatusOr<double> CsvTable::Double(size_t r, size_t column) const {
  std::string_view s = rows_[r][column];
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return Error(r, column, "expected a number");
  if (!std::isfinite(v)) return Error(r, column, "expected a finite number");
  return v;
}

std::vector<std::string> SplitList(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace meridian::spec
