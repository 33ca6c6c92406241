// Small string helpers for messages.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace meridian {

// "a", "a or b", "a, b or c": the choices in an error message.
template <typename Range>
std::string JoinWithOr(const Range& items) {
  std::string out;
  size_t i = 0;
  const size_t n = std::size(items);
  for (const auto& item : items) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += item;
    ++i;
  }
  return out;
}

}  // namespace meridian
