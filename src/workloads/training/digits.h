// The handwritten digits (8x8 images, 16 grey levels, labels 0-9) that Debian's
// python3-sklearn ships as sklearn/datasets/data/digits.csv.gz: one image a line, 64
// pixel values then the label, comma separated. Read plain or gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace meridian::training {

inline constexpr int kDigitPixels = 64;
inline constexpr int kDigitClasses = 10;
inline constexpr int64_t kMaxDigitImages = 1'000'000;
inline constexpr int64_t kMaxDigitsFileBytes = int64_t{256} << 20;  // decompressed

struct Digits {
  std::vector<float> pixels;  // images x 64, each pixel / 16, in [0, 1]
  std::vector<int32_t> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// Where Debian's python3-sklearn puts the file (an error when it is not installed).
StatusOr<std::string> DebianDigitsPath();

// An error names the file and the first line that is not 64 pixels in 0..16 and a
// label in 0..9, or the bound exceeded (more than kMaxDigitImages images, or
// kMaxDigitsFileBytes once decompressed).
StatusOr<Digits> LoadDigits(const std::string& path);

}  // namespace meridian::training
