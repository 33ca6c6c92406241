#include "cli/table.h"

#include <algorithm>

namespace meridian::cli {

void Table::Print(std::ostream& out, const std::string& indent) const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
}

void Table::PrintMarkdown(std::ostream& out) const {
  for (size_t r = 0; r < rows_.size(); ++r) {
    out << '|';
    for (const std::string& cell : rows_[r]) out << ' ' << cell << " |";
    out << '\n';
    if (r == 0) {
      out << '|';
      for (size_t i = 0; i < rows_[0].size(); ++i) out << (i == 0 ? " --- |" : " ---: |");
      out << '\n';
    }
  }
}

std::string JsonText(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace meridian::cli
