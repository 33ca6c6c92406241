// Small string helpers for messages.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meridian {

// Whether `s` is well-formed UTF-8 (RFC 3629): no stray or missing continuation
// bytes, no overlong forms, no surrogates, nothing above U+10FFFF. Text that a YAML
// or JSON writer must keep byte for byte has to be: other bytes come back changed (or
// make the writer throw).
inline bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0, least = 0;
    if ((b & 0xe0) == 0xc0) {
      n = 1, cp = b & 0x1f, least = 0x80;
    } else if ((b & 0xf0) == 0xe0) {
      n = 2, cp = b & 0x0f, least = 0x800;
    } else if ((b & 0xf8) == 0xf0) {
      n = 3, cp = b & 0x07, least = 0x10000;
    } else {
      return false;  // a continuation byte first, or 0xf8..0xff
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

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
