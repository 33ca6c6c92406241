#include "cli/table.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/strings.h"

namespace meridian::cli {

void Table::Print(std::ostream& out, const std::string& indent) const {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(rows_.size());
  for (const auto& row : rows_) {
    std::vector<std::string>& cells = rows.emplace_back();
    for (const std::string& cell : row) cells.push_back(TerminalText(cell));
  }
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
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
    for (const std::string& cell : rows_[r]) out << ' ' << TerminalText(cell) << " |";
    out << '\n';
    if (r == 0) {
      out << '|';
      for (size_t i = 0; i < rows_[0].size(); ++i) out << (i == 0 ? " --- |" : " ---: |");
      out << '\n';
    }
  }
}

std::string TerminalText(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", c);
      ++i;
    } else if (n == 1 && (c < 0x20 || c == 0x7f) && !(c == '\n' && keep_newlines)) {
      if (c == '\t') {
        out += "\\t";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        fmt::format_to(std::back_inserter(out), "\\x{:02x}", c);
      }
      ++i;
    } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      // U+0080 to U+009F: the C1 controls (CSI, OSC, ... in one character).
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string JsonText(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace meridian::cli
