// A small reader for the comma-separated trace and node-list files we replay: a
// header line naming the columns, then one record per line, no quoting (none of the
// published traces quote). Errors name the file, the line and the column.
//
// Thread-safety: value type. Copies and moves share the text the fields point into, so
// fields stay valid whatever happens to the table they came from.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian::spec {

class CsvTable {
 public:
  // Splits `text`; every record must have as many fields as the header.
  static StatusOr<CsvTable> Parse(std::string text, std::string file);

  const std::string& file() const { return file_; }
  const std::vector<std::string_view>& header() const { return header_; }
  size_t rows() const { return rows_.size(); }
  // Line number in the file of row r (1 is the header).
  size_t line(size_t r) const { return lines_[r]; }
  std::string_view field(size_t r, size_t column) const { return rows_[r][column]; }

  std::optional<size_t> Column(std::string_view name) const;
  // The column, or an error naming what the header lacks.
  StatusOr<size_t> RequireColumn(std::string_view name) const;

  // Typed fields; errors read "file:line: column: expected ..., got '...'".
  StatusOr<int64_t> Int(size_t r, size_t column) const;
  // An empty field gives `fallback`.
  StatusOr<int64_t> IntOr(size_t r, size_t column, int64_t fallback) const;
  StatusOr<double> Double(size_t r, size_t column) const;
  Status Error(size_t r, size_t column, std::string_view what) const;

 private:
  // On the heap, never moved: header_ and rows_ view into it (a std::string member
  // would carry short texts inline, and a moved table's views would dangle).
  std::shared_ptr<const std::string> text_;
  std::string file_;
  std::vector<std::string_view> header_;
  std::vector<std::vector<std::string_view>> rows_;
  std::vector<size_t> lines_;
};

// Splits on `sep`, dropping empty pieces: "A100|T4" -> {"A100", "T4"}.
// A whole field as a finite number ("1.5", "1e3"); nothing for "", "nan", "inf"
// or trailing text.
std::optional<double> ParseFiniteDouble(std::string_view s);

std::vector<std::string> SplitList(std::string_view text, char sep);

}  // namespace meridian::spec
