// A plain text table with aligned columns, for the CLI's human output.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace meridian::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out, const std::string& indent = "") const;
  // A GitHub-flavoured Markdown table, first column left-aligned, the rest right.
  void PrintMarkdown(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace meridian::cli
