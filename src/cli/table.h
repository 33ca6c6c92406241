// The CLI's output: a plain text table with aligned columns, for humans, and JSON
// text, for scripts.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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

// `s` safe to write to a terminal: text from outside (a task's output or failure
// reason, which may quote its input) could otherwise carry escape sequences that move
// the cursor, retitle the window or set the clipboard of whoever reads it (an admin's
// `job get`). C0 and C1 controls and DEL are written as `\xHH` or `\uHHHH` (tab as
// `\t`; a newline too unless `keep_newlines`), bytes that are not UTF-8 as `\xHH`;
// other text as it is. Tables escape every cell; `job logs` writes logs as they are.
std::string TerminalText(std::string_view s, bool keep_newlines = false);

// `j` as JSON text (`indent` < 0: on one line). What tasks wrote (outputs, logs) may
// be any bytes, and JSON text is UTF-8: a byte that is not is written as U+FFFD (the
// bytes as they are: `job logs` without --json, `objects get`).
std::string JsonText(const nlohmann::json& j, int indent = 2);

}  // namespace meridian::cli
