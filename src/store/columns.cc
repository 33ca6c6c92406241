#include "store/columns.h"

#include <charconv>

namespace meridian::store {

std::string JoinDevices(const std::vector<int32_t>& devices) {
  std::string out;
  for (int32_t d : devices) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

std::vector<int32_t> SplitDevices(std::string_view text) {
  std::vector<int32_t> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    int32_t d = 0;
    std::from_chars(text.data() + start, text.data() + comma, d);
    out.push_back(d);
    start = comma + 1;
  }
  return out;
}

}  // namespace meridian::store
