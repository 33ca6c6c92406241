// A replica's predict bodies, as anyone who reaches a replica or a gateway sends them
// (JSON, {"instances": [[64 numbers in 0..1], ...]}): each either gives images x 64
// pixels in range, or an error with a message.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "workloads/serving/replica.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int32_t kInputs = 64;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  meridian::StatusOr<std::vector<float>> x = meridian::serving::ParsePredictBody(body, kInputs);
  if (!x.ok()) {
    MERIDIAN_CHECK_MSG(!x.status().message().empty(), "an error without a message");
    return 0;
  }
  MERIDIAN_CHECK_MSG(!x->empty() && x->size() % kInputs == 0 &&
                         x->size() / kInputs <= static_cast<size_t>(meridian::serving::kMaxImagesPerRequest),
                     "not whole images, or too many");
  for (float v : *x) MERIDIAN_CHECK_MSG(v >= 0.0f && v <= 1.0f, "a pixel out of range");
  return 0;
}
