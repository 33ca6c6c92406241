#include "workloads/training/digits.h"

#include <zlib.h>

#include <charconv>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

namespace meridian::training {

StatusOr<std::string> DebianDigitsPath() {
  constexpr const char* kPath = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(kPath, ec)) {
    return NotFoundError(fmt::format("{} is missing: install Debian's python3-sklearn (scripts/install-deps.sh)", kPath));
  }
  return std::string(kPath);
}

StatusOr<Digits> LoadDigits(const std::string& path) {
  // gzread reads plain files as they are, so one path serves both.
  std::unique_ptr<gzFile_s, int (*)(gzFile)> in(gzopen(path.c_str(), "rb"), &gzclose);
  if (in == nullptr) return NotFoundError(fmt::format("cannot open the digits file {}", path));
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const int n = gzread(in.get(), buffer, sizeof buffer);
    if (n < 0) {
      int code = 0;
      return DataLossError(fmt::format("{} is not a readable digits file: {}", path, gzerror(in.get(), &code)));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(text.size()) + n > kMaxDigitsFileBytes) {
      return ResourceExhaustedError(fmt::format("{} holds more than {} bytes: not the digits data", path,
                                                kMaxDigitsFileBytes));
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  Digits d;
  int64_t line_number = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (d.size() == kMaxDigitImages) {
      return ResourceExhaustedError(fmt::format("{} holds more than {} images", path, kMaxDigitImages));
    }
    int values[kDigitPixels + 1];
    int count = 0;
    const char* p = line.data();
    const char* const stop = line.data() + line.size();
    bool bad = false;
    while (!bad) {
      if (count == kDigitPixels + 1) {
        bad = true;
        break;
      }
      auto [next, err] = std::from_chars(p, stop, values[count]);
      if (err != std::errc() || values[count] < 0 || values[count] > (count < kDigitPixels ? 16 : 9)) {
        bad = true;
        break;
      }
      ++count;
      if (next == stop) break;
      if (*next != ',') {
        bad = true;
        break;
      }
      p = next + 1;
    }
    if (bad || count != kDigitPixels + 1) {
      return InvalidArgumentError(fmt::format(
          "{}:{}: expected 64 pixel values in 0..16 and a label in 0..9, comma separated", path, line_number));
    }
    for (int i = 0; i < kDigitPixels; ++i) d.pixels.push_back(static_cast<float>(values[i]) / 16.0f);
    d.labels.push_back(values[kDigitPixels]);
  }
  if (d.size() == 0) return InvalidArgumentError(fmt::format("{} holds no images", path));
  return d;
}

}  // namespace meridian::training
