// Small string helpers for messages.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meridian {

// The length of the well-formed UTF-8 sequence (RFC 3629) that starts at `s[i]`, or
// 0 if none does there: a stray or missing continuation byte, an overlong form, a
// surrogate, or past U+10FFFF.
inline size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0, least = 0;
  if ((b & 0xe0) == 0xc0) {
    n = 1, cp = b & 0x1f, least = 0x80;
  } else if ((b & 0xf0) == 0xe0) {
    n = 2, cp = b & 0x0f, least = 0x800;
  } else if ((b & 0xf8) == 0xf0) {
    n = 3, cp = b & 0x07, least = 0x10000;
  } else {
    return 0;  // a continuation byte first, or 0xf8..0xff
  }
  if (s.size() - i <= n) return 0;
  for (size_t k = 1; k <= n; ++k) {
    const auto c = static_cast<uint8_t>(s[i + k]);
    if ((c & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3f);
  }
  if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n + 1;
}

// Where the first byte of `s` that is not part of well-formed UTF-8 is; npos if none.
inline size_t FirstNonUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

// Whether `s` is well-formed UTF-8. Text that a YAML or JSON writer must keep byte for
// byte has to be (other bytes come back changed, or make the writer throw), and so
// does a protobuf `string` field's: the receiver refuses the whole message otherwise.
inline bool IsUtf8(std::string_view s) { return FirstNonUtf8(s) == std::string_view::npos; }

// `s` with each byte that is not part of well-formed UTF-8 replaced by U+FFFD: for
// text made of bytes from outside (what a task or its input holds) that must travel
// as text.
inline std::string ToUtf8(std::string_view s) {
  size_t bad = FirstNonUtf8(s);
  if (bad == std::string_view::npos) return std::string(s);
  std::string out(s.substr(0, bad));
  for (size_t i = bad; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
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
